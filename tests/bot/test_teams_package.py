"""`datathread teams-package` builds a zip Teams accepts: manifest with the app id, icons of the right size."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from PIL import Image
from typer.testing import CliRunner

from bot.cli import app
from bot.teams_package import TEAMS_DIR


def configured(tmp_path, monkeypatch) -> None:
    """In `tmp_path`, with an app id, its tenant and a public host."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MICROSOFT_APP_ID", "11111111-2222-3333-4444-555555555555")
    monkeypatch.setenv("MICROSOFT_APP_TENANT_ID", "contoso.onmicrosoft.com")
    monkeypatch.setenv("DATATHREAD_PUBLIC_URL", "https://bot.example.com")


def test_teams_package_zip(tmp_path, monkeypatch):
    configured(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["teams-package", "-o", "out/app.zip"])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "out" / "app.zip") as zf:
        assert sorted(zf.namelist()) == ["color.png", "manifest.json", "outline.png"]
        manifest = json.loads(zf.read("manifest.json"))
        sizes = {name: Image.open(io.BytesIO(zf.read(name))).size for name in ("color.png", "outline.png")}
    assert manifest["id"] == manifest["bots"][0]["botId"] == "11111111-2222-3333-4444-555555555555"
    assert "${" not in json.dumps(manifest) and manifest["validDomains"] == ["bot.example.com"]
    assert sizes == {"color.png": (192, 192), "outline.png": (32, 32)}


def test_a_rebuilt_package_can_carry_a_higher_version_to_update_the_uploaded_app(tmp_path, monkeypatch):
    """Teams takes a package as an update only with a higher version; the template's was always 1.0.0."""
    configured(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["teams-package", "--app-version", "1.0.1"])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "datathread-teams.zip") as zf:
        assert json.loads(zf.read("manifest.json"))["version"] == "1.0.1"
    for bad in ("1.1", "v2.0.0", "1.0.0-beta"):
        result = CliRunner().invoke(app, ["teams-package", "-o", "bad.zip", "--app-version", bad])
        assert result.exit_code == 2 and "--app-version must be three numbers" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad.zip").exists()


def test_a_folder_gets_the_package_in_it_and_a_local_public_url_is_warned_of(tmp_path, monkeypatch):
    """`-o out/` wrote a file named `out` (where `export -o DIR/` fills a folder), and a package built
    with DATATHREAD_PUBLIC_URL still at its default, localhost, was built without a word: every
    channel download link would then lead colleagues to their own machine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MICROSOFT_APP_ID", "11111111-2222-3333-4444-555555555555")
    monkeypatch.setenv("MICROSOFT_APP_TENANT_ID", "contoso.onmicrosoft.com")
    monkeypatch.delenv("DATATHREAD_PUBLIC_URL", raising=False)
    (tmp_path / "existing").mkdir()
    for given, made in [("out/", "out/datathread-teams.zip"), ("existing", "existing/datathread-teams.zip")]:
        result = CliRunner().invoke(app, ["teams-package", "-o", given])
        assert result.exit_code == 0, result.output
        assert zipfile.is_zipfile(tmp_path / made) and result.stdout.strip() == made
        assert result.stderr.startswith("warning: DATATHREAD_PUBLIC_URL is http://localhost:3000, which only")
    monkeypatch.setenv("DATATHREAD_PUBLIC_URL", "https://bot.example.com")
    result = CliRunner().invoke(app, ["teams-package", "-o", "out/"])
    assert result.exit_code == 0 and result.stderr == ""


def test_teams_package_needs_app_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MICROSOFT_APP_ID", raising=False)
    result = CliRunner().invoke(app, ["teams-package"])
    assert result.exit_code != 0 and "MICROSOFT_APP_ID" in result.output


def test_the_package_matches_the_teams_schema_of_its_version(tmp_path, monkeypatch):
    """Validated independently of the command: the written manifest against the schema file of the
    manifestVersion it declares (Microsoft's, shipped in teams/schema/)."""
    from jsonschema import Draft7Validator

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MICROSOFT_APP_ID", "11111111-2222-3333-4444-555555555555")
    monkeypatch.setenv("MICROSOFT_APP_TENANT_ID", "contoso.onmicrosoft.com")
    result = CliRunner().invoke(app, ["teams-package", "-o", "app.zip"])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "app.zip") as zf:
        manifest = json.loads(zf.read("manifest.json"))
    version = manifest["manifestVersion"]
    assert manifest["$schema"].endswith(f"/v{version}/MicrosoftTeams.schema.json")
    schema = json.loads((TEAMS_DIR / "schema" / f"MicrosoftTeams.v{version}.schema.json").read_text())
    assert schema["properties"]["manifestVersion"]["const"] == version
    assert [e.message for e in Draft7Validator(schema).iter_errors(manifest)] == []


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"MICROSOFT_APP_ID": "not-a-guid"}, "MICROSOFT_APP_ID=not-a-guid is not a GUID"),
        (
            {"MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555", "MICROSOFT_APP_TYPE": "Bogus"},
            "MICROSOFT_APP_TYPE",
        ),
    ],
)
def test_a_bad_app_id_or_type_writes_nothing(env, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["teams-package", "-o", "app.zip"], env=env)
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "app.zip").exists()


def test_a_manifest_template_that_breaks_the_schema_is_refused(tmp_path):
    from bot.teams_package import check_manifest
    from core.config import ConfigError

    manifest = json.loads((TEAMS_DIR / "manifest.json").read_text().replace("${MICROSOFT_APP_ID}", "x"))
    with pytest.raises(
        ConfigError, match=r"does not match schema v1\.17 at (bots/0/botId|id): .x. does not match"
    ):
        check_manifest(manifest)
