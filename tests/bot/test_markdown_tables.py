"""One GFM table, every surface: Slack (mrkdwn and streamed Markdown), Teams (an Adaptive Card Table)."""

from __future__ import annotations

import pytest

from bot import slack_render, teams_render

TABLES = [
    ("|a|b|\n|-|-:|\n|1|2|", ["a", "b"], [["1", "2"]]),
    ("| a | b |\n|---|---|\n| 1 | 2 |", ["a", "b"], [["1", "2"]]),
    ("a | b\n:-- | --:\nx | 10", ["a", "b"], [["x", "10"]]),
]


@pytest.mark.parametrize(("markdown", "header", "rows"), TABLES)
def test_slack_renders_the_table_as_a_table(markdown, header, rows):
    (unit,) = slack_render.to_units(markdown)
    assert unit.kind == "table"
    lines = unit.text.splitlines()
    assert lines[0].split() == header and [line.split() for line in lines[2:]] == rows


@pytest.mark.parametrize(("markdown", "header", "rows"), TABLES)
def test_teams_renders_the_table_as_a_card_table(markdown, header, rows):
    text, (table,) = teams_render.to_teams_markdown(markdown)
    assert "table 1 below" in text
    assert (table.header, table.rows) == (header, rows)
