"""A Slack turn's thread status ("datathread is thinking…", "is fetching sales.csv…"), and its end.

https://docs.slack.dev/reference/methods/assistant.threads.setStatus: "The status will be
automatically cleared when the app sends a reply. Sending an empty string in the status field will
also clear the status indicator"; one left alone goes only after two minutes without a message. A
turn says "is thinking…" before its reply exists (the answer's stream, or the status message), and
that reply clears it. The shared files, though, are fetched later, once the turn holds its thread
(core/file_fetch.py), when the reply is already there: nothing the turn sends after it is a new reply
(the stream's appends and its end, `chat.update`), so "is fetching sales.csv…", and the "is thinking…"
said again once the files were in, stayed under the finished answer. So a status set once the turn
has replied is the turn's to clear: when the files are in (the stream shows the turn at work from
then on), and at the turn's end whatever came between (a stop during the fetch, a clear Slack did not
answer). Before the reply, the turn's own status comes back instead.

Decoration, as all progress is (bot/slack_progress.py): each call bounded by `quick`, and a refusal
or a Slack that does not answer is a log line, never the turn's end.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_client import SlackCallFailed, failure_words, quick
from bot.slack_target import SlackTarget

log = logging.getLogger("datathread.slack")

THINKING = "is thinking…"  # the turn's own status, from its start until its reply


class ThreadStatus:
    """The status line of one turn's thread (none for an answer without a thread: a slash command's
    private one)."""

    def __init__(self, client: AsyncWebClient, target: SlackTarget):
        self.quick = quick(client)
        self.channel, self.thread_ts = target.channel, target.thread_ts
        self.replied = False  # the turn has a message in the thread (`answered`)
        self.shown = False  # a status Slack may be showing that no reply of the turn has cleared
        self.before = ""  # the turn's own status from before its reply: what the fetch's gives way to
        self.silent = False  # Slack did not answer a status: it is asked nothing more this turn

    def answered(self) -> None:
        """The turn's reply is in the thread (its stream, or its status message): Slack cleared the
        status then, and one set from now on stays until the turn clears it."""
        self.replied, self.shown = True, False

    async def own(self, status: str) -> None:
        """The turn's own status ("is thinking…" as it starts). Raises SlackCallFailed (not answered
        in time) for the turn's progress to stop; a refusal (only AI-app threads take a status) is
        nothing."""
        try:
            await self._set(status)
        except SlackApiError:
            return
        if not self.replied:
            self.before = status

    async def show(self, status: str) -> None:
        """Another status for a while (the fetch's), as decoration: a refusal changes nothing but
        a log line."""
        try:
            await self._set(status)
        except SlackClientError as exc:  # not answered in time (SlackCallFailed) too
            log.info("slack: no status %r in %s: %s", status, self.channel, failure_words(exc))

    async def resume(self) -> None:
        """What the fetch's status gives way to once the files are in: none after the turn's reply
        (it would stay under the answer), else the turn's own ("is thinking…") again."""
        if self.replied:
            if self.shown:
                await self.show("")
        elif self.before:
            await self.show(self.before)

    async def settle(self) -> None:
        """At the turn's end (its answer sent, or not): a status no reply cleared is cleared now."""
        if self.shown:
            await self.show("")

    async def _set(self, status: str) -> None:
        if not self.thread_ts or self.silent:
            return
        was, self.shown = self.shown, self.shown or bool(status)  # before the call: one cut short may land
        try:
            await self.quick.assistant_threads_setStatus(
                channel_id=self.channel, thread_ts=self.thread_ts, status=status
            )
        except SlackApiError:  # refused (only AI-app threads take a status): nothing new is shown
            self.shown = was
            raise
        except SlackCallFailed:
            self.silent = True
            raise
        if not status:
            self.shown = False
