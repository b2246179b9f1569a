"""`datathread doctor`'s sandbox rows name the secret files a step cannot read: those that exist. Each
step masks the bot's secret files present when it starts; doctor listed `<checkout>/.env` in a
checkout with no .env, as if one held secrets there. (A module of its own: tests/bot/test_doctor.py
covers the reachability checks.)"""

from __future__ import annotations

from typer.testing import CliRunner

from bot.cli import app


def doctor_output(tmp_path) -> str:
    """The report's text, each row's cells on one line (wide enough that no detail wraps)."""
    env = {"DATATHREAD_HOME": str(tmp_path / "home"), "COLUMNS": "3000", "ANTHROPIC_API_KEY": None}
    result = CliRunner().invoke(app, ["doctor"], env=env)
    assert "Traceback" not in result.output and "protection:" in result.output, result.output
    return "\n".join(" ".join(line.replace("│", " ").split()) for line in result.output.splitlines())


def test_masked_files_are_the_secret_files_that_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the settings file is ./.env
    dotenv = tmp_path / ".env"
    assert str(dotenv) not in doctor_output(tmp_path)
    dotenv.write_text("DATATHREAD_STEP_TIMEOUT=30\n")
    shown = doctor_output(tmp_path)
    # Only back ends with a fresh root list masked files (on Landlock nothing outside the runtime is read).
    assert f"masked files: {dotenv}" in shown or "masked files" not in shown
