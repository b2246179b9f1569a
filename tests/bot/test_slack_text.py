"""Slack's text encoding, decoded to what people typed (bot/slack_text.py)."""

from __future__ import annotations

import pytest

from bot.slack_text import decoded


@pytest.mark.parametrize(
    ("sent", "typed"),
    [
        ("dep_delay &gt; 60 &amp; arr_delay &lt; 0", "dep_delay > 60 & arr_delay < 0"),
        ("&amp;lt; as typed", "&lt; as typed"),  # someone who typed an entity gets the entity
        ("<https://x.example/a?b=1&amp;c=2>", "https://x.example/a?b=1&c=2"),
        ("see <https://x.example|the doc>", "see the doc (https://x.example)"),
        ("<https://x.example|https://x.example>", "https://x.example"),
        ("in <#C0777|ops> and <#C0888>", "in #ops and #C0888"),
        ("ask <@U123> or <@U9|ann>", "ask @U123 or @ann"),
        ("<!here> <!channel> <!everyone>", "@here @channel @everyone"),
        ("<!subteam^S123|@data-team> please", "@data-team please"),
        ("since <!date^1392734382^{date}|Feb 18, 2014>", "since Feb 18, 2014"),
        ("<mailto:ann@x.example|ann@x.example>", "ann@x.example"),
        ("plain text, nothing to do", "plain text, nothing to do"),
    ],
)
def test_decoded(sent: str, typed: str):
    assert decoded(sent) == typed
