"""`datathread doctor`: which parts are configured, which are reachable, which protections are on."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from core.config import Settings


async def run_doctor(settings: Settings, console: Console) -> int:
    """Print a table of checks; exit code 1 when something required is broken."""
    from core.sandbox_factory import build_sandbox_and_warehouse
    from core.sessions import open_store

    table = Table("part", "status", "detail")
    failed = False

    def row(part: str, ok: bool | None, detail: str) -> None:
        nonlocal failed
        status = {True: "[green]ok[/]", False: "[red]FAIL[/]", None: "[yellow]not configured[/]"}[ok]
        failed |= ok is False
        table.add_row(part, status, detail)

    row(
        "model",
        settings.has_model_credentials() or False,
        f"{settings.model_provider} · {settings.model}"
        if settings.has_model_credentials()
        else "set ANTHROPIC_API_KEY",
    )
    try:
        store = await open_store(settings)
        await store.close()
        row("session store", True, "redis" if settings.redis_url else f"sqlite under {settings.home}")
    except Exception as exc:
        row("session store", False, str(exc))
    row(
        "slack",
        bool(settings.slack_bot_token and settings.slack_signing_secret) or None,
        "socket mode ready" if settings.slack_app_token else "HTTP events at /slack/events",
    )
    row(
        "teams",
        True if settings.microsoft_app_id else None,
        f"app {settings.microsoft_app_id} ({settings.microsoft_app_type})"
        if settings.microsoft_app_id
        else "no MICROSOFT_APP_ID: /api/messages is UNAUTHENTICATED (local use only)",
    )
    try:
        sandbox, warehouse = await build_sandbox_and_warehouse(settings)
        row("warehouse", True, f"{settings.warehouse} ({warehouse.dialect} dialect)")
        row("sandbox", True, settings.sandbox)
        for name, state in sandbox.protections().items():
            table.add_row(
                f"  protection: {name}",
                "[green]on[/]" if state.startswith("on") else "[red]OFF[/]",
                state.split("— ", 1)[-1],
            )
        await warehouse.close()
        await sandbox.close()
    except Exception as exc:
        row("sandbox/warehouse", False, f"{type(exc).__name__}: {exc}")
    row("s3", True if settings.s3_buckets else None, settings.s3_buckets or "no DATATHREAD_S3_BUCKETS")
    if settings.sandbox == "modal":
        from core.sandbox_modal import check_deployment

        ok, detail = await check_deployment(settings)
        row("modal deployment", ok, detail)
        if not settings.redis_url:
            row("redis (modal)", False, "the Modal deployment needs REDIS_URL (locks across containers)")
    console.print(table)
    return 1 if failed else 0
