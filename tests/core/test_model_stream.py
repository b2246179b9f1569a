"""How long a streamed reply may pause: keep-alive pings are no progress, so a reply that only pings is
given up within the call's timeout (DATATHREAD_MODEL_TIMEOUT), as docs/CONFIGURATION.md says; a thought
or a tool's input, which the API sends only when done, may be silent for longer."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.config import load_settings
from core.model import ReplyStalled, build_model, describe_model_error
from tests.fakes.anthropic_api import stall, text, thinking, tool
from tests.fakes.cli import invoke, recorded_turns, run

GUARD_S = 10  # the old code waited 273 s: fail instead of hanging


def _model(fake_model, timeout: float):
    settings = load_settings(
        _env_file=None,
        anthropic_api_key="sk-ant-test-000000",
        anthropic_base_url=fake_model.url,
        model_timeout=timeout,
        model_retries=0,
    )
    return build_model(settings)


async def _stream(model, max_tokens: int) -> tuple[str, float, ReplyStalled]:
    heard: list[str] = []

    async def hear(piece: str) -> None:
        heard.append(piece)

    started = time.monotonic()
    try:
        async with asyncio.timeout(GUARD_S):
            with pytest.raises(ReplyStalled) as stalled:
                await model.stream(
                    hear, model="m", max_tokens=max_tokens, messages=[{"role": "user", "content": "hi"}]
                )
    finally:
        await model.close()
    return "".join(heard), time.monotonic() - started, stalled.value


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (stall(text("Fine, here it is."), after=1), ""),  # message_start, then pings only
        (stall(text("Fine, here it is."), after=4), "Fine, "),  # a word, then pings only
    ],
    ids=["before-any-content", "mid-text"],
)
async def test_a_reply_kept_alive_only_by_pings_ends_within_the_timeout(fake_model, reply, said):
    """The trial: `message_start`, then a `ping` every few seconds. The reply was given 273 s (max_tokens
    4096 at 15 tokens/s) before anyone heard it had stopped; the docs promise the model timeout."""
    fake_model.enqueue(reply)
    heard, elapsed, stalled = await _stream(_model(fake_model, 0.5), max_tokens=4096)
    assert stalled.why == "stopped for 0.5 s" and heard == said
    assert 0.4 < elapsed < 3, elapsed
    assert describe_model_error(stalled) == (
        "Claude's reply stopped for 0.5 s without finishing, so I stopped waiting. Please ask again."
    )


@pytest.mark.parametrize(
    "reply",
    [thinking(text("Fine.")), tool("run_python", {"code": "print(1)"})],
    ids=["omitted-thought", "tool-input"],
)
async def test_a_thought_or_a_tool_input_may_be_silent_as_long_as_its_tokens_take(fake_model, reply):
    """An omitted thought sends nothing until its signature, and a tool's input comes one whole key at a
    time: inside those blocks pings are all there is, for as long as max_tokens take at 15 a second."""
    fake_model.enqueue(stall(reply, after=3))  # message_start, ping, content_block_start: then pings
    _, elapsed, stalled = await _stream(_model(fake_model, 0.2), max_tokens=14)
    assert stalled.why == "stopped for 0.9 s"  # 14 tokens at 15 a second, not the 0.2 s timeout
    assert 0.8 < elapsed < 3, elapsed


async def test_a_slow_but_flowing_reply_is_not_cut(fake_model):
    """Every delta is progress: a reply whose every pause is under the timeout runs to its end, however
    long it takes in all (within max_tokens at the slowest rate): here 1.5 s against a 0.4 s timeout."""
    answer = "There were 336,776 flights out of New York City in 2013, most of them from EWR."
    fake_model.token_delay_s = 0.1
    fake_model.enqueue(thinking(text(answer), thought="one two three"))
    model = _model(fake_model, 0.4)
    said: list[str] = []

    async def hear(piece: str) -> None:
        said.append(piece)

    try:
        message = await model.stream(
            hear, model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
    finally:
        await model.close()
    assert "".join(said) == answer and message.stop_reason == "end_turn"


def test_ask_says_the_reply_stopped_and_the_session_goes_on(home, fake_model):
    """Through `datathread ask`: one sentence within about the timeout, exit 1, and the same session
    answers the next question."""
    fake_model.enqueue(stall(text("Fine."), after=1))
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "DATATHREAD_MODEL_TIMEOUT": "1",
    }
    result = run(["ask", "how many flights?", "--session", "pings"], home, env=env)  # ran 273 s
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "Claude's reply stopped for 1 s without finishing, so I stopped waiting." in result.stderr
    (turn,) = asyncio.run(recorded_turns(home))
    assert 0.9 < turn["finished"] - turn["started"] < 5, turn  # the timeout, and the process's start
    fake_model.enqueue(text("336,776 flights."))
    again = invoke(["ask", "how many flights?", "--session", "pings"], home, env=env)
    assert again.returncode == 0 and "336,776 flights." in again.stdout
