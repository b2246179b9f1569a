"""`--session` as a newcomer uses it: a name with no session yet is said to start a new one (a typo
silently began an empty conversation), a full id as `audit` prints it resumes; a session another
conversation is answering in is waited for out loud, and Ctrl-C while waiting does not claim the question
was kept; the hourly limit names its setting. Real SQLite store under DATATHREAD_HOME, the scripted
Messages API; `chat` in a real subprocess where Ctrl-C matters."""

from __future__ import annotations

from core.sessions import session_id_for
from tests.fakes.anthropic_api import text
from tests.fakes.cli import invoke

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000"}
WAITING = "Waiting for another conversation on this session to finish…"


def test_an_unknown_session_is_named_and_started_and_a_known_one_resumes(home, fake_model):
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    fake_model.enqueue(text("First answer."), text("Resumed."), text("By id."))
    first = invoke(["chat", "--session", "sales"], home, env=env, stdin="how many flights?\n")
    assert first.returncode == 0, first.stderr
    assert f"No session sales in {home.resolve()} yet: starting a new one with that name." in first.stdout

    typo = invoke(["chat", "--session", "slaes"], home, env=env, stdin="")
    assert f"No session slaes in {home.resolve()} yet" in typo.stdout, typo.stdout
    assert len(fake_model.requests) == 1  # nothing asked

    again = invoke(["ask", "and by month?", "--session", "sales"], home, env=env)
    assert again.returncode == 0, again.stderr
    assert "No session" not in again.stderr + again.stdout and again.stdout == "Resumed.\n"
    assert "how many flights?" in str(fake_model.requests[-1]["messages"])

    # the full id, as `audit` and `export` show it, resumes the same conversation
    full_id = session_id_for("terminal", ("sales",))
    by_id = invoke(["ask", "and by day?", "--session", full_id], home, env=env)
    assert by_id.returncode == 0 and "No session" not in by_id.stderr, by_id.stderr
    assert by_id.stderr.strip().endswith("session: sales")
    assert "and by month?" in str(fake_model.requests[-1]["messages"])
