"""A `reset` typed while a turn of the conversation is still answering: the turn must not save its
history back into the conversation the person was told was deleted. Before, reset deleted at once and
once more from an in-process task after the turn let its lock go (up to 900 s later): a restart in
between lost the task, and the history stayed. Now reset leaves a mark in the store (core/erase_mark.py)
which the turn's save reads (core/turn_end.py), in any process."""

from __future__ import annotations

import time

from core.forget import forget_for_reset
from core.redact import Redactor
from core.turn_end import TurnEnds

SID = "sl-000000000000000000000001"
OLD = [{"role": "user", "content": "my salary is 99000"}, {"role": "assistant", "content": "Noted."}]
NEW = [*OLD, {"role": "user", "content": "and my bonus?"}, {"role": "assistant", "content": "2000."}]


def ends(store, settings) -> TurnEnds:
    return TurnEnds(store, Redactor([]), None, "unanswered", settings)  # type: ignore[arg-type]


async def test_a_turn_running_during_a_reset_does_not_save_its_history_back(make_store, settings):
    store = make_store()
    await store.save_history(SID, OLD)
    started = time.time()  # the turn began, then the person typed `reset`
    workspace = settings.workspaces_dir / SID
    await forget_for_reset(store, settings, SID)
    workspace.mkdir(parents=True)  # the turn's step wrote a file after the reset's deletion
    (workspace / "bonus.csv").write_text("2000\n")
    other = make_store()  # another process (a turn worker) ends the turn: no in-process task helps
    await ends(other, settings).save_history(SID, NEW, since=started)
    assert await store.load_history(SID) == [] and await store.get_meta(SID) is None
    assert not workspace.exists()


async def test_a_reset_landing_just_before_the_save_is_undone(make_store, settings):
    store = make_store()
    started = time.time()

    class ResetJustBeforeTheWrite:  # the mark and the deletion land just before the turn's write
        def __getattr__(self, name):
            return getattr(store, name)

        async def save_history(self, session_id, messages):
            await forget_for_reset(store, settings, session_id)
            await store.save_history(session_id, messages)

    await ends(ResetJustBeforeTheWrite(), settings).save_history(SID, NEW, since=started)
    assert await store.load_history(SID) == []


async def test_a_turn_begun_after_a_deletion_saves_as_ever(make_store, settings):
    store = make_store()
    await forget_for_reset(store, settings, SID)
    await ends(store, settings).save_history(SID, NEW, since=time.time() + 0.01)
    assert len(await store.load_history(SID)) == 4


async def test_an_export_running_during_a_reset_does_not_save_its_history_back(
    analyst, fake_model, recorder, monkeypatch
):
    """ "export this as a notebook" saves its question and answer into the history as a turn does, and
    did not read the mark: a `reset` landing while the notebook was built had the history saved back."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text

    def ask(words: str) -> IncomingMessage:
        return IncomingMessage(text=words, surface="terminal", thread_key=("rx1",), user_id="u1")

    fake_model.enqueue(text("42."))
    first = await analyst.handle(ask("what is the answer?"), recorder)
    assert first.ok, first.error
    export_turn = analyst.threads.export_turn

    async def reset_meanwhile(session_id, turn_id, emit):
        said = await export_turn(session_id, turn_id, emit)
        await forget_for_reset(analyst.store, analyst.settings, session_id)  # `reset`, from another process
        return said

    monkeypatch.setattr(analyst.threads, "export_turn", reset_meanwhile)
    exported = await analyst.handle(ask("export this as a notebook"), recorder)
    assert exported.ok, exported.error
    assert await analyst.store.load_history(first.session_id) == []
