"""The model behind one small interface: `create(**params) -> Message`, on the anthropic SDK.

Anthropic, Bedrock and Vertex clients of the same SDK are chosen by settings; retries on 429/5xx/
overloaded are the SDK's own (`max_retries`). Tests point the real SDK at a scripted HTTP fake.
"""

from __future__ import annotations

from typing import Any, Protocol

import anthropic

from core.config import Settings, require_model


class ModelClient(Protocol):
    """The one call the tool loop makes."""

    async def create(self, **params: Any) -> Any:
        """One Messages API request; returns the SDK's `Message`."""

    async def close(self) -> None:
        """Release the HTTP client."""


class AnthropicModel:
    """ModelClient over an `AsyncAnthropic`-shaped client (Anthropic, Bedrock or Vertex)."""

    def __init__(self, client: Any):
        self.client = client

    async def create(self, **params: Any) -> Any:
        return await self.client.messages.create(**params)

    async def close(self) -> None:
        await self.client.close()


def build_model(settings: Settings) -> AnthropicModel:
    """The client the settings select; raises ConfigError in one sentence when none is configured."""
    require_model(settings)
    common = {"max_retries": settings.model_retries, "timeout": settings.model_timeout}
    if settings.model_provider == "bedrock":
        return AnthropicModel(anthropic.AsyncAnthropicBedrock(aws_region=settings.aws_region, **common))
    if settings.model_provider == "vertex":
        return AnthropicModel(
            anthropic.AsyncAnthropicVertex(
                project_id=settings.vertex_project, region=settings.vertex_region, **common
            )
        )
    assert settings.anthropic_api_key is not None
    return AnthropicModel(
        anthropic.AsyncAnthropic(
            api_key=settings.anthropic_api_key.get_secret_value(),
            base_url=settings.anthropic_base_url,
            **common,
        )
    )


def describe_model_error(exc: Exception) -> str:
    """A short sentence for people about a model API failure (after the SDK's own retries)."""
    if isinstance(exc, anthropic.AuthenticationError):
        return "The Claude API key was rejected. An admin needs to check ANTHROPIC_API_KEY."
    if isinstance(exc, anthropic.PermissionDeniedError):
        return "The Claude API refused this request (permission denied for the configured model)."
    if isinstance(exc, anthropic.RateLimitError):
        return "Claude is rate-limited right now. Please try again in a minute."
    if isinstance(exc, anthropic.NotFoundError):
        return "The configured Claude model was not found. An admin needs to check DATATHREAD_MODEL."
    if isinstance(exc, anthropic.APITimeoutError):
        return "Claude took too long to answer. Please try again."
    if isinstance(exc, anthropic.APIConnectionError):
        return "I could not reach the Claude API. Please try again shortly."
    if isinstance(exc, anthropic.BadRequestError):
        return "The Claude API rejected the request; this conversation may be too long. Start a new thread."
    if isinstance(exc, anthropic.APIStatusError):
        return "The Claude API is having trouble (it is overloaded or erroring). Please try again shortly."
    return "Something went wrong while talking to Claude."
