"""Three threads as the stores keep them, for the erasure tests (`datathread forget`, `reset`)."""

from __future__ import annotations

import time

DAY = 86_400
Q = [{"role": "user", "content": "salary of jane.doe@example.com?"}]


async def two_threads(store) -> None:
    """sl-alone: U1 alone in C1 (team T1); sl-shared: U1 and U2 in C2 (team T1); te-other: U3, T2."""
    now = time.time()
    for sid, channel, team, people in (
        ("sl-alone", "C1", "T1", ["U1"]),
        ("sl-shared", "C2", "T1", ["U1", "U2"]),
        ("te-other", "C9", "T2", ["U3"]),
    ):
        await store.save_history(sid, Q)
        for i, who in enumerate(people):
            await store.update_meta(sid, surface="slack", channel_id=channel, team_id=team, participant=who)
            await store.record_turn(
                {
                    "turn_id": f"{sid}-{who}-{i}",
                    "session_id": sid,
                    "user_id": who,
                    "channel_id": channel,
                    "team_id": team,
                    "question": "salary of jane.doe@example.com?",
                    "started": now - i,
                }
            )
