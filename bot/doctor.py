"""`datathread doctor`: for each configured part, one cheap real call that proves it is reachable.

Checks run in parallel, each under its own timeout, so the whole report takes about one timeout at
worst: the model (`GET /v1/models/{DATATHREAD_MODEL}`: key, model name and endpoint in one call),
Slack (`auth.test`, plus `apps.connections.open` for Socket Mode), Teams (a Bot Framework token),
BigQuery (a dry run of `SELECT 1`), the session store (SQLite or Redis ping), S3 (head bucket), and
the Modal deployment. Nothing is started or built: the sandbox's protections are its own report.

The sandbox back-end probe forks throw-away children, which is only safe before any thread exists, so
it runs in one child forked first thing and reports over a pipe while the parent imports what the
checks need and runs them: the probe costs no wall time of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from bot.doctor_chat import check_slack, check_teams
from bot.doctor_checks import (
    CHECK_TIMEOUT_S,
    Check,
    check_disk,
    check_modal,
    check_model,
    check_s3,
    check_store,
    check_warehouse,
    preload,
)
from core.config import ConfigError, Settings
from core.model_budget import spend_limits
from core.redact import Redactor
from core.release import release_id

ALL_CHECKS = (
    ("model", check_model),
    ("session store", check_store),
    ("disk", check_disk),
    ("warehouse", check_warehouse),
    ("slack", check_slack),
    ("teams", check_teams),
    ("s3", check_s3),
    ("modal", check_modal),
)
SAFETY_TIMEOUT_S = 2 * CHECK_TIMEOUT_S  # a whole check (two calls at most)
STATUS_MARKUP = {
    "ok": "[green]ok[/]",
    "fail": "[red]FAIL[/]",
    "off": "[yellow]not configured[/]",
    "unchecked": "[yellow]configured (not checked)[/]",
    "warn": "[yellow]WARN[/]",
}


async def run_doctor(settings: Settings, console: Console) -> int:
    """Print one row per part (then the sandbox protections and the spending limits); exit code 1 when
    a configured part fails."""

    started = time.monotonic()
    probe = start_protections_probe(settings)  # forks: before any thread (the checks start some)
    # At a terminal, a spinner while the checks run (with every service out of reach the table came
    # after 9 s of nothing); piped, nothing more than the table. Its thread starts after the fork.
    with console.status(f"Checking {len(ALL_CHECKS)} parts (at most {SAFETY_TIMEOUT_S:g} s)…"):
        preload(settings)  # imports block the loop: do them before any check's clock starts
        protections, *found = await asyncio.gather(
            probe, *(_bounded(part, check, settings) for part, check in ALL_CHECKS)
        )
    checks = [row for rows in found for row in (rows if isinstance(rows, tuple) else (rows,))]
    # The details wrap, folding a long word (DATATHREAD_MODEL_PROVIDER=bedrock/vertex) rather than
    # cutting it to "…": piped or at 80 columns, the sentence that says what to do came out cut.
    table = Table(
        Column("part", no_wrap=True), Column("status", no_wrap=True), Column("detail", overflow="fold")
    )
    # Details are plain text (errors quote services, a masked login reads "[redacted]"): escaped, so rich
    # does not take a bracketed word for markup and drop it. Redacted once more on the way out.
    redact = Redactor(settings.secret_values()).text
    # Which release this is (core/release.py): replicas upgraded one at a time are told apart.
    table.add_row("release", STATUS_MARKUP["ok"], escape(f"datathread {release_id(settings.release)}"))
    for check in checks:
        table.add_row(check.part, STATUS_MARKUP[check.status], escape(redact(check.detail)))
    # The sandbox's protections, then what bounds the bill: "on — …" / "off — …" each, off said plainly.
    for kind, states, off in (
        ("protection", protections, "[red]OFF[/]"),
        ("limit", spend_limits(settings), "[yellow]OFF[/]"),
    ):
        for name, state in states.items():
            mark = "[green]on[/]" if state.startswith("on") else off
            table.add_row(f"  {kind}: {name}", mark, state.split("— ", 1)[-1])
    console.print(table)
    console.print(f"[dim]checked in {time.monotonic() - started:.1f} s[/]")
    return 1 if any(c.status == "fail" for c in checks) else 0


async def _bounded(
    part: str, check: Callable[[Settings], Awaitable[Check | tuple[Check, ...]]], settings: Settings
) -> Check | tuple[Check, ...]:
    """One check (a row, or a part's rows) under a safety timeout; an unexpected error is a FAIL with
    its one-line reason."""
    try:
        async with asyncio.timeout(SAFETY_TIMEOUT_S):
            return await check(settings)
    except TimeoutError:
        return Check(part, "fail", f"no answer within {SAFETY_TIMEOUT_S:g} s")
    except Exception as exc:  # a sentence of ours (ConfigError) as it is; anything else with its kind
        reason = str(exc).splitlines()[0] if str(exc) else ""
        if isinstance(exc, ConfigError) and reason:
            return Check(part, "fail", reason)
        return Check(part, "fail", f"{type(exc).__name__}: {reason}".rstrip(": "))


def start_protections_probe(settings: Settings) -> Awaitable[dict[str, str]]:
    """What the local sandbox will enforce on this host, without starting it (Modal's run remotely):
    forks the probe now (no thread may exist yet); await the returned report."""
    if settings.sandbox == "modal":
        return asyncio.sleep(0, {})
    from core.sandbox_preview import start_preview
    from core.secret_files import secret_files

    # Each step masks the secret files there when it starts (core/isolation_root.py): listing a .env
    # that does not exist read as if the checkout had one, holding secrets.
    masked = [str(Path(m).resolve()) for m in secret_files(settings) if Path(m).is_file()]
    return start_preview(settings.isolation or "best", masked=masked, timeout_s=SAFETY_TIMEOUT_S)
