"""Why a scheduled run crashed, in words: the channel notice and `run-now` said "ClientConnectorError"."""

from __future__ import annotations

import socket

import pytest

from core.schedules_run import failure_words, reason_words


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


@pytest.mark.parametrize(
    ("error", "clause"),
    [
        (
            "I could not reach the Claude API (connection refused). Please try again shortly.",
            "I could not reach the Claude API (connection refused)",
        ),
        ("Claude is rate-limited right now. Please try again in a minute.", "Claude is rate-limited right now"),
        ("Claude's reply broke off mid-way (the connection dropped). Please ask again.", "Claude's reply broke off mid-way (the connection dropped)"),
        ("The configured Claude model was not found. An admin needs to check DATATHREAD_MODEL.", "The configured Claude model was not found. An admin needs to check DATATHREAD_MODEL"),
        ("could not reach Slack at 127.0.0.1: connection refused", "could not reach Slack at 127.0.0.1: connection refused"),
        ("not_in_channel", "not_in_channel"),
        ("", "no reason was given"),
    ],
)  # fmt: skip
def test_a_reason_becomes_a_clause_without_its_full_stop_or_retry_advice(error, clause):
    """Embedded as it came, it read "failed: … Please try again shortly.." and "(… shortly.)."."""
    assert reason_words(error) == clause
