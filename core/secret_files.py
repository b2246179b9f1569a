"""Which files hold the bot's secrets: the local sandbox masks them in a step's mount namespace and
`datathread doctor` names them. Apart from the composition root so that naming them imports nothing
heavier than the settings."""

from __future__ import annotations

from core.config import Settings


def secret_files(settings: Settings) -> list[str]:
    """Files holding bot secrets that sandboxed code must not read (masked in its mount namespace)."""
    paths = [settings.model_config.get("env_file") or ".env"]
    if settings.google_application_credentials:
        paths.append(str(settings.google_application_credentials))
    return [str(p) for p in paths]
