"""A person's answer to a file consent card (a CSV offered in personal chat): upload the file to their
OneDrive once per offer, or say why not. Its own module: the card's round trip (the signed offer, the
claim that makes a second Accept harmless, OneDrive's upload URL, a new offer when OneDrive refuses) is
one concern, apart from the turns and card actions of bot/teams_jobs.py.
"""

from __future__ import annotations

import logging
import time

import httpx
from botbuilder.schema import Activity

from bot import teams_render as render
from bot.surface import AppState
from bot.teams_progress import TeamsOut

log = logging.getLogger("datathread.teams")


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
    problem = (await state.links.signer()).check(
        session_id, path, str(context.get("exp", "")), str(context.get("sig", ""))
    )
    info = value.get("uploadInfo") or {}
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
    headers = {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.put(info["uploadUrl"], content=data, headers=headers)
        refused = f"HTTP {response.status_code}" if response.status_code >= 300 else ""
    except httpx.HTTPError as exc:  # OneDrive out of reach or silent: said like a refusal, not a traceback
        refused = type(exc).__name__  # not its text: the upload URL carries OneDrive's tempauth token
    if refused:
        log.warning("teams: file upload failed (%s)", refused)
        offered = path.rsplit("/", 1)[-1]  # the file's own name on the card, as the first offer had it
        again = render.file_consent_card(offered, len(data), await state.links.offer(session_id, path))
        await out.send(
            f"I couldn't upload {name} to your OneDrive; accept this one to try again.", attachments=[again]
        )
        return
    await state.threads.note(offer, "uploaded", ttl_s=lives_s)  # as long as the claim is kept
    await out.send(attachments=[render.file_info_card(info)])
