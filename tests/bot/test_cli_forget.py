"""`datathread forget` as an operator runs it, over the real SQLite store of a home: it says what it will
delete, asks (unless --yes), deletes, and says what it deleted; a bad or unknown id is one sentence,
exit 2. Before it, nothing deleted a thread, a person's data, a channel's or a workspace's before its TTL."""

from __future__ import annotations

import asyncio

from core.sessions import session_id_for
from core.store_sqlite import SqliteStore
from tests.fakes.cli import invoke
from tests.fakes.workspaces import aged_workspace

EMAIL = "jane.doe@example.com"


async def seed(home) -> str:
    store = SqliteStore(home.resolve() / "state.sqlite3")
    terminal = session_id_for("terminal", ("mine",))
    for sid, user in ((terminal, "local"), ("sl-alone", "U1"), ("sl-shared", "U1"), ("sl-shared", "U2")):
        await store.save_history(sid, [{"role": "user", "content": EMAIL}])
        await store.update_meta(sid, surface="slack", channel_id="C1", team_id="T1", participant=user)
        await store.record_turn(
            {"turn_id": f"{sid}-{user}", "session_id": sid, "user_id": user, "channel_id": "C1"}
        )
    await store.put_record("schedule", "s1", {"id": "s1", "owner": "U1", "channel": "C1", "surface": "slack"})
    await store.close()
    aged_workspace(home / "workspaces", "sl-alone", age_days=0)
    aged_workspace(home / "workspaces", terminal, age_days=0)
    return terminal


async def histories(home) -> dict[str, int]:
    store = SqliteStore(home.resolve() / "state.sqlite3")
    try:
        return {s: len(await store.load_history(s)) for s in ("sl-alone", "sl-shared")}
    finally:
        await store.close()


def test_forget_a_person_asks_then_deletes_and_says_what(home):
    asyncio.run(seed(home))
    said = invoke(["forget", "--user", "U1"], home, stdin="n\n")
    assert said.returncode == 1 and "Nothing was deleted" in said.stderr
    assert "1 thread only they took part in" in said.stderr and "not the history of 1 thread" in said.stderr
    assert "--shared-threads" in said.stderr and "logs" in said.stderr
    assert asyncio.run(histories(home)) == {"sl-alone": 1, "sl-shared": 1}

    done = invoke(["forget", "--user", "U1", "--yes"], home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "Deleted: 1 thread history, 1 thread's metadata, 2 turn records, 1 workspace"
    )
    assert "1 schedule" in done.stdout
    assert asyncio.run(histories(home)) == {"sl-alone": 0, "sl-shared": 1}
    assert not (home / "workspaces" / "sl-alone").exists()


def test_forget_a_terminal_thread_by_its_session_key(home):
    terminal = asyncio.run(seed(home))
    done = invoke(["forget", "--thread", "mine", "-y"], home)
    assert done.returncode == 0 and "1 thread history" in done.stdout, done.stderr
    assert not (home / "workspaces" / terminal).exists()


def test_bad_and_unknown_ids_are_one_sentence(home):
    asyncio.run(seed(home))
    for args, words in (
        (["forget"], "exactly one of"),
        (["forget", "--user", "U1", "--team", "T1"], "exactly one of"),
        (["forget", "--user", " "], "needs an id"),
        (["forget", "--channel", "C1", "--shared-threads"], "goes with --user"),
        (["forget", "--user", "U404", "--yes"], "Nothing is kept about user 'U404'"),
        (["forget", "--thread", "sl-nope", "--yes"], "No thread 'sl-nope'"),
    ):
        said = invoke(args, home)
        assert said.returncode == 2 and words in said.stderr and said.stderr.count("\n") == 1, (
            args,
            said.stderr,
        )


def test_a_bucket_that_fails_leaves_the_thread_named_and_the_log_says_why(home):
    """The files bucket refused: the thread is left whole and named, with "run the same command again";
    the reason is in the log file (forget set up none: the sentence pointed to a log that was not
    written, and the warning reached the terminal raw)."""
    asyncio.run(seed(home))
    refused = {
        "DATATHREAD_FILES_BUCKET": "dt-files/prod",
        "DATATHREAD_S3_ENDPOINT_URL": "http://127.0.0.1:9",  # nothing listens there
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    said = invoke(["forget", "--user", "U1", "--yes"], home, env=refused)
    assert said.returncode == 1
    last = said.stderr.splitlines()[-1]  # after what it would delete
    assert "1 thread kept whole, as the files bucket did not delete its objects (sl-alone" in last
    assert last.endswith("run the same command again.")
    assert "could not delete" not in said.stderr  # the log's line, not the terminal's
    logged = (home / "logs" / "datathread.log").read_text()
    assert "could not delete the files bucket's objects of sl-alone" in logged
    assert asyncio.run(histories(home)) == {"sl-alone": 1, "sl-shared": 1}  # still there to try again
