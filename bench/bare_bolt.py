"""The ack-latency baseline: a bare Bolt AsyncApp with one app_mention listener that only acks,
served by uvicorn the way `datathread serve` serves its app. `python -m bench.bare_bolt --port P`;
reads SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN and DATATHREAD_SLACK_API_URL from the environment.
"""

from __future__ import annotations

import argparse
import os

import uvicorn
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def build() -> Starlette:
    """The bare app: signature verification, one listener that does nothing, /healthz."""
    client = AsyncWebClient(
        token=os.environ["SLACK_BOT_TOKEN"], base_url=os.environ["DATATHREAD_SLACK_API_URL"]
    )
    bolt = AsyncApp(
        signing_secret=os.environ["SLACK_SIGNING_SECRET"], client=client, process_before_response=True
    )

    @bolt.event("app_mention")
    async def on_mention() -> None:
        return None

    handler = AsyncSlackRequestHandler(bolt)

    async def events(request: Request):
        return await handler.handle(request)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/slack/events", events, methods=["POST"]), Route("/healthz", healthz)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    uvicorn.run(build(), host="127.0.0.1", port=args.port, log_level=args.log_level)
