"""How often a stream may append: its workspace's other streams stretch its interval, and a 429 holds
them all for its Retry-After (bot/slack_pacing.py). A clock the test moves; nothing else is faked."""

from __future__ import annotations

import pytest

from bot import slack_pacing
from bot.slack_pacing import TextPace, WorkspacePacer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "streams, interval",
    [(0, slack_pacing.TEXT_MIN_INTERVAL_S), (1, slack_pacing.TEXT_MIN_INTERVAL_S), (2, 1.2), (20, 12.0)],
)
def test_the_interval_grows_with_the_workspaces_open_streams(streams, interval):
    pacer = WorkspacePacer(Clock())
    for n in range(streams):
        pacer.touch("T1", f"{n}.0")
    pacer.touch("T2", "other")  # another workspace's stream shares nothing
    assert pacer.interval_s("T1") == pytest.approx(interval)


def test_a_stream_that_stopped_appending_drops_out_and_an_ended_one_at_once():
    clock = Clock()
    pacer = WorkspacePacer(clock)
    for ts in ("1.0", "2.0", "3.0"):
        pacer.touch("T1", ts)
    pacer.forget("T1", "3.0")
    assert pacer.open_streams("T1") == 2
    clock.now += slack_pacing.ACTIVE_S + 1  # a turn that died without ending its stream
    pacer.touch("T1", "2.0")
    assert pacer.open_streams("T1") == 1


def test_a_429_holds_every_stream_of_its_workspace_for_its_retry_after_within_a_bound():
    clock = Clock()
    pacer = WorkspacePacer(clock)
    mine, theirs, elsewhere = TextPace(pacer, "T1"), TextPace(pacer, "T1"), TextPace(pacer, "T2")
    mine.started("1.0")
    assert mine.wait_s() == 0  # the first words go at once
    mine.mark()
    assert mine.wait_s() == slack_pacing.TEXT_MIN_INTERVAL_S
    theirs.refused(3)
    assert mine.wait_s() == theirs.wait_s() == 3 and elsewhere.wait_s() == 0
    theirs.refused(1)  # a shorter one does not cut the longer hold short
    assert mine.held_s() == 3
    clock.now += 3
    assert mine.wait_s() == 0
    mine.refused(3600)
    assert mine.held_s() == slack_pacing.HOLD_MAX_S
