"""The Modal sandbox client when Modal is not there: the real Modal SDK pointed at a loopback endpoint
that never answers, or a refused port. Without a bound on the first lookup, each call retried for about
a minute, so a turn of three steps was silent for three minutes before the person heard anything."""

from __future__ import annotations

import time
from types import SimpleNamespace

import modal.exception
import pytest

from core.sandbox import StepRequest
from core.sandbox_modal import ModalSandbox, ModalUnreachable
from tests.fakes.black_hole import BlackHole
from tests.fakes.redis_server import free_port


def refused_url() -> str:
    """A loopback port nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def black_hole():
    hole = BlackHole().start()
    yield hole
    hole.stop()


@pytest.fixture
def modal_at(monkeypatch):
    """Point the real Modal client at `url`, with a token (as a deployer's machine has one)."""

    def point(url: str) -> None:
        monkeypatch.setenv("MODAL_SERVER_URL", url)
        monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
        monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")

    return point


def step() -> StepRequest:
    return StepRequest(kind="sql", session_id="s-modal", code="SELECT 1")


async def timed(coro):
    began = time.monotonic()
    result = await coro
    return result, time.monotonic() - began


@pytest.mark.parametrize(
    "where, said",
    [
        ("black hole", "The sandbox is unavailable: Modal did not answer within 1 s."),
        (
            "refused",
            "The sandbox is unavailable: Modal could not be reached ([Errno 111] Connect call failed",
        ),
    ],
)
async def test_an_unreachable_modal_fails_the_first_step_within_the_bound_and_later_calls_at_once(
    where, said, black_hole, modal_at
):
    modal_at(black_hole.url if where == "black hole" else refused_url())
    sandbox = ModalSandbox(app_name="datathread", reach_s=1.0, down_s=60.0)
    await sandbox.start()  # binds nothing: a CLI or server starts without reaching Modal

    first, first_s = await timed(sandbox.run(step()))
    assert not first.ok
    assert first.error.startswith(said), first.error
    assert "not a problem with the question" in first.error
    assert first_s < 5, first_s

    second, second_s = await timed(sandbox.run(step()))
    assert second.error == first.error and second_s < 0.2, second_s
    began = time.monotonic()
    with pytest.raises(ModalUnreachable) as unreachable:
        await sandbox.list_files("s-modal")
    assert str(unreachable.value) == first.error
    with pytest.raises(ModalUnreachable):
        await sandbox.read_file("s-modal", "top.csv")
    assert time.monotonic() - began < 0.2


async def test_modal_is_tried_again_once_the_remembered_failure_is_old(black_hole, modal_at):
    modal_at(black_hole.url)
    sandbox = ModalSandbox(app_name="datathread", reach_s=0.5, down_s=0.3)
    await sandbox.run(step())
    tried = len(black_hole.accepted_at)
    time.sleep(0.4)
    again, again_s = await timed(sandbox.run(step()))
    assert not again.ok and again_s >= 0.5  # it waited for Modal again rather than repeating the memory
    assert len(black_hole.accepted_at) >= tried


def losing_worker(calls: list[str]) -> SimpleNamespace:
    """A bound worker whose connection to Modal is gone: each call fails as the SDK fails it."""

    def method(name: str):
        async def aio(*args):
            calls.append(name)
            raise modal.exception.ConnectionError("Could not connect to the Modal server.")

        return SimpleNamespace(remote=SimpleNamespace(aio=aio))

    return SimpleNamespace(**{n: method(n) for n in ("run_step", "read_file", "write_file", "list_files")})


async def test_modal_lost_mid_thread_is_said_once_and_not_waited_for_again():
    calls: list[str] = []
    sandbox = ModalSandbox(app_name="datathread", worker=losing_worker(calls))
    result = await sandbox.run(step())
    assert result.error == (
        "The sandbox is unavailable: Modal could not be reached (Could not connect to the Modal server). "
        "No step can run until it is back; this is not a problem with the question."
    )
    assert (await sandbox.run(step())).error == result.error
    with pytest.raises(ModalUnreachable):
        await sandbox.write_file("s-modal", "a.csv", b"a\n1\n")
    assert calls == ["run_step"]  # the failure was remembered: nothing else waited on Modal


async def test_after_a_remembered_outage_the_worker_is_looked_up_again_within_the_bound(black_hole, modal_at):
    """A worker found before the outage was called again once the minute was over, waiting out Modal's
    own minute again; now it is looked up again first, within `reach_s`."""
    modal_at(black_hole.url)
    calls: list[str] = []
    sandbox = ModalSandbox(app_name="datathread", worker=losing_worker(calls), reach_s=0.5, down_s=0.2)
    await sandbox.run(step())  # the worker found earlier fails: remembered
    time.sleep(0.3)
    again, again_s = await timed(sandbox.run(step()))
    assert calls == ["run_step"]  # the old handle was not called again
    assert again.error.startswith("The sandbox is unavailable: Modal did not answer within 0.5 s"), (
        again.error
    )
    assert again_s < 3, again_s
