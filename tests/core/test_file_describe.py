"""How text from a file is shown to the model (`core/file_describe.py`): one line, quoted, nothing
invisible. End to end through the intake: tests/core/test_file_intake_bounds.py."""

from __future__ import annotations

import pytest

from core.file_describe import escaped_lines, quoted


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("region", '"region"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a\nb\rc", '"a\\nb\\rc"'),
        ("invoice\u202efdp.csv", '"invoice\\u202efdp.csv"'),  # a direction override
        ("x\u200by\ufeff", '"x\\u200by\\ufeff"'),  # zero-width space, BOM
        ("\U000e0041\U000e0042", '"\\udb40\\udc41\\udb40\\udc42"'),  # tag characters, as JSON escapes them
        ("one\u2028two\x85", '"one\\u2028two\\u0085"'),  # breaks for some readers
        ("Händler 東京", '"Händler 東京"'),  # letters of any script stay
        ("y" * 130, '"' + "y" * 120 + '…"'),
    ],
)
def test_text_from_a_file_is_one_quoted_line_with_nothing_invisible(text, shown):
    assert quoted(text) == shown


def test_an_error_keeps_its_lines_but_no_line_break_of_the_file():
    assert escaped_lines("CSV Error on Line: 3\nOriginal Line: a\rb\u2028- c") == [
        "CSV Error on Line: 3",
        "Original Line: a\\u000db\\u2028- c",
    ]
