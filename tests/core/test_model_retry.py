"""A 429 (or 529, 5xx) whose Retry-After is longer than the call's deadline has left is not slept out:
the SDK waited into the deadline, then the turn said "Claude did not start answering within 30 s" and
pointed at the key. Now the call ends at once with when to try again, and no set-up fault."""

from __future__ import annotations

import time

import anthropic
import httpx2
import pytest

from core.config import load_settings
from core.model import build_model, describe_model_error, model_fault
from core.model_retry import RetryLater, retry_after_s, wait_words
from tests.fakes.anthropic_api import error, text
from tests.fakes.cli import invoke


def _model(fake_model, *, timeout: float = 30, retries: int = 2):
    settings = load_settings(
        _env_file=None,
        anthropic_api_key="sk-ant-test-000000",
        anthropic_base_url=fake_model.url,
        model_timeout=timeout,
        model_retries=retries,
    )
    return build_model(settings)


async def _ask(model) -> tuple[object, float]:
    async def ignore(piece: str) -> None:
        return None

    started = time.monotonic()
    try:
        result: object = await model.stream(
            ignore, model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
    except anthropic.AnthropicError as exc:
        result = exc
    finally:
        await model.close()
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    ("status", "kind", "after", "said"),
    [
        (429, "rate_limit_error", "45", "Claude is rate-limited right now. Please try again in 45 s."),
        (529, "overloaded_error", "120", "Claude is overloaded right now. Please try again in 2 min."),
    ],
)
async def test_a_retry_after_past_the_deadline_ends_the_call_at_once(fake_model, status, kind, after, said):
    fake_model.enqueue(error(status, kind, retry_after=after))
    failed, elapsed = await _ask(_model(fake_model, timeout=3))
    assert isinstance(failed, RetryLater), failed  # the old code: ModelDeadline after the whole 3 s
    assert elapsed < 1.5, elapsed
    assert describe_model_error(failed) == said
    assert model_fault(failed) is None  # not the key, the name or the endpoint
    assert len(fake_model.requests) == 1  # no retry that could not be answered in time


async def test_a_retry_after_within_the_deadline_is_still_waited_and_retried(fake_model):
    fake_model.enqueue(error(429, "rate_limit_error", retry_after="0.3"), text("Fine."))
    message, elapsed = await _ask(_model(fake_model, timeout=3))
    assert getattr(message, "stop_reason", None) == "end_turn", message
    assert 0.3 <= elapsed < 2.5 and len(fake_model.requests) == 2


async def test_retries_spent_the_sentence_still_says_when(fake_model):
    """No retries left (DATATHREAD_MODEL_RETRIES=0): the SDK's own RateLimitError, with the API's wait."""
    fake_model.enqueue(error(429, "rate_limit_error", retry_after="10"))
    failed, _ = await _ask(_model(fake_model, retries=0))
    assert isinstance(failed, anthropic.RateLimitError)
    assert describe_model_error(failed) == "Claude is rate-limited right now. Please try again in 10 s."


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "45"}, 45.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_as_the_sdk_reads_it(headers, seconds):
    assert retry_after_s(httpx2.Headers(headers)) == seconds


def test_an_http_date_retry_after_is_seconds_from_now():
    from email.utils import formatdate

    when = retry_after_s(httpx2.Headers({"retry-after": formatdate(time.time() + 90, usegmt=True)}))
    assert when is not None and 85 < when <= 90


@pytest.mark.parametrize(
    ("seconds", "words"), [(0.2, "in 1 s"), (45, "in 45 s"), (99.5, "in 100 s"), (600, "in 10 min")]
)
def test_when_to_try_again_is_rounded_up(seconds, words):
    assert wait_words(seconds) == words


def test_ask_says_when_to_try_again_and_sends_nobody_to_doctor(home, fake_model):
    fake_model.enqueue(error(429, "rate_limit_error", retry_after="45"))
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": fake_model.url}
    started = time.monotonic()
    result = invoke(["ask", "how many flights?"], home, env={**env, "DATATHREAD_MODEL_RETRIES": "2"})
    assert result.returncode == 1
    assert "Claude is rate-limited right now. Please try again in 45 s." in result.stderr
    assert "did not start answering" not in result.stderr and "doctor" not in result.stderr
    assert time.monotonic() - started < 20  # the old code waited the 30 s deadline first


async def test_a_503_from_the_api_is_said_as_overloaded_or_unavailable(fake_model):
    fake_model.enqueue(error(503, "api_error"))
    failed, _ = await _ask(_model(fake_model, retries=0))
    assert isinstance(failed, anthropic.ServiceUnavailableError)
    assert describe_model_error(failed) == (
        "Claude is overloaded or unavailable right now. Please try again in a minute."
    )
    fake_model.enqueue(error(503, "api_error", retry_after="120"))
    failed, _ = await _ask(_model(fake_model, timeout=3))
    assert describe_model_error(failed) == (
        "Claude is overloaded or unavailable right now. Please try again in 2 min."
    )
