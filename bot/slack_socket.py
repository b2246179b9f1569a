"""`datathread slack --socket`: the same Bolt app over Socket Mode, for local use without a public URL.

Socket Mode needs an app-level token (`SLACK_APP_TOKEN`, `xapp-…`, scope `connections:write`):
https://docs.slack.dev/apis/events-api/using-socket-mode. Turns run on a local runner in this process.
"""

from __future__ import annotations

import asyncio
import logging

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from bot.server import AppState
from bot.slack_app import build_bolt_app, on_shutdown, on_startup
from core.analyst import Analyst
from core.config import ConfigError, Settings, require_model
from core.runner import LocalRunner

log = logging.getLogger("datathread.slack")


def check_socket_settings(settings: Settings) -> None:
    """Fail fast, in one sentence, when a token Socket Mode needs is missing."""
    if not settings.slack_bot_token:
        raise ConfigError("Set SLACK_BOT_TOKEN (xoxb-…) to run the Slack app.")
    if not settings.slack_app_token:
        raise ConfigError("Set SLACK_APP_TOKEN (xapp-…, scope connections:write) for Socket Mode.")


async def run_socket_mode(settings: Settings) -> None:
    """Connect over Socket Mode and serve until interrupted; finish running turns before exiting."""
    check_socket_settings(settings)
    require_model(settings)
    runner = LocalRunner(max_concurrent=4 * settings.max_concurrent_turns)
    state = AppState(settings=settings, runner=runner, analyst=await Analyst.create(settings))
    await on_startup(state)
    handler = AsyncSocketModeHandler(build_bolt_app(state), settings.slack_app_token.get_secret_value())
    state.ready = True
    log.info("datathread is connected to Slack over Socket Mode")
    try:
        await handler.start_async()
    except asyncio.CancelledError:
        pass
    finally:
        await handler.close_async()
        await state.runner.drain(timeout=30)
        await on_shutdown(state)
        await state.analyst.close()
