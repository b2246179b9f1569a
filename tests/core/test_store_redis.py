"""What a Redis the store cannot use says, against a real redis-server: one sentence that names the
problem (a password it wants, a password it refused, TLS against a plain server), never the password."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bot.cli import app
from bot.doctor_checks import CHECK_TIMEOUT_S, check_store
from core.sessions import StoreUnavailable, open_store
from tests.fakes.redis_server import RedisServer

PASSWORD = "s3cret-pw-000000"


@pytest.fixture(scope="module")
def locked():
    """A redis-server started with --requirepass, as a production one usually is."""
    server = RedisServer(password=PASSWORD).start()
    yield server
    server.stop()


async def failure(settings, url: str) -> str:
    with pytest.raises(StoreUnavailable) as caught:
        await open_store(settings.model_copy(update={"redis_url": url}))
    return str(caught.value)


@pytest.mark.parametrize(
    ("credentials", "sentence"),
    [
        (
            "",
            "Redis at 127.0.0.1:{port} needs a password: put it in REDIS_URL (redis://:PASSWORD@127.0.0.1:{port}/0).",
        ),
        (":wrong-pw@", "Redis at 127.0.0.1:{port} refused the password in REDIS_URL."),
        ("someone:wrong-pw@", "Redis at 127.0.0.1:{port} refused the password in REDIS_URL."),
    ],
)
async def test_a_password_problem_is_said_as_one(settings, locked, credentials, sentence):
    """Was "is not reachable: HELLO must be called with the client already authenticated, otherwise…" and
    "is not reachable: invalid username-password pair or user is disabled": a network problem, it read."""
    message = await failure(settings, f"redis://{credentials}127.0.0.1:{locked.port}/0")
    assert message == sentence.format(port=locked.port)
    assert "wrong-pw" not in message


async def test_the_right_password_opens_the_store(settings, locked):
    store = await open_store(
        settings.model_copy(update={"redis_url": f"redis://:{PASSWORD}@127.0.0.1:{locked.port}/0"})
    )
    await store.close()


async def test_tls_against_a_plain_server_gets_a_hint(settings):
    """`rediss://` against a server without TLS: the handshake waits for an answer that never comes, and
    "did not answer within 3 s" alone (doctor: 2 s) sent people to the network."""
    server = RedisServer().start()
    url = f"rediss://127.0.0.1:{server.port}/0"
    try:
        message = await failure(settings, url)
        check = await check_store(settings.model_copy(update={"redis_url": url}))
    finally:
        server.stop()
    hint = "(REDIS_URL says rediss://, TLS: if that server does not speak TLS, use redis://)."
    assert (
        message == f"Redis at 127.0.0.1:{server.port} is not reachable: it did not answer within 3 s {hint}"
    )
    assert (
        check.status == "fail"
        and check.detail
        == f"Redis at 127.0.0.1:{server.port} did not answer within {CHECK_TIMEOUT_S:g} s {hint}"
    )


def test_a_command_says_it_in_one_line(locked, tmp_path):
    """A command that opens the store ends in the sentence (`audit` was a StoreUnavailable traceback)."""
    env = {"DATATHREAD_HOME": str(tmp_path), "REDIS_URL": f"redis://127.0.0.1:{locked.port}/0"}
    result = CliRunner().invoke(app, ["audit"], env=env)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().startswith(f"error: Redis at 127.0.0.1:{locked.port} needs a password"), (
        result.output
    )


@pytest.fixture(scope="module")
def plain():
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.mark.parametrize(
    ("path", "change"),
    [("/99", "the number at the end of REDIS_URL"), ("?db=99", "?db= in REDIS_URL")],
)
async def test_a_database_the_server_lacks_is_said_as_that(settings, plain, path, change):
    """Was "Redis at … is not reachable: DB index is out of range.", in `doctor` too: Redis answered, the
    number is wrong, and which numbers it has is one CONFIG GET away."""
    url = f"redis://127.0.0.1:{plain.port}{path}"
    message = await failure(settings, url)
    check = await check_store(settings.model_copy(update={"redis_url": url}))
    sentence = (
        f"Redis at 127.0.0.1:{plain.port} has no database 99 (its `databases` setting allows 0–15): "
        f"change {change}."
    )
    assert message == sentence and (check.status, check.detail) == ("fail", sentence)


async def test_a_missing_database_behind_a_password_never_shows_it_nor_needs_config(settings, locked):
    """A user who may not run CONFIG (a managed Redis renames it) still hears which database is missing."""
    import redis

    admin = redis.Redis(port=locked.port, password=PASSWORD)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">app-pw-000000", "~*", "+@all", "-config")
    admin.close()
    for credentials, where in (
        (f":{PASSWORD}@", " (its `databases` setting allows 0–15)"),
        ("app:app-pw-000000@", ""),
    ):
        message = await failure(settings, f"redis://{credentials}127.0.0.1:{locked.port}/16")
        assert message == (
            f"Redis at 127.0.0.1:{locked.port} has no database 16{where}: change the number at the end of REDIS_URL."
        )


def test_a_command_that_may_have_reached_redis_is_told_from_one_that_never_did():
    """A write sent to a Redis that froze is applied when it thaws: its failure must not read "not
    saved" (core/turn_lock.py). Refused, never connected, or answered with an error: nothing changed."""
    from redis import exceptions as e

    from core.redis_words import unanswered

    cases = [
        (e.TimeoutError("Timeout reading from 127.0.0.1:6379"), True),
        (e.ConnectionError("Connection closed by server."), True),
        (
            e.ConnectionError("Error while reading from 127.0.0.1:6379 : (104, 'Connection reset by peer')"),
            True,
        ),
        (e.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."), False),
        (e.TimeoutError("Timeout connecting to server"), False),
        (e.AuthenticationError("invalid username-password pair"), False),
        (e.BusyLoadingError("Redis is loading the dataset in memory"), False),
        (e.ResponseError("OOM command not allowed when used memory > 'maxmemory'."), False),
    ]
    assert [unanswered(exc) for exc, _ in cases] == [sent for _, sent in cases]
