"""Secrets hygiene: the Redactor on text, data and events, the log filter, and one whole turn whose
model output and tool output both carry the bot's secrets — none may reach events, records, logs,
the stored history or the audit output."""

from __future__ import annotations

import io
import json
import logging
import sys
import time

import pytest
from pydantic import SecretStr

from core.events import IncomingMessage, StepFinished, StepRecord, TurnFailed
from core.redact import (
    CLIP_NOTE,
    MASK,
    MIN_CUT,
    SECRET_MARGIN,
    RedactingFilter,
    Redactor,
    install_log_redaction,
    redact_clipped,
)
from tests.fakes.anthropic_api import text, tool

SECRET = "s3cr3t-value-ABCDEF"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (f"token={SECRET}!", f"token={MASK}!"),
        ("slack xoxb-123456789-abcdefghij end", f"slack {MASK} end"),
        ("app xapp-1-A0123456-abcdef", f"app {MASK}"),
        ("key sk-ant-api03-abcdefgh_ijk", f"key {MASK}"),
        ("aws AKIAABCDEFGHIJKLMNOP.", f"aws {MASK}."),
        ("g AIza" + "x" * 35, f"g {MASK}"),
        ("oauth ya29." + "a" * 30, f"oauth {MASK}"),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.abcdefghij", f"jwt {MASK}"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", MASK),
        ("nothing secret here: sk-ant (too short), xoxb", "nothing secret here: sk-ant (too short), xoxb"),
        ("", ""),
    ],
)
def test_redactor_text(raw: str, expected: str):
    assert Redactor([SECRET]).text(raw) == expected


KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc+/=\nQQQ\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (f"a {KEY} b {KEY} c", f"a {MASK} b {MASK} c"),
        # a key cut off (clipped output): the marker and the body both go, what follows stays
        ("x -----BEGIN PRIVATE KEY-----\nMIIEabc\nDEF==\n| next column", f"x {MASK}| next column"),
        ("-----BEGIN EC PRIVATE KEY-----\n" * 3, MASK),
        (f"-----BEGIN PRIVATE KEY-----\nAAAA\n{KEY}", f"{MASK}"),
        (
            "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
            "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
        ),
        ("Bearer eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.abcdefghij;", f"Bearer {MASK};"),
        ("eyJ" * 20, "eyJ" * 20),  # no dots: not a JWT
        ("token=xoxb-123456789-abcdefghij&x=1", f"token={MASK}&x=1"),
        ("(AKIAABCDEFGHIJKLMNOP)", f"({MASK})"),
        # a URL's login (a proxy's password in ANTHROPIC_BASE_URL reached httpx's request line)
        (
            'POST http://proxyuser:PROXYPASS99@127.0.0.1:34321/v1 "200 OK"',
            f'POST http://{MASK}@127.0.0.1:34321/v1 "200 OK"',
        ),
        ("https://ghp_token@github.com/a", f"https://{MASK}@github.com/a"),
        ("mail a@b.example, http://host/p@th?x=a@b", "mail a@b.example, http://host/p@th?x=a@b"),  # no login
    ],
)
def test_redactor_keys_and_tokens(raw: str, expected: str):
    assert Redactor([]).text(raw) == expected


ADVERSARIAL = {  # shapes that made the old patterns quadratic (400 KB took 60 s), and near misses
    "key markers, no END": "-----BEGIN PRIVATE KEY-----\n",
    "key BEGIN/END interleaved": "-----BEGIN PRIVATE KEY----- -----END RSA KEY-----",
    "JWT heads without dots": "eyJ",
    "JWT heads with one dot": "eyJaaaaaaaaaaa.",
    "tokens too short": "xoxb-1234 ",
    "Google key prefixes": "AIza",
    "OAuth prefixes": "ya29.",
    "URL schemes without a login": "a://b",
}


@pytest.mark.parametrize("unit", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_redaction_is_linear_on_hostile_text(unit: str):
    """400 KB of each shape redacts in well under a second (the quadratic patterns took 60-75 s; a linear
    pass takes milliseconds, so the bound holds on a loaded machine)."""
    redactor = Redactor([SECRET])

    def timed(size: int) -> float:
        text = (unit * (size // len(unit) + 1))[:size]
        start = time.perf_counter()
        redactor.text(text)
        return time.perf_counter() - start

    large = min(timed(400_000) for _ in range(3))
    assert large < 1.0, f"{large:.2f}s for 400 KB"


@pytest.mark.parametrize("cut", [0, 1, 5, len(SECRET) - 1])
def test_redact_clipped_never_leaves_part_of_a_secret_at_the_cut(cut: int):
    limit = 1000
    for filler in ("a", "xoxb-123456789-abcdefghij "):  # plain text, or masks that shorten the text
        head = (filler * (limit + SECRET_MARGIN))[: limit + SECRET_MARGIN - cut]
        text = head + SECRET + "z" * 50_000
        out = redact_clipped(text, limit, Redactor([SECRET]).text)
        assert len(out) <= limit + len(CLIP_NOTE) and out.endswith(CLIP_NOTE)
        assert not any(SECRET[:k] in out for k in range(4, len(SECRET) + 1))


def test_redact_clipped_short_text_is_only_redacted():
    assert redact_clipped(f"a {SECRET}", 100, Redactor([SECRET]).text) == f"a {MASK}"
    assert redact_clipped("b" * 200, 100, None) == "b" * (100 - len(CLIP_NOTE)) + CLIP_NOTE


def test_redactor_longest_secret_first_and_empty_ignored():
    r = Redactor(["abcdef", "abcdef-longer", ""])
    assert r.text("x abcdef-longer y abcdef") == f"x {MASK} y {MASK}"


def test_redactor_data_keeps_shape_and_types():
    r = Redactor([SECRET])
    data = {"a": [SECRET, 1, None, (SECRET, 2.5)], "b": {"c": f"pre {SECRET}"}, "ok": True}
    assert r.data(data) == {"a": [MASK, 1, None, (MASK, 2.5)], "b": {"c": f"pre {MASK}"}, "ok": True}


def test_redactor_event_nested_dataclasses():
    r = Redactor([SECRET])
    record = StepRecord(
        step_id="1", tool="run_python", input={"code": SECRET}, ok=False, summary=SECRET, duration_s=0.1
    )
    event = r.event(StepFinished(turn_id="t", record=record))
    assert SECRET not in repr(event) and event.record.input == {"code": MASK}
    failed = TurnFailed(turn_id="t", error_id="e", message=f"bad {SECRET}")
    assert r.event(failed).message == f"bad {MASK}"
    plain = TurnFailed(turn_id="t", error_id="e", message="fine")
    assert r.event(plain) is plain  # nothing to change: the same object


def _record(msg: str, args, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError(f"boom with {SECRET}")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("x", logging.ERROR, __file__, 1, msg, args, exc_info)


@pytest.mark.parametrize(
    ("msg", "args", "exc"),
    [
        (f"plain {SECRET}", None, False),
        ("arg %s and %d", (SECRET, 3), False),
        ("mapping %(tok)s", ({"tok": SECRET},), False),
        ("with traceback", None, True),
        ("object arg %s", (RuntimeError(SECRET),), False),
    ],
)
def test_redacting_filter_formats_no_secret(msg, args, exc):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(Redactor([SECRET])))
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.handle(_record(msg, args, exc))
    out = stream.getvalue()
    assert SECRET not in out and out.startswith("ERROR")
    if exc:
        assert "RuntimeError" in out and MASK in out


async def test_turn_with_secrets_in_model_and_tool_output_leaks_nowhere(
    analyst, fake_model, recorder, settings, caplog
):
    """The model repeats a token and the bot's key; a step prints them: nothing leaks anywhere."""
    from bot.audit import print_audit

    key = settings.anthropic_api_key.get_secret_value()
    token = "xoxb-999999999-LEAKEDtokenZZZ"
    printer = f"print('key={key}')\nprint('token={token}')\nraise ValueError('{key}')"
    fake_model.enqueue(
        tool("run_python", {"code": printer}, say=f"Trying {token} and {key}"),
        text(f"The answer mentions {key} and {token}."),
    )
    caplog.set_level(logging.DEBUG)
    install_log_redaction(settings.secret_values())  # what `datathread serve/chat` install at start
    message = IncomingMessage(
        text=f"use {token}", surface="slack", thread_key=("T", "C", "1.0"), user_id="U1", channel_id="C1"
    )
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    # the step really produced them (otherwise the test proves nothing)
    seen_by_model = fake_model.requests[1]["messages"][-1]["content"][0]["content"]
    assert "key=[redacted]" in seen_by_model and "token=[redacted]" in seen_by_model
    secrets = (key, token)
    events = repr(recorder.events)
    assert MASK in events and not [s for s in secrets if s in events]
    turns = await analyst.store.list_turns(session_id=outcome.session_id)
    assert turns and not [s for s in secrets if s in json.dumps(turns)]
    history = json.dumps(await analyst.store.load_history(outcome.session_id))
    assert not [s for s in secrets if s in history]
    leaked = [r.name for r in caplog.records if any(s in caplog.handler.format(r) for s in secrets)]
    assert not leaked and caplog.records
    for handler in logging.getLogger().handlers:
        for f in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(f)
    for fmt in ("jsonl", "csv"):
        out = io.StringIO()
        assert await print_audit(
            settings, session=None, user="U1", channel=None, since_hours=None, fmt=fmt, limit=10, out=out
        )
        assert "run_python" in out.getvalue() and not [s for s in secrets if s in out.getvalue()]


async def test_a_flood_of_key_markers_in_column_names_is_clipped_then_redacted(analyst, fake_model, recorder):
    """Column names are not clipped by the step: a parquet with 60 columns of 10 KB key markers each, read
    with run_sql, reaches the model bounded and redacted, and redacting it does not stall the loop."""
    from core.tools import MIN_CONTENT_CHARS

    marker = "-----BEGIN PRIVATE KEY-----"
    code = (
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        f"names = [str(i) + {marker!r} * 400 for i in range(80)]\n"
        "pq.write_table(pa.table({n: [1] for n in names}), 'keys.parquet')"
    )
    fake_model.enqueue(
        tool("run_python", {"code": code}),
        tool("run_sql", {"sql": "SELECT * FROM 'keys.parquet'", "save_as": "again"}),
        text("done"),
    )
    message = IncomingMessage(text="keys", surface="api", thread_key=("flood",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    seen = fake_model.requests[2]["messages"][-1]["content"][0]["content"]
    assert seen.startswith("Saved 1 row ") and MASK in seen  # the step really returned the columns
    assert marker not in seen and len(seen) <= MIN_CONTENT_CHARS


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("failed: ValueError: xxx8f3ac0ffee5d4b1e9a", f"failed: ValueError: xxx{MASK}"),  # cut inside it
        ("refused: Table x8f3ac0ffee", f"refused: Table x{MASK}"),
        ("the prefix 8f3ac0 alone, then more", "the prefix 8f3ac0 alone, then more"),  # not at the end
        ("ends with 8f3ac", "ends with 8f3ac"),  # too short a piece to mask ordinary endings
        ("8f3ac0ffee5d4b1e9a7c2d6e0b4f1a93 then 8f3ac0ffee", f"{MASK} then {MASK}"),
        # cut with a mark after it: clipped step output, a preview cell (a review found these)
        ("yy8f3ac0ffee5d4b1e9a7c\n… [output cut at 200 bytes]", f"yy{MASK}\n… [output cut at 200 bytes]"),
        ("| a cell 8f3ac0ffee5… | next |", f"| a cell {MASK}… | next |"),
        ("plain … text, 8f3ac … too short", "plain … text, 8f3ac … too short"),
    ],
)
def test_a_text_cut_inside_a_secret_loses_the_secrets_beginning(raw: str, expected: str):
    assert Redactor(["8f3ac0ffee5d4b1e9a7c2d6e0b4f1a93"]).text(raw) == expected


async def test_a_failed_steps_summary_cut_inside_a_secret_keeps_none_of_it(settings, fake_model, recorder):
    """A step's failure summary is its error cut to 100 characters, then redacted: the audit kept
    `…x8f3ac0ffee5d4b1e9a` — 18 characters of a signing secret only known by value."""
    from core.analyst import Analyst

    secret = "8f3ac0ffee5d4b1e9a7c2d6e0b4f1a93"
    analyst = await Analyst.create(settings.model_copy(update={"slack_signing_secret": SecretStr(secret)}))
    try:
        fake_model.enqueue(
            tool("run_python", {"code": f"raise ValueError('x' * 70 + {secret!r})"}), text("It failed.")
        )
        message = IncomingMessage(text="go", surface="terminal", thread_key=("cut",), user_id="u")
        outcome = await analyst.handle(message, recorder)
        [step] = outcome.steps
        assert step.summary.startswith("failed: ValueError: xxx") and step.summary.endswith(MASK), (
            step.summary
        )
        turns = json.dumps(await analyst.store.list_turns(session_id=outcome.session_id))
        assert secret[:MIN_CUT] not in turns and "xxxxx" in turns
    finally:
        await analyst.close()


@pytest.mark.parametrize("unit", ["a://", "a://?", "http://h/p?q=1 ", "a" * 50, "?"], ids=str)
def test_cutting_url_queries_from_log_lines_is_linear(unit: str):
    """The log filter cuts every URL's query (pre-authenticated links carry their credential there):
    1 MB of each shape in well under a second."""
    from core.redact import without_queries

    text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    start = time.perf_counter()
    without_queries(text)
    assert time.perf_counter() - start < 1.0
