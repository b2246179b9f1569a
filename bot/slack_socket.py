"""`datathread slack --socket`: the same Bolt app over Socket Mode, for local use without a public URL.

Socket Mode needs an app-level token (`SLACK_APP_TOKEN`, `xapp-…`, scope `connections:write`):
https://docs.slack.dev/apis/events-api/using-socket-mode. Turns run on a local runner in this process.

The terminal gets one line per connection state (checking tokens, connecting, connected, lost,
retrying), never the client's tracebacks (those go to the log file). Both tokens are checked first
(`auth.test`, `apps.connections.open`), so a rejected token ends the command with the reason, exit 2.
Ctrl-C stops it as it stops `serve`: the first lets running answers finish (and says so), a second
stops them now, their threads told (`on_ctrl_c`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from bot.retention import WorkspaceSweeper
from bot.schedule_jobs import Schedules
from bot.slack_app import SlackSurface, build_bolt_app
from bot.slack_client import build_client
from bot.slack_identity import SLACK_TOKENS, SlackUnreachable, call_slack
from bot.slack_socket_client import SocketHandler
from bot.surface import AppState
from bot.teams_auth import build_bot
from core.analyst import Analyst
from core.config import Settings
from core.runner import LocalRunner

log = logging.getLogger("datathread.slack")
__all__ = ["SLACK_TOKENS", "SlackUnreachable", "call_slack"]  # their home was here: doctor and tests


async def check_tokens(settings: Settings) -> dict:
    """`auth.test` with the bot token, `apps.connections.open` with the app token; the bot's identity."""
    identity = await call_slack(settings, *SLACK_TOKENS[0])
    await call_slack(settings, *SLACK_TOKENS[1])
    return identity


class ConnectionStates(logging.Handler):
    """Reads the Socket Mode client's own log records and says one line per change of state."""

    SIGNS = (
        ("has been established", "connected"),
        ("Failed to connect", "retrying"),
        ("is no longer active", "lost"),
        # Slack closed the connection, or it died without a close (its pings unanswered): the client
        # reconnects by itself, and said so only in the log. A refresh Slack asks for (`disconnect`)
        # logs none of these: it is routine (every few hours), not a lost connection.
        ("Reconnecting...", "lost"),
        ("Failed to retrieve WSS URL", "retrying"),
    )

    def __init__(self, say: Callable[[str], None], lines: dict[str, str]):
        super().__init__(logging.INFO)
        self.say, self.lines, self.state = say, lines, ""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for sign, state in self.SIGNS:
            if sign in text:
                self.change(state)
                return

    def change(self, state: str) -> None:
        # Retrying a lost connection, the client says "Reconnecting..." again before each attempt:
        # still retrying, not lost anew (the terminal said the two lines in turn every 10 s).
        if state == "lost" and self.state == "retrying":
            return
        if state != self.state:
            self.state = state
            self.say(self.lines[state])


def connection_states(say: Callable[[str], None], me: dict) -> ConnectionStates:
    """The terminal's line for each connection state, naming the bot `auth.test` said it is."""
    bot = f"@{me.get('user', 'datathread')} in {me.get('team', 'your workspace')}"
    return ConnectionStates(
        say,
        {
            "connected": f"Slack: connected over Socket Mode as {bot}. Ctrl-C to stop.",
            "retrying": "Slack: cannot connect to Socket Mode; retrying (details in the log file)…",
            "lost": "Slack: connection lost; reconnecting…",
        },
    )


async def run_socket_mode(settings: Settings, console) -> None:
    """Connect over Socket Mode and serve until interrupted; finish running turns before exiting. The
    tokens' and the model key's presence are checked by the caller first (`datathread slack`)."""
    say = lambda text: console.print(text, highlight=False)  # noqa: E731
    say("Slack: checking SLACK_BOT_TOKEN and SLACK_APP_TOKEN…")
    me = await check_tokens(settings)
    states = connection_states(say, me)
    client_log = logging.getLogger("datathread.slack.socket")
    client_log.setLevel(logging.INFO)
    client_log.addHandler(states)
    runner = LocalRunner(max_concurrent=4 * settings.max_concurrent_turns)
    state = AppState(settings=settings, runner=runner, analyst=await Analyst.create(settings))
    slack = SlackSurface(state)
    schedules = Schedules(state, slack=slack.client, teams=build_bot(settings))
    sweeper = WorkspaceSweeper(state)
    await slack.start()
    await schedules.start()  # the scheduler loop runs here too
    await sweeper.start()  # and the sweep of idle workspaces
    handler = socket_handler(build_bolt_app(state, me), settings, client_log)
    restore = on_ctrl_c(runner, say)
    try:
        say("Slack: connecting…")
        await handler.connect_async()
        state.ready = True
        states.change("connected")
        await asyncio.Event().wait()  # until the first Ctrl-C cancels us
    except asyncio.CancelledError:
        # Handled: left counted, it would turn the shutdown's own timeouts (asyncio.timeout) into
        # cancellations of this task.
        asyncio.current_task().uncancel()
        say("Slack: stopping…")
    finally:
        try:
            client_log.removeHandler(states)
            await handler.close_async()  # no new events from here on
            await sweeper.stop()
            await schedules.stop()
            # unfinished turns: their threads hear that they stopped
            await runner.stop(timeout=30, say=lambda line: say(f"Slack: {line}."))
            await slack.stop()
            await state.analyst.close()
        finally:
            restore()
    say("Slack: stopped.")


def socket_handler(app, settings: Settings, client_log: logging.Logger) -> SocketHandler:
    """The Socket Mode connection for `app`: a fresh URL for each attempt, every call bounded
    (bot/slack_socket_client.py)."""
    token = settings.slack_app_token.get_secret_value()
    return SocketHandler(app, token, logger=client_log, web_client=build_client(settings))


def on_ctrl_c(runner: LocalRunner, say: Callable[[str], None]) -> Callable[[], None]:
    """Ctrl-C as `serve` has it (bot/serve_process.py): the first cancels the task serving (which then
    stops taking events and gives running answers their time, saying so); a second makes the runner
    stop those answers now, their threads told, and the shutdown still closes what it opened; more
    are ignored (what is left is bounded). Returns the function that puts the previous handling back.

    asyncio.run's own handling raised KeyboardInterrupt at the second press wherever the shutdown was:
    the answers were cancelled, but the Slack client, the store and the sandbox were never closed
    ("Unclosed client session" in the log), and the terminal never said a second press would do that.
    Counted through the loop (one wakeup byte per signal), so two quick presses are two."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:  # started with it ignored (nohup, a background job): kept so
        return lambda: None
    loop, serving = asyncio.get_running_loop(), asyncio.current_task()
    presses = 0

    def pressed() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            serving.cancel()
        elif presses == 2:
            say("Slack: Ctrl-C again: stopping the running answers now (their threads are told)…")
            runner.hurry()

    loop.add_signal_handler(signal.SIGINT, pressed)
    # A service manager's stop (systemd, Docker: SIGTERM) is a first Ctrl-C, as for `serve`: it killed
    # the process at once, and the threads with an answer running never heard of it.
    loop.add_signal_handler(signal.SIGTERM, pressed)

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)
        if previous is not None:  # None: set outside Python, nothing to put back
            signal.signal(signal.SIGINT, previous)

    return restore
