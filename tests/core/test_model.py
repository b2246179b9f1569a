"""The model client the settings select, and the sentences people see when the API fails."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from core.config import load_settings
from core.model import build_model, describe_model_error


@pytest.mark.parametrize(
    ("overrides", "client_type"),
    [
        ({"anthropic_api_key": "sk-ant-123456"}, anthropic.AsyncAnthropic),
        ({"model_provider": "bedrock", "aws_region": "us-east-1"}, anthropic.AsyncAnthropicBedrock),
        (
            {"model_provider": "vertex", "vertex_project": "p", "vertex_region": "us-east5"},
            anthropic.AsyncAnthropicVertex,
        ),
    ],
)
def test_provider_selects_the_sdk_client(overrides, client_type, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKEFAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    model = build_model(load_settings(_env_file=None, model_retries=3, **overrides))
    assert isinstance(model.client, client_type)
    assert model.client.max_retries == 3


def _status_error(cls, status: int):
    request = httpx2.Request("POST", "http://x/v1/messages")
    return cls("boom", response=httpx2.Response(status, request=request), body=None)


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (_status_error(anthropic.AuthenticationError, 401), "key was rejected"),
        (_status_error(anthropic.RateLimitError, 429), "rate-limited"),
        (_status_error(anthropic.NotFoundError, 404), "DATATHREAD_MODEL"),
        (_status_error(anthropic.InternalServerError, 529), "overloaded"),
        (anthropic.APIConnectionError(request=httpx2.Request("POST", "http://x")), "could not reach"),
    ],
)
def test_model_errors_become_one_human_sentence(exc, words):
    sentence = describe_model_error(exc)
    assert words in sentence and "\n" not in sentence
