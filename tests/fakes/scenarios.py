"""Scenarios shared by the turn and loop tests: the delays-by-carrier query and chart, and what a
valid Messages API history looks like (alternating roles, every tool_use answered by its result)."""

from __future__ import annotations

DELAYS = (
    "SELECT carrier, avg(dep_delay) AS avg_delay, count(*) AS n FROM flights "
    "GROUP BY carrier ORDER BY avg_delay DESC"
)
CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.title('Average departure delay'); plt.savefig('delays.png')
df.to_csv('delays.csv', index=False)
print(len(df))
"""


def assert_valid(messages: list[dict]) -> None:
    """A history the Messages API accepts: starts with the user, roles alternate, and each assistant
    message's tool_use ids are exactly the tool_result ids of the message after it."""
    assert messages and messages[0]["role"] == "user"
    for a, b in zip(messages, messages[1:], strict=False):
        assert a["role"] != b["role"]
        if a["role"] == "assistant":
            uses = {x["id"] for x in a["content"] if isinstance(x, dict) and x.get("type") == "tool_use"}
            results = {
                x["tool_use_id"]
                for x in b["content"]
                if isinstance(x, dict) and x.get("type") == "tool_result"
            }
            assert uses == results
