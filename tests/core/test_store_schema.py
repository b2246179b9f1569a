"""A store says which layout it holds and which release last started on it (core/store_schema.py).
Before, SQLite's `PRAGMA user_version` stayed 0 and Redis held no mark: a release older than the state
it met could only misread it, and a history row of a format it did not know read as an empty thread,
without a word in the log."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest
import redis as redis_py

from core.config import load_settings
from core.sessions import StoreUnavailable, open_store
from core.store_base import HISTORY_VERSION
from core.store_schema import STORE_SCHEMA, StoreTooNew

RELEASE = "9.9.9+abcdef123456"


def settings_for(kind: str, tmp_path, redis_server=None, **extra):
    where = {"redis_url": redis_server.url} if kind == "redis" else {}
    return load_settings(_env_file=None, home=tmp_path / "home", release=RELEASE, **where, **extra)


def marker(kind: str, tmp_path, redis_server) -> tuple[int, str | None]:
    """The schema number and the release the store holds, read as an operator would."""
    if kind == "redis":
        with redis_py.Redis.from_url(redis_server.url, decode_responses=True) as r:
            mark = r.hgetall("dt:schema")
        return int(mark.get("schema", 0)), mark.get("release")
    with sqlite3.connect(tmp_path / "home" / "state.sqlite3") as con:
        version = con.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        row = (
            con.execute("SELECT value FROM store_info WHERE key='release'").fetchone()
            if "store_info" in tables
            else None
        )
    return version, row[0] if row else None


def mark_newer(kind: str, tmp_path, redis_server) -> None:
    """What a later release with a layout this one does not know would leave."""
    if kind == "redis":
        with redis_py.Redis.from_url(redis_server.url) as r:
            r.hset("dt:schema", mapping={"schema": STORE_SCHEMA + 1, "release": "99.0.0+feedfeedfeed"})
        return
    with sqlite3.connect(tmp_path / "home" / "state.sqlite3") as con:
        con.execute(f"PRAGMA user_version = {STORE_SCHEMA + 1}")


@pytest.fixture(params=["sqlite", "redis"])
def kind(request):
    if request.param == "redis":
        request.getfixturevalue("redis_server").flush()
    return request.param


@pytest.fixture
def server(kind, request):
    return request.getfixturevalue("redis_server") if kind == "redis" else None


async def test_a_store_is_marked_with_this_releases_schema_and_name(kind, server, tmp_path):
    store = await open_store(settings_for(kind, tmp_path, server))
    await store.close()
    assert marker(kind, tmp_path, server) == (STORE_SCHEMA, RELEASE)


async def test_a_store_of_a_newer_schema_is_refused_and_left_as_it_was(kind, server, tmp_path):
    await (await open_store(settings_for(kind, tmp_path, server))).close()
    mark_newer(kind, tmp_path, server)
    with pytest.raises(StoreTooNew) as refused:
        await open_store(settings_for(kind, tmp_path, server))
    assert isinstance(refused.value, StoreUnavailable)  # every command says it in one sentence, exit 2
    sentence = str(refused.value)
    assert (
        f"store schema {STORE_SCHEMA + 1}" in sentence and RELEASE in sentence and "newer release" in sentence
    )
    assert "\n" not in sentence and sentence.count(". ") == 0
    assert marker(kind, tmp_path, server)[0] == STORE_SCHEMA + 1  # never lowered


async def test_a_look_only_open_leaves_no_mark(kind, server, tmp_path):
    """`doctor` checks a deployment without changing it."""
    store = await open_store(settings_for(kind, tmp_path, server), mark=False)
    await store.close()
    assert marker(kind, tmp_path, server) == (0, None)


async def test_a_history_of_an_unknown_format_is_said_once_per_session(kind, server, tmp_path, caplog):
    store = await open_store(settings_for(kind, tmp_path, server))
    try:
        await store.save_history("sl-kept", [{"role": "user", "content": "hello"}])
        newer = json.dumps([{"role": "user", "content": "from a newer release"}])
        if kind == "redis":
            with redis_py.Redis.from_url(server.url) as r:
                blob = json.dumps({"version": HISTORY_VERSION + 1, "messages": json.loads(newer)})
                r.set("dt:h:sl-newer", blob, ex=3600)
        else:
            with sqlite3.connect(tmp_path / "home" / "state.sqlite3") as con:
                con.execute(
                    "INSERT INTO history VALUES (?,?,?,strftime('%s','now')+3600)",
                    ("sl-newer", HISTORY_VERSION + 1, newer),
                )
        with caplog.at_level(logging.WARNING, logger="datathread"):
            assert await store.load_history("sl-newer") == []  # not misread
            assert await store.load_history("sl-newer") == []
            assert await store.load_history("sl-kept") == [{"role": "user", "content": "hello"}]
        said = [r.getMessage() for r in caplog.records if "sl-newer" in r.getMessage()]
        assert len(said) == 1, said
        assert f"format {HISTORY_VERSION + 1}" in said[0] and RELEASE in said[0]
        assert caplog.records[0].levelno == logging.WARNING
    finally:
        await store.close()
