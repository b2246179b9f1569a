""" "Forget this thread" and "what do you keep about me?" reach the model: its system prompt now says what
is kept and for how long (from the settings), that it cannot delete anything itself, and what does
(`reset`, `datathread forget`). It said nothing of it, so a model could claim it had forgotten."""

from __future__ import annotations

from core.analyst import Analyst
from core.events import IncomingMessage
from tests.fakes.anthropic_api import text


async def test_the_system_prompt_says_what_is_kept_from_the_settings(settings, fake_model, recorder):
    analyst = await Analyst.create(
        settings.model_copy(update={"history_ttl_days": 12, "audit_ttl_days": 45}), start_sandbox=False
    )
    try:
        fake_model.enqueue(text("I can't delete anything myself."))
        question = IncomingMessage(
            text="forget this thread", surface="terminal", thread_key=("k",), user_id="u1"
        )
        await analyst.handle(question, recorder)
    finally:
        await analyst.close()
    system = fake_model.requests[-1]["system"][0]["text"]
    assert "for 12 days after its last activity" in system and "audit log for 45 days" in system
    assert "never say you forgot or deleted" in system
    assert "`reset`" in system and "`datathread forget`" in system
