"""Terminal rendering helpers (bot/terminal.py, bot/terminal_images.py): charts inline on terminals that
can draw images, a path elsewhere, files the invoking user can open, and the time waited on the status."""

from __future__ import annotations

import base64
import io
import os
import stat

import pytest
from rich.console import Console
from rich.text import Text

from bot.terminal import Elapsed, TerminalRenderer
from bot.terminal_images import image_protocol, inline_image, save_for_user
from core.events import ArtifactReady, ModelFault, TurnFailed

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TERM": "xterm-kitty"}, "kitty"),
        ({"TERM": "xterm-256color", "KITTY_WINDOW_ID": "1"}, "kitty"),
        ({"TERM_PROGRAM": "ghostty"}, "kitty"),
        ({"TERM_PROGRAM": "iTerm.app"}, "iterm2"),
        ({"TERM_PROGRAM": "WezTerm"}, "iterm2"),
        ({"TERM_PROGRAM": "vscode"}, "iterm2"),
        ({"LC_TERMINAL": "iTerm2", "TERM": "screen"}, "iterm2"),
        ({"TERM": "xterm-256color"}, None),
        ({"TERM": "dumb"}, None),
        ({}, None),
    ],
)
def test_image_protocol_from_the_terminal_environment(env, expected):
    assert image_protocol(env) == expected


def test_escape_sequences_carry_the_png():
    iterm = inline_image(PNG, "iterm2", name="c.png")
    assert iterm.startswith("\x1b]1337;File=") and "inline=1" in iterm and iterm.endswith("\x07\n")
    assert base64.b64decode(iterm.split(":", 1)[1].rstrip("\x07\n")) == PNG
    big = PNG * 2000  # more than one kitty chunk
    kitty = inline_image(big, "kitty")
    chunks = kitty.rstrip("\n").split("\x1b\\")[:-1]
    assert chunks[0].startswith("\x1b_Ga=T,f=100,m=1;") and chunks[-1].startswith("\x1b_Gm=0;")
    assert base64.b64decode("".join(c.split(";", 1)[1] for c in chunks)) == big


def test_saved_files_are_readable_by_the_invoking_user_only(tmp_path):
    """They were 0644 in 0755 folders inside a 0711 home: any user of the host listed the sessions and
    read each CSV of query results (found by a newcomer trial, `su nobody -c "cat …/top3.csv"`)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o711)
    path = save_for_user(PNG, home, "sess1", "sub/../chart.png", {})
    assert path == home.resolve() / "attachments" / "sess1" / "chart.png" and path.read_bytes() == PNG
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the sudo user needs root")
def test_under_sudo_the_files_belong_to_the_person(tmp_path):
    path = save_for_user(PNG, tmp_path, "s", "c.png", {"SUDO_UID": "65534", "SUDO_GID": "65534"})
    assert (path.stat().st_uid, path.parent.stat().st_uid) == (65534, 65534)


async def test_a_chart_is_drawn_inline_on_kitty_and_named_by_path_elsewhere(tmp_path):
    async def read(artifact: ArtifactReady) -> bytes:
        return PNG

    event = ArtifactReady(
        turn_id="t",
        session_id="s1",
        path="delays.png",
        title="Delays",
        name="delays.png",
        size=len(PNG),
        mime="image/png",
    )
    for env, inline in (({"TERM": "xterm-kitty"}, True), ({"TERM": "xterm"}, False)):
        out = io.StringIO()
        console = Console(file=out, force_terminal=True, width=200)
        renderer = TerminalRenderer(console, tmp_path / "ws", live=False, read=read, home=tmp_path, env=env)
        await renderer(event)
        text = out.getvalue()
        saved = tmp_path.resolve() / "attachments" / "s1" / "delays.png"
        assert str(saved) in Text.from_ansi(text).plain and saved.read_bytes() == PNG
        assert ("\x1b_Ga=T,f=100" in text) is inline


async def test_a_chart_it_cannot_draw_is_described_under_its_path(tmp_path):
    """Where the terminal cannot draw the chart (and for a screen reader, which reads only text), the
    model's description is printed under the path; a drawn chart, or one described only by its title,
    adds nothing. The description cannot inject markup."""

    async def read(artifact: ArtifactReady) -> bytes:
        return PNG

    described = "Bar chart of delays by carrier [red]F9[/red] highest at 20.2 minutes."
    base = dict(turn_id="t", session_id="s1", path="d.png", title="Delays", name="d.png", size=len(PNG))
    for env, alt, is_described, said in (
        ({"TERM": "xterm"}, described, True, True),
        ({"TERM": "xterm-kitty"}, described, True, False),  # drawn
        ({"TERM": "xterm"}, "Chart: Delays", False, False),  # only the title again
    ):
        out = io.StringIO()
        console = Console(file=out, force_terminal=True, width=200)
        renderer = TerminalRenderer(console, tmp_path / "ws", live=False, read=read, home=tmp_path, env=env)
        await renderer(ArtifactReady(**base, mime="image/png", alt_text=alt, described=is_described))
        lines = Text.from_ansi(out.getvalue()).plain.splitlines()
        assert lines[0].startswith("📎 Delays → ")
        assert (f"  {described}" in lines) is said, lines


async def test_an_attachments_path_is_one_line_at_80_columns(tmp_path):
    """At 80 columns (a terminal, or piped) the path came out with a real line break in it, so it could
    not be copied and pasted."""

    async def read(artifact: ArtifactReady) -> bytes:
        return b"carrier,delayed\nEV,15644\n"

    name = "delayed_departures_by_carrier_for_the_whole_of_2013.csv"
    event = ArtifactReady(
        turn_id="t", session_id="te-ad94506e12f7f8e08ca41e4f", path=name, title="Delays", name=name,
        size=24, mime="text/csv",
    )  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=80)
    renderer = TerminalRenderer(console, tmp_path / "ws", live=False, read=read, home=tmp_path, env={})
    await renderer(event)
    saved = tmp_path.resolve() / "attachments" / event.session_id / name
    assert len(str(saved)) > 80 and saved.exists()
    assert out.getvalue() == f"📎 Delays → {saved}\n"


def test_the_status_line_shows_the_time_waited():
    status = Elapsed("Thinking…")
    status.since -= 12.4
    assert str(status.__rich__()) == "Thinking… 12s"


async def test_the_footer_is_the_receipt_with_tokens_and_cannot_inject_markup(tmp_path):
    from core.events import Receipt, TurnFinished, TurnStats

    stats = TurnStats(steps=1, input_tokens=900, output_tokens=100, cache_read_tokens=800, model_calls=2)
    receipt = Receipt(tables=("[red]flights",), rows=1, model_calls=2, wall_s=1.25, unsupported=("40,000",))
    console = Console(record=True, width=200)
    renderer = TerminalRenderer(console, tmp_path, live=False)
    await renderer(TurnFinished(turn_id="t", session_id="s", ok=True, stats=stats, receipt=receipt))
    assert console.export_text().strip() == (
        "[red]flights · 1 row · 2 model calls · 1.2 s · ⚠ not from any query in this turn: 40,000"
        " · 1,000 tokens (800 cached)"
    )


@pytest.mark.parametrize("fault", [ModelFault.UNREACHABLE, None])
async def test_a_failure_the_model_set_up_caused_points_at_doctor(fault, tmp_path):
    """In `chat`, whoever reads the failure can fix the set-up: a model fault names the command that
    checks it; any other failure is the sentence and its error id alone."""
    console = Console(record=True, width=200)
    renderer = TerminalRenderer(console, tmp_path, live=False)
    message = "I could not reach the Claude API. Please try again shortly."
    await renderer(TurnFailed(turn_id="t", error_id="ab12", message=message, fault=fault))
    lines = console.export_text().strip().splitlines()
    assert lines[0] == f"✗ {message} (error id ab12)"
    assert lines[1:] == (["`datathread doctor` checks the model's key, name and endpoint."] if fault else [])


async def test_no_footer_under_an_answer_that_asked_claude_nothing_and_one_that_did_reads_well(tmp_path):
    """`help` and the table list are answered here: "0 steps · 0.0s · 0 tokens (0 cached)" under them
    was noise. A turn without a receipt: its steps, rows (singular for one) and time, then tokens."""
    from core.events import TurnFinished, TurnStats

    console = Console(record=True, width=200)
    renderer = TerminalRenderer(console, tmp_path, live=False)
    await renderer(TurnFinished(turn_id="t", session_id="s", ok=True, stats=TurnStats(duration_s=0.01)))
    assert console.export_text().strip() == ""
    stats = TurnStats(steps=1, rows=1, input_tokens=50, output_tokens=10, model_calls=1, duration_s=0.25)
    await renderer(TurnFinished(turn_id="t", session_id="s", ok=True, stats=stats))
    assert console.export_text().strip() == "1 step · 1 row · 0.2 s · 60 tokens (0 cached)"


async def test_an_answer_written_to_a_file_or_pipe_has_no_padding(tmp_path):
    """`datathread chat < questions > answers.txt`: rich pads every line of the Markdown answer to the
    console's width, so each line of the file ended in spaces up to column 80."""
    from core.events import AnswerReady

    out = io.StringIO()
    console = Console(file=out, width=80)  # not a terminal: a file or a pipe
    renderer = TerminalRenderer(console, tmp_path, live=False)
    await renderer(AnswerReady(turn_id="t", text="**EV** had the most delayed departures.\n\n- one\n- two"))
    assert out.getvalue() == "EV had the most delayed departures.\n\n • one\n • two\n"
    # and what it says stays as written: `:fire:` is no emoji there, as on a terminal
    out.seek(0), out.truncate()
    await renderer(AnswerReady(turn_id="t", text="Run `print(':fire:')`, ratio 3:smile:4"))
    assert out.getvalue() == "Run print(':fire:'), ratio 3:smile:4\n"


async def test_a_table_wider_than_the_terminal_keeps_every_digit(tmp_path):
    """A nine-column revenue table at 80 columns showed `1,234,…`: rich cut the cells it squeezed."""
    from core.events import AnswerReady

    out = io.StringIO()
    console = Console(file=out, width=80)
    renderer = TerminalRenderer(console, tmp_path, live=False)
    header = "| carrier | " + " | ".join(f"q{i}" for i in range(8)) + " |\n|---|" + "---:|" * 8
    row = "| UA | " + " | ".join(f"{i}1,234,567" for i in range(8)) + " |"
    await renderer(AnswerReady(turn_id="t", text=f"{header}\n{row}"))
    shown = out.getvalue()
    assert "…" not in shown
    written = header + row  # a cell's digits may fold onto the next line, never go
    assert sorted(c for c in shown if c.isdigit()) == sorted(c for c in written if c.isdigit())


async def test_a_link_whose_words_name_another_site_says_where_it_goes(tmp_path):
    """In `chat` rich drew `[https://slack.com/signin](https://evil.example/login)` as a terminal
    hyperlink showing one site and opening another; Slack and Teams already said "(evil.example)"."""
    from core.events import AnswerReady

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    renderer = TerminalRenderer(console, tmp_path, live=False)
    text = "Sign in at [https://slack.com/signin](https://evil.example/login), see [the docs](https://x.org)."
    await renderer(AnswerReady(turn_id="t", text=text + " Code: `[a.com](b.com)`"))
    shown = Text.from_ansi(out.getvalue()).plain
    assert "https://slack.com/signin (evil.example), see the docs." in shown
    assert "[a.com](b.com)" in shown  # code is not touched
    # the dishonest link second: its note went before the first link's close (tokens equal by value)
    out.seek(0), out.truncate()
    text = (
        "See [the docs](https://x.org) and sign in at [https://slack.com/signin](https://evil.example/login)."
    )
    await renderer(AnswerReady(turn_id="t", text=text))
    shown = Text.from_ansi(out.getvalue()).plain
    assert "See the docs and sign in at https://slack.com/signin (evil.example)." in shown


def test_direction_overrides_are_not_printed_but_right_to_left_text_is():
    """A file named `naive_\u202egnp.csv` showed as `naive_vsc.png`: overrides and embeddings print as
    `?`; the marks and isolates of right-to-left text, and emoji joiners, stay as written."""
    from bot.terminal import printable

    assert printable("naive_\u202egnp.csv") == "naive_?gnp.csv"
    assert printable("\u202aa\u202cb\u202d") == "?a?b?"
    kept = "שלום \u200fעולם\u2067x\u2069 👩\u200d💻"
    assert printable(kept) == kept
