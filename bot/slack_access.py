"""Who is asking or acting in Slack, and whether they may.

A question meets the access rules in the core (`Analyst.handle`); what is done with an answer afterwards
went around them: a person outside the allowlists could see an answer's SQL, save a verified query that
later answers start from, export the thread or schedule it. Every such job asks here first.

Who asks is the asker's own workspace, never the channel's. In a Slack Connect or multi-workspace channel
an event's outer `team_id` is the workspace that created the channel; the sender's is the event's
`user_team` / `team` (bolt-js#935, and Bolt's own `extract_actor_team_id`), a slash command's `team_id`, a
click's `user.team_id`. Judged by the channel's creator, DATATHREAD_ALLOWED_TEAMS let a partner company's
people query our warehouse in a channel we created, and refused our own people in one they created.

And whether they are one of the organization's people at all: where `users.info` was asked
(https://docs.slack.dev/reference/methods/users.info: `team_id`, `enterprise_user`, `is_stranger`,
`is_restricted`/`is_ultra_restricted` for guests), its answer against the install's workspace and
organization (`authorize_result`: `auth.test`'s identity at start, else `auth.test` asked here), and
`deleted` for a deactivated account (someone who has left: refused, and their schedules pause); else
the payload's team — the lookup that gives the time zone, kept a day by the core. `is_stranger` alone
is not enough: it is false for a person of another organization who shares a channel with the bot. A
lookup that fails leaves someone the payload does not place at home unconfirmed, which is refused as a
stranger would be, and, while guests are refused, someone it does as a possible guest (core/access.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_client import answer_via_response_url, cannot_post_here, failure_words, quick
from bot.slack_identity import KNOWN_AT_START
from bot.slack_revoked import locked_out, token_refused
from core.access import DEACTIVATED, EXTERNAL, GUEST, MAYBE_GUEST, UNCONFIRMED
from core.events import IncomingMessage
from core.thread import Threads

log = logging.getLogger("datathread.slack")


WHO = ("asker_team", "home_team", "home_enterprise", "home_known")  # what `who_asks` puts in a payload


def who_asks(asker_team: object, context: dict) -> dict:
    """A job payload's plain data on who asks: their workspace as the payload names it, and the
    installation's own workspace and organization as Bolt's `authorize` gave them (bot/slack_identity.py)
    — `home_known` when that was `auth.test`'s answer at start, not the request's own word."""
    home = context.get("authorize_result")
    return {
        "asker_team": asker_team if isinstance(asker_team, str) else "",
        "home_team": getattr(home, "team_id", None) or context.get("team_id") or "",
        "home_enterprise": getattr(home, "enterprise_id", None) or context.get("enterprise_id") or "",
        "home_known": bool(home and home.get(KNOWN_AT_START)),
    }


class TokenRefused(Exception):
    """Slack refuses the bot token itself: nobody can be answered, and a turn's first post stops it,
    saying what to do (bot/slack_revoked.py)."""


async def install_home(client: AsyncWebClient, threads: Threads) -> dict | None:
    """The installation's own workspace and organization (`team`, `enterprise`), from `auth.test` of the
    bot token, kept a day by the core; None when Slack could not say; TokenRefused when it refuses the
    token. Asked in the job when the web process did not know them at start (a Modal deployment,
    which runs no start-up check; a `serve` that could not reach Slack then): the request's own team stood in for the install's, so a
    slash command or click from another organization's person was taken for a colleague's. Kept per
    token (`token_key`): under one key for every token, SLACK_BOT_TOKEN pointed at another workspace —
    or two deployments sharing a Redis — judged everyone against the old workspace for a day."""

    async def ask() -> dict:
        said = await client.auth_test()  # not `quick`: without its answer nobody is answered
        return {"team": said.get("team_id") or "", "enterprise": said.get("enterprise_id") or ""}

    def failed(exc: BaseException) -> None:
        log.warning("auth.test failed, so who is one of ours is not known: %s", failure_words(exc))

    said = await _kept_answer(threads, f"slack:install:{token_key(client.token)}", ask, failed)
    return {"team": said.get("team") or "", "enterprise": said.get("enterprise") or ""} if said else None


async def _kept_answer(
    threads: Threads, key: str, ask: Callable[[], Awaitable[dict]], failed: Callable[[BaseException], None]
) -> dict | None:
    """What `ask` gets from Slack, kept a day under `key` by the core (`Threads.person`); None when Slack
    could not say (`failed` logs why, once a failure); TokenRefused when Slack refuses the bot token
    itself — then nobody can be answered, and a turn's first post stops it with the ERROR that says so."""
    refused = False

    async def lookup() -> dict | None:
        nonlocal refused
        try:
            return await ask()
        except (SlackClientError, KeyError, TypeError, AttributeError) as exc:
            refused = token_refused(exc)
            if not refused:
                failed(exc)
            return None

    said = await threads.person(key, lookup)
    if said is None and refused:
        raise TokenRefused
    return said


def token_key(token: str | None) -> str:
    """A bot token's name in the store: a hash of it, never the token (the store is no place for it)."""
    return hashlib.sha256((token or "").encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Person:
    """What `users.info` says of someone, as far as datathread uses it."""

    tz: str = ""
    team: str = ""
    enterprise: str = ""
    stranger: bool = False
    guest: bool = False
    deactivated: bool = False  # `deleted`: the account is deactivated (someone who has left)


def person_of(user: dict) -> dict:
    """A `users.info` user object in `Person`'s terms (plain data: kept in the store)."""
    return {
        "tz": str(user.get("tz") or ""),
        "team": str(user.get("team_id") or ""),
        "enterprise": str((user.get("enterprise_user") or {}).get("enterprise_id") or ""),
        "stranger": bool(user.get("is_stranger")),
        "guest": bool(user.get("is_restricted") or user.get("is_ultra_restricted")),
        # https://docs.slack.dev/reference/objects/user-object: `deleted` is a deactivated account
        "deactivated": bool(user.get("deleted")),
    }


async def looked_up(client: AsyncWebClient, threads: Threads, team: str, user: str) -> Person | None:
    """What Slack says of `user`, kept a day by the core so a busy thread does not ask on every turn;
    None when Slack refused, could not be reached or answered late (PROGRESS_TIMEOUT_S): one log line.
    TokenRefused when Slack refuses the bot token itself, as `install_home`: a person it could not place
    then was refused as unconfirmed, in a refusal Slack would not take either, and the log had a WARNING
    per turn instead of the one ERROR that says to reinstall."""

    async def ask() -> dict:
        return person_of((await quick(client).users_info(user=user))["user"])

    def failed(exc: BaseException) -> None:
        if what_to_do := locked_out(exc, "users.info"):
            # the scope's lack refuses everyone whom only Slack can place: the admin's to mend
            log.error("slack: %s asked about %s: %s", what_to_do, user, failure_words(exc))
        else:
            log.info("users.info for %s failed (the default time zone applies): %s", user, failure_words(exc))

    said = await _kept_answer(threads, f"slack:{team}:{user}", ask, failed)
    return Person(**{k: said[k] for k in Person.__dataclass_fields__ if k in said}) if said else None


@dataclass(frozen=True)
class Asker:
    """Who asks, for the access rules and the answer: their workspace (T…), `IncomingMessage.outsider`,
    their time zone ("" when unknown) and their Enterprise Grid organization ("" when none is known)."""

    team: str
    outsider: str = ""
    tz: str = ""
    enterprise: str = ""


async def asker(client: AsyncWebClient, threads: Threads, p: dict, *, tz: bool = False) -> Asker:
    """Who sent this job's payload. Slack is asked (`users.info`, cached) for the time zone (`tz`), and
    whenever the payload alone does not place them in the install's workspace or organization, or
    guests are refused; not for a colleague's click. What Slack says, when asked, decides."""
    # their workspace as the payload names it ("" when it does not: looked up below, never assumed ours);
    # a job queued before asker_team existed: its `team`, as then
    named = p["asker_team"] if "asker_team" in p else p.get("team", "")
    install = {"team": p.get("home_team") or "", "enterprise": p.get("home_enterprise") or ""}
    if not p.get("home_known"):  # the request's own word: Slack says whose installation this is
        try:
            found = await install_home(client, threads)
        except TokenRefused:  # nobody can be answered: the turn's first post stops it and says why
            return Asker(team=named)
        if found is None:  # nobody can be placed: refused as unconfirmed, unless outsiders are allowed —
            # and with guests refused, not even then: a guest must not pass as an allowed outsider
            unplaced = MAYBE_GUEST if not threads.settings.allow_guests else UNCONFIRMED
            return Asker(team=named, outsider=unplaced)
        install = found
    home = {install["team"], install["enterprise"]} - {""}
    at_home = not home or named in home
    strict = not threads.settings.allow_guests
    try:
        person = await looked_up(client, threads, named, p["user"]) if tz or strict or not at_home else None
    except TokenRefused:  # as above: the turn's first post stops it with the ERROR that says why
        return Asker(team=named)
    # An Enterprise Grid organization's people in a Slack Connect channel may be named by their org (E…)
    team = person.team if person and person.team and not named.startswith("T") else named
    if person and home and (person.team or person.enterprise):
        at_home = placed_at_home(person, home)
    # their organization, for an allowlist that names it: Slack's word, else ours for one of ours
    org = person.enterprise if person and person.enterprise else (install["enterprise"] if at_home else "")
    outsider = standing(person, at_home=at_home, strict=strict)
    return Asker(team=team, outsider=outsider, tz=_tz(person), enterprise=org)


def placed_at_home(person: Person, home: set[str]) -> bool:
    """Whether `users.info` places someone in the installation's workspace or organization. Whenever
    they were looked up this decides, not the payload: its word was taken over Slack's answer."""
    return bool({person.team, person.enterprise} & home)


def standing(person: Person | None, *, at_home: bool, strict: bool) -> str:
    """`IncomingMessage.outsider` for someone placed `at_home` (or not) — by `users.info` when it said,
    else by the payload — given what `users.info` said (None: it could not be asked) and whether guests
    are refused (`strict`)."""
    if person is None:  # at home, guests refused: not known to be no guest (not "not ours")
        return (MAYBE_GUEST if strict else "") if at_home else UNCONFIRMED
    if person.deactivated:  # whoever they were, they have left: refused by every rule (core/access.py)
        return DEACTIVATED
    if person.stranger or not at_home:
        return EXTERNAL
    return GUEST if person.guest else ""


def _tz(person: Person | None) -> str:
    return person.tz if person else ""


def clicker(p: dict, who: Asker | None = None) -> IncomingMessage:
    """A job's payload (`slack_app.action_payload`, a slash command's) in the terms access rules are
    checked in; `who` as `asker` found them, else as the payload names them."""
    channel = p.get("channel", "")
    return IncomingMessage(
        text="",
        surface="slack",
        thread_key=(p.get("team", ""), channel, p.get("thread_ts", "")),
        user_id=p.get("user", ""),
        channel_id=channel,
        team_id=who.team if who else p.get("asker_team") or p.get("team", ""),
        enterprise_id=who.enterprise if who else "",
        # a DM (https://docs.slack.dev/reference/objects/conversation-object)
        is_direct=channel.startswith("D"),
        outsider=who.outsider if who else "",
    )


async def refused_click(threads: Threads, client: AsyncWebClient, p: dict) -> bool:
    """True (and the person told, privately, as a refused question is) when they may not act here."""
    denial = threads.refused(clicker(p, await asker(client, threads, p)))
    if denial is None:
        return False
    await tell_clicker(client, p, {"text": f":warning: {render.escape(denial)}"})
    return True


async def tell_clicker(client: AsyncWebClient, p: dict, msg: dict) -> None:
    """`msg` to the person who clicked alone, in the thread of what they clicked. chat.postEphemeral
    needs the bot in the channel, but a private `/ask` answer carries buttons where it is not: a click
    there was refused (`not_in_channel`), a traceback in the log and nothing for the person. The
    click's own response_url reaches them wherever they clicked (as a slash command's does)."""
    try:
        await client.chat_postEphemeral(
            channel=p["channel"], user=p["user"], thread_ts=p.get("thread_ts") or None, **msg
        )
    except SlackApiError as exc:
        if not (cannot_post_here(exc) and p.get("response_url")):
            raise
        await answer_via_response_url(
            client,
            p["response_url"],
            what=f"The reply to {p['user']}'s click in {p['channel']}",
            response_type="ephemeral",
            replace_original=False,
            text=msg.get("text", ""),
            blocks=msg.get("blocks"),
        )
