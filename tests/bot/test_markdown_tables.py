"""One Markdown parse (bot/markdown.py), every surface: a GFM table is a table in Slack (an aligned
preview), Teams (an Adaptive Card Table) and the terminal (rich); code stays code."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.markdown import Markdown

from bot import slack_render, teams_render
from bot.markdown import Block, blocks

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


@pytest.mark.parametrize(("markdown", "header", "rows"), TABLES)
def test_the_terminal_renders_the_table_as_a_table(markdown, header, rows):
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(Markdown(markdown))
    drawn = [line for line in out.getvalue().splitlines() if line.strip()]
    assert any(all(h in line for h in header) for line in drawn)
    assert any(set("━─┃│┏┡").intersection(line) for line in drawn)  # drawn as a grid, not a paragraph


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("one\n\ntwo", [Block("text", "one"), Block("text", "two")]),
        ("# Title\nBody\n- a", [Block("text", "# Title\nBody\n- a")]),
        # a paragraph after a list stays a paragraph (it was joined to the list's last item)
        ("- a\n- b\n\nSo b.", [Block("text", "- a\n- b"), Block("text", "So b.")]),
        ("1. one\n\n> quote", [Block("text", "1. one"), Block("text", "> quote")]),
        ("```sql\nSELECT 1\n```", [Block("code", "SELECT 1", lang="sql")]),
        ("```\nunclosed", [Block("code", "unclosed")]),
        ("a | b without a separator", [Block("text", "a | b without a separator")]),
        (
            "|a|b|\n|-|-:|\n|1|2|",
            [Block("table", header=("a", "b"), rows=(("1", "2"),), align=("", "right"))],
        ),
    ],
)
def test_blocks(markdown, expected):
    assert blocks(markdown) == expected


ALIGNED = "|name|n|mid|\n|:-|-:|:-:|\n|x|10|ab|\n|long name|2|c|\n|z|3|wide cell|"


def test_every_surface_aligns_columns_as_the_delimiter_row_says():
    """`:-:` is a centred column, `-:` a right one: Slack's preview right-aligned every `:-:` column
    of numbers and left-aligned one of text, and Teams' card aligned nothing."""
    (unit,) = slack_render.to_units(ALIGNED)
    assert unit.text.splitlines()[2:] == [
        "x          10      ab",
        "long name   2      c",
        "z           3  wide cell",
    ]
    _, (table,) = teams_render.to_teams_markdown(ALIGNED)
    columns = teams_render.table_element(table)[0]["columns"]
    assert [c.get("horizontalCellContentAlignment") for c in columns] == ["Left", "Right", "Center"]
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(Markdown(ALIGNED))
    assert "long name   2      c" in out.getvalue()  # the terminal: rich reads the same delimiter row


def test_without_a_delimiter_alignment_numbers_go_right_and_text_left():
    (unit,) = slack_render.to_units("|name|n|\n|-|-|\n|x|10|\n|long name|2|")
    assert unit.text.splitlines()[2:] == ["x          10", "long name   2"]
    _, (table,) = teams_render.to_teams_markdown("|name|n|\n|-|-|\n|x|10|")
    assert teams_render.table_element(table)[0]["columns"] == [{"width": 1}, {"width": 1}]


def test_code_in_a_table_cell_shows_without_its_backticks_on_a_teams_card():
    """A card's TextBlock renders no code spans: `` `x<y` `` in a cell showed its backticks (Slack's
    preview and the terminal drop them already)."""
    _, (table,) = teams_render.to_teams_markdown("|expr|n|\n|-|-|\n|`x<y`|**3**|")
    row = teams_render.table_element(table)[0]["rows"][1]
    assert [c["items"][0]["text"] for c in row["cells"]] == ["x<y", "**3**"]


MISLEADING = "Sign in again: [https://slack.com/signin](https://evil.example/p.png?d=UA-58665) or [the docs](https://docs.example.org/x)."


def test_a_link_whose_words_name_another_address_says_where_it_goes_on_every_surface():
    """An answer's `[https://slack.com/signin](https://evil.example/…)` was a live link on Slack and Teams
    whose words were another site's (a model steered by a question or a table can write one)."""
    from bot.slack_render import stream_chunks, to_mrkdwn
    from bot.teams_render import to_teams_markdown

    shown = {
        "slack mrkdwn": to_mrkdwn(MISLEADING),
        "slack markdown": "".join(stream_chunks(MISLEADING)),
        "teams": to_teams_markdown(MISLEADING)[0],
    }
    for surface, text in shown.items():
        assert "https://slack.com/signin (evil.example)" in text, surface
        assert "the docs" in text and "the docs (" not in text, surface  # plain words stay as written


FAMILY = "👨\u200d👩\u200d👧\u200d👦"  # one emoji a person sees, seven code points
ONE_LINE = "Ä" * 5000 + FAMILY * 3000 + "e\u0301" * 500 + "🇩🇪" * 500 + "終"


def _whole_graphemes(piece: str) -> bool:
    """No half of an emoji family, of an accented letter, or of a flag at either end of `piece`."""
    return not (
        piece.startswith(("\u200d", "\u0301", "\U0001f1ea"))
        or piece.endswith(("\u200d", "\U0001f468", "\U0001f469", "\U0001f467"))
        or piece.rstrip("\n").endswith("e")
        or (piece.endswith("\U0001f1e9"))
    )


def test_a_line_longer_than_a_message_is_never_cut_inside_a_grapheme():
    """A trial's answer of one 12,000-character line was cut every 5,995 characters in Slack and at each
    Teams message's size, once between "👨" and "‍👩‍👧‍👦": each half showed as something else."""
    slack = [block["text"] for m in slack_render.answer_messages(ONE_LINE) for block in m["blocks"][:1]]
    streamed = slack_render.split_rendered(ONE_LINE, 6000)
    teams = teams_render.split_message(ONE_LINE)
    for pieces in (slack, streamed, teams):
        assert len(pieces) > 1 and all(_whole_graphemes(p) for p in pieces), [(p[:3], p[-3:]) for p in pieces]
    assert "".join(streamed) == ONE_LINE and "".join(teams) == ONE_LINE  # nothing lost or added
    assert "".join(slack).replace("\n", "") == ONE_LINE
