"""`datathread verified list|show|remove` as an admin runs it, over the real SQLite store of a home."""

from __future__ import annotations

import asyncio
import json
import re
import time

from core.store_sqlite import SqliteStore
from core.verified import VerifiedLibrary
from tests.fakes.cli import invoke, run

SQL = "SELECT count(*) FROM flights WHERE origin = 'JFK'"


async def seed(home) -> tuple[str, str]:
    store = SqliteStore(home.resolve() / "state.sqlite3")
    record = {
        "turn_id": "t1",
        "session_id": "sl-1",
        "question": "How many flights left JFK?",
        "steps": [{"tool": "query_warehouse", "ok": True, "input": {"sql": SQL}, "files": ["a.parquet"]}],
    }
    await store.record_turn(record)
    library = VerifiedLibrary(store, dialect="duckdb")
    query = await library.verify_turn(record, by="U1", source="vote")
    await library.vote(record, user_id="U2", value="down", is_admin=False)
    correction = await library.take_correction("sl-1", "U2", "Only departed flights count.")
    await store.close()
    return query.id, correction.id


def test_list_show_and_remove(home):
    query_id, correction_id = asyncio.run(seed(home))
    listed = run(["verified", "list", "--json"], home)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [(e["id"], e["kind"]) for e in entries] == [(query_id, "verified"), (correction_id, "correction")]

    corrections = invoke(["verified", "list", "--corrections", "--json"], home)
    assert [e["text"] for e in json.loads(corrections.stdout)] == ["Only departed flights count."]

    table = invoke(["verified"], home, env={"COLUMNS": "200"})
    assert (
        table.returncode == 0
        and "How many flights left JFK?" in table.stdout
        and "correction" in table.stdout
    )

    shown = invoke(["verified", "show", query_id], home)
    assert shown.returncode == 0 and "origin = 'JFK'" in shown.stdout and "verified by U1" in shown.stdout

    assert invoke(["verified", "remove", query_id], home).returncode == 0
    missing = invoke(["verified", "show", query_id], home)
    assert (  # an unknown id is bad input, exit 2 as for `schedule remove` (it was 1, a failure's)
        missing.returncode == 2
        and "no verified query" in missing.stderr
        and "Traceback" not in missing.stderr
    )
    gone = invoke(["verified", "remove", query_id], home)
    assert gone.returncode == 2 and "no verified query" in gone.stderr


def test_an_empty_list_is_an_empty_json_list(home):
    """`verified list --json` with nothing verified printed nothing at all: a script's JSON parser failed."""
    listed = invoke(["verified", "list", "--json"], home)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


def test_nothing_verified_is_a_sentence_and_makes_no_home(tmp_path):
    """An empty table was printed; and listing made an empty state home (and database) in the folder."""
    home = tmp_path / "nothing-here"
    listed = invoke(["verified", "list"], home)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("No verified queries or corrections yet")
    assert invoke(["verified", "show", "v-1"], home).returncode == 2
    assert not home.exists()


def curated(home, body: str) -> dict:
    """A table notes file with `verified_queries.yaml` beside it; the environment naming it."""
    notes = home.parent / "notes"
    notes.mkdir(exist_ok=True)
    (notes / "notes.yaml").write_text("tables: {}\n")
    (notes / "verified_queries.yaml").write_text(body)
    return {"DATATHREAD_TABLE_NOTES": str(notes / "notes.yaml")}


def test_curated_entries_are_listed_with_their_own_date_or_none(home):
    """They were "verified on" the moment the file was last written — today, for a fresh checkout."""
    env = curated(
        home,
        "queries:\n"
        f"  - question: Flights from JFK?\n    sql: {SQL}\n    verified_by: data-team\n    verified_on: 2025-03-02\n"
        "  - question: Flights from LGA?\n    sql: SELECT count(*) FROM flights WHERE origin = 'LGA'\n",
    )
    today = time.strftime("%Y-%m-%d", time.gmtime())
    listed = invoke(["verified", "list", "--json"], home, env=env)
    assert listed.returncode == 0, listed.stderr
    dated, undated = json.loads(listed.stdout)
    assert time.strftime("%Y-%m-%d", time.gmtime(dated["verified_at"])) == "2025-03-02"
    assert undated["verified_at"] is None
    table = invoke(["verified", "list"], home, env={**env, "COLUMNS": "200"})
    assert "2025-03-02" in table.stdout and today not in table.stdout
    assert "2025-03-02 00:00" not in table.stdout  # a date, not a time nobody gave
    shown = invoke(["verified", "show", undated["id"]], home, env=env)
    assert shown.returncode == 0 and "verified by verified_queries.yaml (file)\n" in shown.stdout, (
        shown.stdout
    )


def test_the_id_is_never_cut_in_an_80_column_terminal(home):
    """At 80 columns the id column read `v-d7df3316…`, and `verified show v-d7df3316` found nothing."""
    query_id, correction_id = asyncio.run(seed(home))
    env = curated(
        home,
        "queries:\n  - question: Which carriers had the most departure delays of over an hour from each"
        " New York airport in 2013, by month?\n    sql: SELECT carrier, origin, month, count(*) FROM flights"
        " WHERE dep_delay > 60 GROUP BY ALL\n    verified_by: analytics-engineering\n    verified_on: 2025-03-02\n",
    )
    table = invoke(["verified", "list"], home, env={**env, "COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    ids = re.findall(r"\b[fvc]-[0-9a-f]{10}\b", table.stdout)
    assert ids[1:] == [query_id, correction_id] and len(ids) == 3, table.stdout
    assert "…" not in table.stdout  # nothing else is cut either: a long word folds
    for entry_id in ids:
        assert invoke(["verified", "show", entry_id], home, env=env).returncode == 0


def test_the_title_counts_in_words(home):
    """It read "1 verified queries and corrections"."""
    asyncio.run(seed(home))

    def title(*args: str) -> str:
        return (
            invoke(["verified", "list", *args], home, env={"COLUMNS": "200"}).stdout.splitlines()[0].strip()
        )

    assert title() == "1 verified query and 1 correction"
    assert title("--corrections") == "1 correction"


async def seed_hostile(home) -> str:
    store = SqliteStore(home.resolve() / "state.sqlite3")
    record = {
        "turn_id": "t9",
        "session_id": "sl-9",
        "question": "[/] flights \x1b]0;pwned\x07 [link=https://evil.example/login]runbook[/link] \x1b[2J",
        "steps": [{"tool": "query_warehouse", "ok": True, "input": {"sql": SQL}, "files": ["a.parquet"]}],
    }
    query = await VerifiedLibrary(store, dialect="duckdb").verify_turn(record, by="U9", source="vote")
    await store.close()
    return query.id


def test_questions_people_typed_are_shown_as_typed_never_as_markup_or_terminal_controls(home):
    """A question with `[/]` (one 👍 on it) stopped `verified list` with rich's MarkupError; rich markup
    in it made a hyperlink in the admin's terminal; escape sequences cleared or retitled it."""
    query_id = asyncio.run(seed_hostile(home))
    for args in (["verified", "list"], ["verified", "show", query_id]):
        shown = invoke(args, home, env={"COLUMNS": "300"})
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
        assert "[/]" in shown.stdout and "[link=https://evil.example/login]" in shown.stdout
