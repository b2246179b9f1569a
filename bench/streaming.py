"""10. Streamed answers: time from the model's first text token to the first answer text visible in
Slack, through `datathread serve` (signed event in, the real slack_sdk against the fake Slack Web
API) while the scripted Messages API streams its reply with a pause before every event.

Baseline in the same run: how long the model took to write the whole reply (first text token to its
last event) — what a person waited for the first words before the answer was streamed, when the whole
text arrived and was then sent to Slack.
"""

from __future__ import annotations

from bench.harness import BenchResult, Figure, median, ratio

TOKEN_DELAY_S = 0.03  # ~33 events a second, about a real model's pace
TARGET_S = 0.3
ANSWER = (
    "**EV** had the most delayed departures last quarter (23,139 flights left late), followed by "
    "**B6** (21,445) and **UA** (20,155). Evening departures account for most of it; the chart and the "
    "CSV below have every carrier.\n\n"
    "| carrier | delayed |\n|---|---:|\n| EV | 23139 |\n| B6 | 21445 |\n| UA | 20155 |\n\n"
    "Ask me for a single airport, or a month, to narrow it down."
)


async def _turns(repeats: int) -> list[tuple[float, float, int]]:
    """(first token → first text in Slack, first token → reply written, text appends) per turn."""
    from bench.harness import bench_settings, make_home, recording_slack, temp_dir
    from tests.bot.slack_harness import mention, serve
    from tests.fakes.anthropic_api import FakeAnthropic, text

    out = []
    with temp_dir("streaming") as tmp:
        fake, api = FakeAnthropic(token_delay_s=TOKEN_DELAY_S).start(), recording_slack()
        try:
            settings = bench_settings(make_home(tmp), fake.url)
            async with serve(settings, api) as h:
                for n in range(repeats + 1):
                    api.clear()
                    fake.enqueue(text(ANSWER))
                    await h.event(
                        mention("which carriers had the most delayed departures?", ts=f"1720{n:03d}.1")
                    )
                    await h.drain()
                    appends = [c for c in api.of("chat.appendStream") if c.args.get("markdown_text")]
                    times = fake.stream_times[-1]
                    if not appends or times["first_text"] is None or times["done"] is None:
                        raise RuntimeError("no streamed text reached the fake Slack")
                    if n:  # the first turn warms the SDK clients and the store
                        first, done = times["first_text"], times["done"]
                        out.append((appends[0].at - first, done - first, len(appends)))
        finally:
            fake.stop()
            api.stop()
    return out


async def run(*, quick: bool = False) -> BenchResult:
    result = BenchResult("streaming", "10. Streamed answers: first token to first text in Slack")
    turns = await _turns(2 if quick else 7)
    first = median([t[0] for t in turns])
    whole = median([t[1] for t in turns])
    result.add(
        Figure(
            name="streaming: model's first text token → first answer text in Slack",
            value=first,
            unit="s",
            baseline=whole,
            baseline_name="first token → the model's reply written (when the text came before)",
            ratio=ratio(first, whole),
            target=f"≤ {TARGET_S * 1000:.0f} ms",
            met=first <= TARGET_S,
        )
    )
    result.note(
        f"Median of {len(turns)} turns through `datathread serve` (turns in process) and the fake Slack Web "
        f"API; the scripted model pauses {TOKEN_DELAY_S * 1000:.0f} ms before each streamed event, so the "
        f"{len(ANSWER)}-character answer takes {whole:.2f} s to write. Text appends per turn: "
        f"{median([float(t[2]) for t in turns]):.0f} (the first words at once, then at most one append "
        "per 0.5 s: chat.appendStream is Tier 4, shared by every turn in a workspace). Slack-side rendering "
        f"is not included (no real Slack here). Both instants are this process's `time.monotonic()`."
    )
    return result
