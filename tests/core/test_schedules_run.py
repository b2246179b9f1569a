"""Why a scheduled run crashed, in words: the channel notice and `run-now` said "ClientConnectorError"."""

from __future__ import annotations

import socket

import pytest

from core.schedules_run import failure_words


def wrapped(cause: BaseException) -> Exception:
    """An SDK's own exception around the socket's, as raise … from … leaves it."""
    try:
        raise RuntimeError("the SDK gave up") from cause
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "surface", "words"),
    [
        (ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9)"), "slack", "could not reach Slack: connection refused"),
        (wrapped(socket.gaierror(-2, "Name or service not known")), "teams", "could not reach Teams: name or service not known"),
        (TimeoutError(), "slack", "Slack did not answer in time"),
        (ValueError("a bug"), "slack", "an unexpected error (ValueError; the log has the details)"),
    ],
)  # fmt: skip
def test_failure_words(exc, surface, words):
    assert failure_words(exc, surface=surface) == words
