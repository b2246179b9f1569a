"""`datathread teams-package`: the Teams app package (manifest.json + icons, zipped) for sideloading,
with the configured MICROSOFT_APP_ID and the public host of DATATHREAD_PUBLIC_URL filled in.
https://learn.microsoft.com/microsoftteams/platform/concepts/build-and-test/apps-package

The manifest is checked against Microsoft's JSON schema for the version it declares (shipped in
teams/schema/, from https://developer.microsoft.com/json-schemas/teams/v<version>/MicrosoftTeams.schema.json)
before anything is written, so Teams never gets a package it rejects.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import zipfile
from pathlib import Path

from core.config import ConfigError, Settings

TEAMS_DIR = Path(__file__).resolve().parent.parent / "teams"
ICONS = ("color.png", "outline.png")


def render_manifest(settings: Settings, template: str, app_version: str | None = None) -> dict:
    """The manifest with the app id (bot id = app id), our public host as a valid domain and, when
    given, the app's version: Teams takes a package as an update of an uploaded app only when its
    version is higher, and the template's is always the same."""
    app_id = (settings.microsoft_app_id or "").strip()
    if not app_id:
        raise ConfigError("Set MICROSOFT_APP_ID (the Azure Bot's app id) before building the Teams package.")
    manifest = json.loads(template.replace("${MICROSOFT_APP_ID}", app_id))
    if app_version is not None:
        if not re.fullmatch(r"\d{1,9}\.\d{1,9}\.\d{1,9}", app_version.strip()):
            raise ConfigError(f"--app-version must be three numbers such as 1.0.1, not {app_version!r}.")
        manifest["version"] = app_version.strip()
    host = urllib.parse.urlsplit(settings.public_url).hostname
    if host and not local_only(settings):
        manifest["validDomains"] = sorted({*manifest.get("validDomains", []), host})
    return manifest


def local_only(settings: Settings) -> bool:
    """Whether DATATHREAD_PUBLIC_URL names this machine only (its default, http://localhost:3000): the
    channel download links it signs would lead every colleague to their own machine."""
    host = (urllib.parse.urlsplit(settings.public_url).hostname or "").lower()
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0") or host.endswith(".localhost")


def check_manifest(manifest: dict, source: Path = TEAMS_DIR) -> None:
    """Raise ConfigError, in one sentence, unless `manifest` matches the schema of its manifestVersion."""
    from jsonschema import Draft7Validator

    version = manifest.get("manifestVersion", "?")
    path = source / "schema" / f"MicrosoftTeams.v{version}.schema.json"
    if not path.is_file():
        raise ConfigError(
            f"No Teams manifest schema v{version} in {path.parent}; the manifest template declares it."
        )
    # The schema says draft-04 but uses `const` (draft-06+); Draft 7 honours it.
    errors = sorted(
        Draft7Validator(json.loads(path.read_text())).iter_errors(manifest), key=lambda e: list(e.path)
    )
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "manifest"
        raise ConfigError(
            f"The Teams manifest does not match schema v{version} at {where}: {errors[0].message[:200]}."
        )


def build_package(
    settings: Settings, output: Path, *, source: Path = TEAMS_DIR, app_version: str | None = None
) -> Path:
    """Write the zip Teams accepts for 'Upload a custom app': manifest.json and icons at the root."""
    manifest = render_manifest(settings, (source / "manifest.json").read_text(), app_version)
    check_manifest(manifest, source)
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False))
        for icon in ICONS:
            zf.write(source / icon, icon)
    return output
