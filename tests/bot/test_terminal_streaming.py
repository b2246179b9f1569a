"""`datathread chat` shows the answer's text as Claude writes it (bot/terminal.py): a live view on a
terminal, the finished answer printed once; piped output gets the answer alone, as before."""

from __future__ import annotations

import io

from rich.console import Console

from bot.terminal import TerminalRenderer
from core.events import AnswerDelta, AnswerReady, StepStarted, TurnStarted

ANSWER = "**EV** had the most delayed departures (23,139), then **B6**.\n\nAsk me for the top 3 as a CSV."


def console(*, terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=70, height=12, color_system=None), out


def words(text: str) -> list[str]:
    return [w + " " for w in text.split(" ")]


async def test_the_text_shows_while_it_is_written_and_the_answer_is_printed_once(tmp_path):
    con, out = console(terminal=True)
    renderer = TerminalRenderer(con, tmp_path)
    await renderer(TurnStarted("t1", "s1", "which carriers?"))
    await renderer(AnswerDelta("t1", "Let me look ", call=1))
    assert "Let me look" in out.getvalue()  # the preamble as it is written
    await renderer(StepStarted("t1", "st1", "run_sql", "Querying the workspace"))
    assert renderer.writing is None  # the step's status line takes the place of the text
    pieces = words(ANSWER)
    await renderer(AnswerDelta("t1", pieces[0], call=2))
    assert "EV" in out.getvalue() and "23,139" not in out.getvalue()  # the first words, before the rest
    for piece in pieces[1:]:
        await renderer(AnswerDelta("t1", piece, call=2))
    await renderer(AnswerReady("t1", ANSWER))
    assert renderer.writing is None
    printed = out.getvalue()
    tail = printed[printed.rindex("EV had") :]  # the last drawing of the answer: the printed one
    assert "23,139" in tail and "Ask me for the top 3 as a CSV." in tail


async def test_piped_output_gets_the_answer_alone(tmp_path):
    con, out = console(terminal=False)
    renderer = TerminalRenderer(con, tmp_path)
    for piece in words(ANSWER):
        await renderer(AnswerDelta("t1", piece, call=1))
    assert out.getvalue() == ""
    await renderer(AnswerReady("t1", ANSWER))
    assert out.getvalue().count("EV had the most delayed departures") == 1


async def test_escape_sequences_from_the_model_never_reach_the_terminal(tmp_path):
    """Model text is untrusted: `ESC[2J` would clear the screen, OSC sequences retitle the terminal or
    forge links. Printed and live text alike show them as `?`."""
    con, out = console(terminal=True)
    renderer = TerminalRenderer(con, tmp_path)
    hostile = "Clear \x1b[2J now \x1b]0;pwned\x07 and \x9b31m done."
    await renderer(AnswerDelta("t1", hostile + " ", call=1))
    await renderer(AnswerReady("t1", hostile))
    printed = out.getvalue()
    assert "\x1b[2J" not in printed and "\x1b]0;pwned" not in printed and "\x9b" not in printed
    assert "Clear ?[2J now ?]0;pwned? and ?31m done." in printed
