"""A person's answer to a file consent card (a CSV offered in personal chat): upload the file to their
OneDrive once per offer, or say why not. Its own module: the card's round trip (the signed offer, the
claim that makes a second Accept harmless, OneDrive's upload URL, a new offer when OneDrive refuses) is
one concern, apart from the turns and card actions of bot/teams_jobs.py.

The upload URL is data from the invoke: the context is ours and signed, but `uploadInfo` is what the
sender's client wrote (a Direct Line client can accept its own card with any URL). So the file is
PUT only under bot/url_vetting.py's rules, as a shared file's download is (https to public addresses,
the peer checked as the connection opens, no proxy, no login, no redirect followed; loopback only
without MICROSOFT_APP_ID), and only to where OneDrive for Business keeps upload sessions: SharePoint
Online's hosts (`UPLOAD_DOMAINS`). A URL refused is said like an upload OneDrive refused.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
from botbuilder.schema import Activity

from bot import teams_render as render
from bot import url_vetting
from bot.surface import AppState
from bot.teams_members import asker
from bot.teams_out import TeamsOut
from bot.url_vetting import HostUnknown, Refused, shown, vet

log = logging.getLogger("datathread.teams")

# SharePoint Online's hosts, where OneDrive for Business upload sessions live, per Microsoft 365 cloud
# ("Microsoft 365 URLs and IP address ranges"): worldwide and GCC (`<tenant>-my.sharepoint.com`), GCC
# High, DoD (both of its names), 21Vianet. Not the retired Microsoft Cloud Deutschland (sharepoint.de).
UPLOAD_DOMAINS = ("sharepoint.com", "sharepoint.us", "sharepoint-mil.us", "dps.mil", "sharepoint.cn")
# Module constants, read at each call: tests shorten them.
CONNECT_TIMEOUT_S = 10.0
SILENCE_S = 60.0  # the longest wait on OneDrive while it takes the file or answers
UPLOAD_DEADLINE_S = 180.0  # the whole upload (the file is at most the 50 MB attachment limit)


async def file_consent(state: AppState, activity: Activity, out: TeamsOut) -> None:
    """The person accepted (or declined) a CSV in personal chat: upload it to their OneDrive, once per
    offer (the card stays clickable: a second Accept made a second copy). Where OneDrive refuses, a new
    offer comes with the sentence, as the spent one cannot be taken again.
    https://learn.microsoft.com/microsoftteams/platform/bots/how-to/bots-filesv4"""
    value = activity.value if isinstance(activity.value, dict) else {}
    context = value.get("context")
    context = context if isinstance(context, dict) else {}  # a context that is not ours: an expired offer
    session_id, path = str(context.get("session_id", "")), str(context.get("path", ""))
    name = render.inert(path.rsplit("/", 1)[-1])
    if value.get("action") != "accept":
        await out.send(f"OK, I won't upload {name or 'the file'}.")
        return
    # An offer outlives its answer: one accepted after the person lost access (no longer listed, a
    # guest once guests are refused) uploaded the warehouse's rows all the same.
    if denial := state.threads.refused(await asker(state.threads, activity, out)):
        await out.send(denial)
        return
    problem = (await state.links.signer()).check(
        session_id, path, str(context.get("exp", "")), str(context.get("sig", ""))
    )
    info = value.get("uploadInfo")
    info = info if isinstance(info, dict) else {}
    if problem or not info.get("uploadUrl"):
        await out.send("That file offer has expired; ask again and I'll make a new one.")
        return
    offer = f"teams-offer:{context.get('sig')}:{context.get('offer', '')}"
    lives_s = max(60.0, float(context.get("exp", 0)) - time.time() + 60)  # as long as the offer can be used
    if not await state.threads.claim(offer, ttl_s=lives_s):
        if await state.threads.noted(offer) == "uploaded":
            await out.send(f"I've already uploaded {name} to your OneDrive for that offer.")
        else:  # still under way, or it failed and a newer card came with the sentence
            await out.send(
                f"That offer of {name} was already used: accept a newer card if I sent one, or ask again."
            )
        return
    try:
        data = await state.threads.read_file(session_id, path)
    except (OSError, ValueError) as exc:  # gone, or a CSV that cannot be made spreadsheet-safe
        await out.send(f"I couldn't upload {name}: {exc}.")
        return
    if not data:  # an offer made before empty files stopped being offered: no valid range to send
        await out.send(f"{name} is empty, so there is nothing to upload.")
        return
    if not await _upload(str(info["uploadUrl"]), data, loopback_ok=not state.settings.microsoft_app_id):
        offered = path.rsplit("/", 1)[-1]  # the file's own name on the card, as the first offer had it
        again = render.file_consent_card(offered, len(data), await state.links.offer(session_id, path))
        await out.send(
            f"I couldn't upload {name} to your OneDrive; accept this one to try again.", attachments=[again]
        )
        return
    await state.threads.note(offer, "uploaded", ttl_s=lives_s)  # as long as the claim is kept
    await out.send(attachments=[render.file_info_card(info)])


async def _upload(url: str, data: bytes, *, loopback_ok: bool) -> bool:
    """PUT the file into OneDrive's upload session at `url`; False, and one log line, where it was
    not taken. Never raises for the URL or the network; the URL's query (OneDrive's `tempauth`, a
    credential) is never logged. `loopback_ok`: no app id, so the Bot Connector may be on loopback."""
    headers = {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
    timeouts = httpx.Timeout(SILENCE_S, connect=CONNECT_TIMEOUT_S)
    try:
        async with asyncio.timeout(UPLOAD_DEADLINE_S):
            await vet(url, loopback_ok=loopback_ok, domains=UPLOAD_DOMAINS)
            async with (
                url_vetting.client(timeouts, loopback_ok=loopback_ok) as client,
                client.stream("PUT", url, content=data, headers=headers) as response,
            ):
                status = response.status_code  # its body is not needed, nor read
    except HostUnknown as exc:  # OneDrive's host, out of reach of this server's resolver
        log.warning("teams: file upload failed (its host did not resolve: %s)", exc)
        return False
    except Refused as exc:  # not a URL OneDrive gives (or it connected somewhere else)
        log.warning("teams: a file consent's upload URL was refused (%s): %r", exc, shown(url))
        return False
    except TimeoutError:
        log.warning("teams: file upload failed (not done within %g s)", UPLOAD_DEADLINE_S)
        return False
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # out of reach or silent: the type, not its text
        log.warning("teams: file upload failed (%s)", type(exc).__name__)
        return False
    if status >= 300:  # a redirect too: an upload session does not send one on
        log.warning("teams: file upload failed (HTTP %s)", status)
        return False
    return True
