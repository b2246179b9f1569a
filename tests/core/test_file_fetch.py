"""The core fetching a message's shared files through the surface's `fetch_files` (core/file_fetch.py),
end to end through `Analyst.handle`: the scripted Messages API, a real sandbox, store and workspace.
The fetch is what a surface hands in; here a coroutine that notes when it ran and what the turn had
said by then."""

from __future__ import annotations

from dataclasses import replace

from core.analyst import Analyst
from core.events import IncomingMessage, NobodyListening, SharedFile, Thinking
from core.file_fetch import FETCH_FAILED, FETCH_FAILED_NAME
from core.file_intake import FILES_ONLY, HEADER
from tests.fakes.anthropic_api import text

CSV = b"region,amount\nnorth,10\nsouth,32\n"


def ask(words: str, *, key: str, user: str = "u1") -> IncomingMessage:
    return IncomingMessage(text=words, surface="slack", thread_key=(key,), user_id=user)


class Fetch:
    """A surface's fetch: `files`, noting the events the turn had emitted by then."""

    def __init__(self, recorder, *files: SharedFile, fails: bool = False):
        self.recorder, self.files, self.fails = recorder, files, fails
        self.seen: list[list[str]] = []

    async def __call__(self) -> tuple[SharedFile, ...]:
        self.seen.append([e.kind for e in self.recorder.events])
        if self.fails:
            raise RuntimeError("a bug in the surface")
        return self.files


def question_words(body: dict) -> list[str]:
    return [b["text"] for b in body["messages"][-1]["content"] if b["type"] == "text"]


async def test_the_files_are_fetched_once_the_turn_runs_and_read_like_files_in_hand(
    analyst, fake_model, recorder
):
    """Fetched after the turn started and said it is at work (`Thinking`), then written, read in the
    sandbox and described to the model, as files already on the message are."""
    fetch = Fetch(recorder, SharedFile("sales.csv", CSV))
    fake_model.enqueue(text("It totals 42."))
    outcome = await analyst.handle(ask("what's the total?", key="ff1"), recorder, fetch_files=fetch)
    assert outcome.ok and outcome.answer == "It totals 42."
    assert fetch.seen == [["turn_started", "thinking"]]
    words = question_words(fake_model.requests[0])
    assert words[0] == "what's the total?" and "'sales.csv'" in words[-1] and words[-1].startswith(HEADER)


async def test_files_still_to_fetch_make_help_and_no_words_a_question(analyst, fake_model, recorder):
    """`help` or nothing at all, with files coming: a question about them, not the local help."""
    fake_model.enqueue(text("It holds sales."), text("Sales by region."))
    for words, key in (("", "ff2"), ("help", "ff3")):
        fetch = Fetch(recorder, SharedFile("sales.csv", CSV))
        assert (await analyst.handle(ask(words, key=key), recorder, fetch_files=fetch)).ok
        assert len(fetch.seen) == 1
    first, second = (question_words(r)[0] for r in fake_model.requests)
    assert (first, second) == (FILES_ONLY, "help")


async def test_help_an_export_or_no_words_with_files_all_refused_call_no_model(analyst, fake_model, recorder):
    """Files a surface refused by name (a screenshot: no bytes, nothing to fetch) make no question:
    `help` is the help, an export phrase the export, no words at all "you didn't ask anything", each
    without a model call (they were questions about the files), and each says why the file was not
    read."""
    shot = SharedFile("shot.png", refusal="A .png file is not one I can read.")
    said = []
    for words, key in (("help", "ff7"), ("export this as a notebook", "ff8"), ("", "ff9")):
        recorder.events.clear()
        message = replace(ask(words, key=key), files=(shot,))
        outcome = await analyst.handle(message, recorder)
        assert [n.text for n in recorder.of("note")] == [
            "I didn't read `shot.png`: A .png file is not one I can read."
        ]
        said.append(outcome.answer)
    assert fake_model.requests == []
    assert said[0].startswith("I answer questions about your data") and said[2].startswith("You didn't ask")


async def test_a_refused_person_has_nothing_fetched(settings, recorder):
    analyst = await Analyst.create(settings.model_copy(update={"allowed_users": "someone-else"}))
    try:
        fetch = Fetch(recorder, SharedFile("sales.csv", CSV))
        outcome = await analyst.handle(ask("total?", key="ff4"), recorder, fetch_files=fetch)
    finally:
        await analyst.close()
    assert not outcome.ok and fetch.seen == []


async def test_a_fetch_that_raises_is_one_sentence_and_the_turn_goes_on(analyst, fake_model, recorder):
    fake_model.enqueue(text("I have no file to read."))
    fetch = Fetch(recorder, fails=True)
    outcome = await analyst.handle(ask("total?", key="ff5"), recorder, fetch_files=fetch)
    assert outcome.ok and outcome.answer == "I have no file to read."
    assert [n.text for n in recorder.of("note")] == [f"I didn't read `{FETCH_FAILED_NAME}`: {FETCH_FAILED}"]


async def test_nobody_listening_stops_the_turn_before_the_download(analyst, fake_model, recorder):
    """A thread that takes no more messages (the bot was removed) stops the turn at its first
    `Thinking`, which now comes before the fetch: nothing is downloaded, no model is called."""

    async def unheard(event) -> None:
        await recorder(event)
        if isinstance(event, Thinking):
            raise NobodyListening("Slack refuses my messages here.")

    fetch = Fetch(recorder, SharedFile("sales.csv", CSV))
    outcome = await analyst.handle(ask("total?", key="ff6"), unheard, fetch_files=fetch)
    assert not outcome.ok and fetch.seen == [] and fake_model.requests == []
    assert "Slack refuses my messages here." in outcome.error
