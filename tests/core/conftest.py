"""Store fixtures shared by the store, schedule and verified-query suites: one real redis-server per
test process (emptied before each test that uses it) and a factory of stores on SQLite or Redis."""

from __future__ import annotations

import pytest

from core.sessions import SessionStore
from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore
from tests.fakes.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "redis"])
async def make_store(request, tmp_path):
    """A factory of store instances sharing one backend — each instance is one 'replica'."""
    made: list[SessionStore] = []
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        server.flush()

        def make(**kw) -> SessionStore:
            made.append(RedisStore(server.url, **kw))
            return made[-1]
    else:

        def make(**kw) -> SessionStore:
            made.append(SqliteStore(tmp_path / "state.sqlite3", **kw))
            return made[-1]

    yield make
    for store in made:
        await store.close()
