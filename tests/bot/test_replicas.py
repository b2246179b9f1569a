"""Two real `datathread serve` processes on one Redis and one DATATHREAD_HOME: a Slack event delivered to
both is answered once, a follow-up on either replica sees the thread's history and files, and a
replica killed mid-turn leaves the thread usable."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from core.turn_records import UNFINISHED
from tests.bot.serve_harness import Replica, serve_env, wait_for
from tests.bot.slack_harness import event_body, mention, said
from tests.fakes.anthropic_api import text, tool
from tests.fakes.redis_server import RedisServer
from tests.fakes.slack_api import FakeSlackAPI


def turn_workers(parent: int) -> list[int]:
    """The turn workers of the web process `parent`: forked by its worker template (`core/worker_fork.py`),
    so its grandchildren, named `turn-worker`."""

    def stat(pid: str) -> tuple[str, str]:  # (name, parent pid)
        head, tail = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
        return head.split("(", 1)[1], tail.split()[1]

    found = []
    for proc in Path("/proc").iterdir():
        try:
            name, ppid = stat(proc.name)
            if name == "turn-worker" and ppid.isdigit() and stat(ppid)[1] == str(parent):
                found.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.fixture
def cluster(home, fake_model, tmp_path):
    redis = RedisServer().start()
    api = FakeSlackAPI().start()
    env = serve_env(home, fake_model.url, api.url, DATATHREAD_LOCK_TTL="3", REDIS_URL=redis.url)
    replicas = [Replica(env, tmp_path), Replica(env, tmp_path)]
    try:
        for r in replicas:
            r.wait_ready()
        yield replicas, api, redis
    finally:
        for r in replicas:
            r.stop()
        api.stop()
        redis.stop()


def test_two_replicas_share_one_truth(cluster, fake_model):
    (a, b), api, redis = cluster
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 42 AS answer", "save_as": "answer"}), text("It is 42.")
    )
    first = event_body(mention("what is the answer?", ts="1700000001.000100"), event_id="EvSAME")
    assert a.post(first).status_code == 200 and b.post(first).status_code == 200  # Slack delivered it twice
    wait_for(lambda: said(api, "It is 42.") > 0)
    time.sleep(1.0)
    assert len(fake_model.requests) == 2  # one turn, not two

    for n, replica in enumerate((a, b), start=1):  # one of them is "the other replica"
        sql = "SELECT answer + 1 AS next FROM 'answer.parquet'"
        fake_model.enqueue(tool("run_sql", {"sql": sql}), text(f"Follow-up {n} done."))
        ts = f"170000001{n}.000100"
        replica.post(event_body(mention("and plus one?", ts=ts, thread_ts="1700000001.000100")))
        wait_for(lambda n=n: said(api, f"Follow-up {n} done.") > 0)
        sent = fake_model.requests[-2]["messages"]
        assert "what is the answer?" in json.dumps(sent[0])  # the history is there
        result = fake_model.last_tool_results(-1)[0]
        assert not result.get("is_error") and "Saved 1 row " in result["content"]  # the file is there

    def kill_a_then_answer(body: dict) -> dict:
        # Replica a dies mid-turn (web process and turn workers). Any replica's worker may be running the
        # turn (jobs go through Redis), so b's workers die too; b's web process stays up and restarts them.
        # The workers have their own process group (a terminal's Ctrl-C is for the web process), so they are
        # killed by pid, at once: the parent-death signal would reach a's only after its web process is
        # gone, time enough to save an answer this test says was never delivered.
        doomed = turn_workers(a.proc.pid) + turn_workers(b.proc.pid)
        os.killpg(a.proc.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return text("never delivered")

    assert turn_workers(a.proc.pid) and turn_workers(b.proc.pid)  # `serve` runs turns in workers by default
    fake_model.enqueue(tool("run_sql", {"sql": "SELECT 1 AS x", "save_as": "x"}), kill_a_then_answer)
    a.post(event_body(mention("one more?", ts="1700000020.000100", thread_ts="1700000001.000100")))
    wait_for(lambda: a.proc.poll() is not None)
    fake_model.enqueue(text("Still here."))
    started = time.monotonic()
    b.post(event_body(mention("still there?", ts="1700000021.000100", thread_ts="1700000001.000100")))

    def what_happened() -> str:  # a failure here once went unexplained: keep what the processes said
        shown = "\n".join(api.shown()[-6:])
        return f"Slack showed (last 6):\n{shown}\nmodel calls: {len(fake_model.requests)}\n{a.tail()}\n{b.tail()}"

    wait_for(lambda: said(api, "Still here.") > 0, explain=what_happened)
    assert time.monotonic() - started < 30  # the dead replica's lock expired (3 s ttl here)
    sent = json.dumps(fake_model.requests[-1]["messages"])
    assert "what is the answer?" in sent and "Follow-up 2 done." in sent and "never delivered" not in sent
    import redis as redis_py

    with redis_py.Redis.from_url(redis.url) as r:  # the truth they shared was Redis
        records = [json.loads(r.get(key)) for key in r.keys("dt:t:*")]
        assert len(r.keys("dt:h:*")) == 1 and len(records) == 5
        # the killed turn is in the audit, unfinished, with the question it never answered
        assert [t["question"] for t in records if t["error"] == UNFINISHED] == ["one more?"]
