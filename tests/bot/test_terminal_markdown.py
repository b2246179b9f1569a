"""Tables in the terminal's answers (bot/terminal_markdown.py): a number is never split across lines
(at 40 columns `54173` showed as `5417` over `3`, the header `carrier` as `carri` over `er`); a table
too wide for that is one record per row; and where no one sees a rule under the header (a pipe, a file,
`TERM=dumb` for a screen reader) none is printed to be read aloud."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from bot.terminal import TerminalRenderer
from core.events import AnswerReady

WIDE = """**F9** (Frontier) had the highest average departure delay.

| carrier | name | first_tail | avg_delay | flights | cancelled | distance_mi | share |
|---|---|---|---:|---:|---:|---:|---:|
| F9 | Frontier Airlines Inc. | N201FR-2013-01-01 | 20.2 | 685 | 12 | 1 234 567 | 12.5 % |
| EV | ExpressJet Airlines Inc. | N11150-2013-01-01 | 20.0 | 54173 | 2,817 | 9 876 543 | 40.1 % |
| YV | Mesa Airlines Inc. | N504MJ-2013-01-03 | 19.0 | 601 | 3 | 12 345 | 0.4 % |
| FL | AirTran Airways Corporation | N982AT-2013-01-01 | 18.7 | 3260 | 44 | 2 345 678 | 2.4 % |

Done."""
CELLS = [
    [c.strip() for c in line.strip("|").split("|")] for line in WIDE.splitlines() if line.startswith("|")
]
HEADER, ROWS = CELLS[0], CELLS[2:]
NUMBERS = [cell for row in ROWS for cell in row[3:]]  # "1 234 567", "12.5 %": whole, spaces and all
WORDS = set(WIDE.replace("**", "").replace("|", " ").split())
RULE = re.compile("[\u2500-\u257f]")  # box drawing


async def shown(width: int, *, terminal: bool) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, force_interactive=terminal)
    await TerminalRenderer(console, Path(), live=False)(AnswerReady(turn_id="t", text=WIDE))
    return [line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()]


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", range(30, 121, 2))  # rich alone split a word at 91-96
async def test_no_number_or_word_is_split_across_lines(width, terminal):
    lines = await shown(width, terminal=terminal)
    assert all(len(line) <= width for line in lines)
    for number in NUMBERS:
        assert any(number in line for line in lines), (number, lines)
    for line in lines:  # every word as written (a record's "—" and ";" aside), none cut in two
        words = [word.rstrip(";") for word in RULE.sub(" ", line).split() if word != "—"]
        assert set(words) <= WORDS, line


async def test_a_table_too_wide_to_keep_its_numbers_whole_is_one_record_per_row():
    lines = await shown(40, terminal=True)
    records, record = [], []
    for line in lines[2:-1]:
        if line.startswith("  "):
            record.append(line.strip())
        elif line:
            records.append(record := [line])
    assert [" ".join(r) for r in records][:2] == [
        "F9 — name Frontier Airlines Inc.; first_tail N201FR-2013-01-01; avg_delay 20.2; flights 685; cancelled 12;"
        " distance_mi 1 234 567; share 12.5 %",
        "EV — name ExpressJet Airlines Inc.; first_tail N11150-2013-01-01; avg_delay 20.0; flights 54173; cancelled 2,817;"
        " distance_mi 9 876 543; share 40.1 %",
    ]
    assert len(records) == len(ROWS)
    assert not [
        line for line in lines if line.split() and line.split()[-1] in HEADER
    ]  # a name with its value


async def test_a_table_that_fits_stays_a_table():
    for terminal in (True, False):
        lines = await shown(100, terminal=terminal)
        assert any(line.split() == HEADER for line in lines)
        assert any(line.split()[:2] == ["F9", "Frontier"] and line.endswith("12.5 %") for line in lines)


@pytest.mark.parametrize("where", ["pipe", "dumb"])
async def test_no_rule_to_read_aloud_where_no_one_sees_it(where, monkeypatch):
    """A line of "─" is read by a screen reader one "box drawings light horizontal" at a time."""
    monkeypatch.setenv("TERM", "dumb" if where == "dumb" else "xterm-256color")
    out = io.StringIO()
    # rich takes a dumb terminal to be 80 wide unless given both width and height
    console = Console(file=out, width=100, height=25, force_terminal=where == "dumb")
    await TerminalRenderer(console, Path(), live=False)(AnswerReady(turn_id="t", text=WIDE))
    text = out.getvalue()
    assert "distance_mi" in text and not RULE.search(text)
    header = next(line for line in text.splitlines() if "carrier" in line)
    assert re.search(r"\S  +\S", header)  # the columns still apart


async def test_an_interactive_terminal_keeps_the_rule_under_the_header():
    lines = await shown(100, terminal=True)
    header = next(n for n, line in enumerate(lines) if line.split() == HEADER)
    assert set(lines[header + 1].strip()) == {"─"}
