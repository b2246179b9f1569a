"""`datathread teams-package`: the Teams app package (manifest.json + icons, zipped) for sideloading,
with the configured MICROSOFT_APP_ID and the public host of DATATHREAD_PUBLIC_URL filled in.
https://learn.microsoft.com/microsoftteams/platform/concepts/build-and-test/apps-package
"""

from __future__ import annotations

import json
import urllib.parse
import zipfile
from pathlib import Path

from core.config import ConfigError, Settings

TEAMS_DIR = Path(__file__).resolve().parent.parent / "teams"
ICONS = ("color.png", "outline.png")


def render_manifest(settings: Settings, template: str) -> dict:
    """The manifest with the app id (bot id = app id) and our public host as a valid domain."""
    app_id = (settings.microsoft_app_id or "").strip()
    if not app_id:
        raise ConfigError("Set MICROSOFT_APP_ID (the Azure Bot's app id) before building the Teams package.")
    manifest = json.loads(template.replace("${MICROSOFT_APP_ID}", app_id))
    host = urllib.parse.urlsplit(settings.public_url).hostname
    if host and host not in ("localhost", "127.0.0.1"):
        manifest["validDomains"] = sorted({*manifest.get("validDomains", []), host})
    return manifest


def build_package(settings: Settings, output: Path, *, source: Path = TEAMS_DIR) -> Path:
    """Write the zip Teams accepts for 'Upload a custom app': manifest.json and icons at the root."""
    manifest = render_manifest(settings, (source / "manifest.json").read_text())
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False))
        for icon in ICONS:
            zf.write(source / icon, icon)
    return output
