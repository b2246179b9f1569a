"""Lone surrogates resolved where text enters (core/text_repair.py): escaped bytes read as UTF-8 where
they are, as Windows-1252 where they are not; a split UTF-16 pair joins; anything else is U+FFFD."""

from __future__ import annotations

import pytest

from core.events import IncomingMessage
from core.text_repair import readable, readable_data


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("plain ASCII", "plain ASCII"),
        ("already München", "already München"),
        ("M\udcfcnchen", "München"),  # a Latin-1 byte in a UTF-8 locale's argv
        ("M\udcc3\udcbcnchen", "München"),  # UTF-8 bytes under LC_ALL=C (every byte escaped)
        ("café M\udcfcnchen", "café München"),  # a valid letter stays as it was beside a repaired one
        ("\udcc3\udca9 and \udce9", "é and é"),  # under LC_ALL=C: one UTF-8 letter, one Latin-1 byte
        ("\udc93quoted\udc94 \udc80", "“quoted” €"),  # Windows-1252, where Latin-1 has control codes
        ("\udc81", "\ufffd"),  # one of the five bytes Windows-1252 leaves undefined
        ("\ud83d\ude00 pair", "😀 pair"),  # a UTF-16 pair JSON split in two
        ("high \ud800 alone", "high \ufffd alone"),
        ("low \udfff alone", "low \ufffd alone"),
    ],
)
def test_readable(given: str, read: str) -> None:
    assert readable(given) == read
    read.encode("utf-8")  # the point: it always encodes


def test_readable_data_repairs_every_string_and_keeps_the_rest() -> None:
    data = {"k\udcfc": ["\udcfc", 1, None, True, ("\udcfc",)], "n": 2.5}
    assert readable_data(data) == {"kü": ["ü", 1, None, True, ("ü",)], "n": 2.5}


def test_a_message_from_any_surface_carries_only_encodable_text() -> None:
    """The one seam: every surface builds an IncomingMessage; Slack and Teams JSON may hold "\\udcfc"."""
    message = IncomingMessage(
        text="flights to M\udcfcnchen?", surface="slack", thread_key=("T", "C", "1"), user_name="J\udcf6rg"
    )
    assert (message.text, message.user_name) == ("flights to München?", "Jörg")
