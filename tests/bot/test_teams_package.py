"""`datathread teams-package` builds a zip Teams accepts: manifest with the app id, icons of the right size."""

from __future__ import annotations

import io
import json
import zipfile

from PIL import Image
from typer.testing import CliRunner

from bot.cli import app


def test_teams_package_zip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MICROSOFT_APP_ID", "11111111-2222-3333-4444-555555555555")
    monkeypatch.setenv("DATATHREAD_PUBLIC_URL", "https://bot.example.com")
    result = CliRunner().invoke(app, ["teams-package", "-o", "out/app.zip"])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "out" / "app.zip") as zf:
        assert sorted(zf.namelist()) == ["color.png", "manifest.json", "outline.png"]
        manifest = json.loads(zf.read("manifest.json"))
        sizes = {name: Image.open(io.BytesIO(zf.read(name))).size for name in ("color.png", "outline.png")}
    assert manifest["id"] == manifest["bots"][0]["botId"] == "11111111-2222-3333-4444-555555555555"
    assert "${" not in json.dumps(manifest) and manifest["validDomains"] == ["bot.example.com"]
    assert sizes == {"color.png": (192, 192), "outline.png": (32, 32)}


def test_teams_package_needs_app_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MICROSOFT_APP_ID", raising=False)
    result = CliRunner().invoke(app, ["teams-package"])
    assert result.exit_code != 0 and "MICROSOFT_APP_ID" in result.output
