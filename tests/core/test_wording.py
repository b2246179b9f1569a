"""Words for people: the one plural helper every surface's "N rows", "N steps" and "N model calls" use,
and the operating system's reason found inside a library's exception."""

from __future__ import annotations

import pytest

from core.wording import counted


@pytest.mark.parametrize(
    ("n", "noun", "words"),
    [
        (0, "row", "0 rows"),
        (1, "row", "1 row"),
        (2, "step", "2 steps"),
        (1234, "row", "1,234 rows"),
        (1, "model call", "1 model call"),
        (3, "more row", "3 more rows"),
    ],
)
def test_counted(n, noun, words):
    assert counted(n, noun) == words


def test_the_operating_systems_reason_is_found_down_a_libraries_chain():
    import socket

    from core.wording import os_reason, os_words

    def wrapped(inner: BaseException) -> BaseException:
        try:
            try:
                raise inner
            except OSError as exc:
                raise RuntimeError("Error connecting. Multi-sentence library text.") from exc
        except RuntimeError as outer:
            try:
                raise ValueError("while handling it") from None
            except ValueError:
                return outer

    assert os_reason(wrapped(ConnectionRefusedError(111, "Connection refused"))) == "connection refused"
    assert os_reason(wrapped(socket.gaierror(-2, "Name or service not known"))) == "name or service not known"
    assert os_reason(RuntimeError("no OS error here")) is None
    assert os_words(OSError("a library's OSError with a message only")) is None  # no errno, no strerror


@pytest.mark.parametrize(
    ("sentence", "inside"),
    [
        (
            "Redis at h:1 is not reachable: connection refused.",
            "Redis at h:1 is not reachable: connection refused",
        ),
        ("no full stop", "no full stop"),
        ("Wait...", "Wait..."),
        ("Is it up?", "Is it up?"),
        (" trailing space. ", "trailing space"),
    ],
)
def test_an_embedded_sentence_loses_its_full_stop_only(sentence, inside):
    from core.wording import embedded

    assert embedded(sentence) == inside


@pytest.mark.parametrize(
    ("error", "line"),
    [
        ("CatalogException: Table nosuch does not exist!\nDid you mean \"pg_sequences\"?", "CatalogException: Table nosuch does not exist!"),
        ('Traceback (most recent call last):\n  File "step.py", line 1, in <module>\n    1/0\nZeroDivisionError: division by zero', "ZeroDivisionError: division by zero"),
        # records saved before a step's record kept its error alone: the model's view of it
        ("error:\nBinder Error: no column x", "Binder Error: no column x"),
        ("stdout:\nerror: in my output\nrows 3\n\nerror:\nThe step was stopped after 3 s.", "The step was stopped after 3 s."),
        ("", ""),
    ],
)  # fmt: skip
def test_the_line_that_says_what_went_wrong(error, line):
    from core.wording import error_line

    assert error_line(error) == line
