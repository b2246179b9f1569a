"""The Block Kit the bot draws around answers: the footer under each answer (its receipt and the
Show SQL & code, 👍/👎, Export and Schedule… controls, with the action ids bot/slack_app.py routes),
Run/Cancel confirmations, the App Home tab, a DM's suggested prompts, and the lines of the edited
status message.

Kept apart from bot/slack_render.py, which turns the model's Markdown into Slack text within Slack's
limits: a new button or view changes this module only. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot.slack_render import SECTION_LIMIT, answer_messages, escape, inert, to_mrkdwn
from bot.transcript import StepLine, format_bytes, recorded_steps
from core.events import Receipt
from core.receipt import AsOf, receipt_line
from core.schedules import ANSWER_CADENCES
from core.wording import counted

ACTION_SHOW_SQL = "datathread_show_sql"
ACTION_FEEDBACK_UP = "datathread_feedback_up"
ACTION_FEEDBACK_DOWN = "datathread_feedback_down"
ACTION_EXPORT = "datathread_export"
ACTION_CONFIRM_RUN = "datathread_confirm_run"
ACTION_CONFIRM_CANCEL = "datathread_confirm_cancel"
ACTION_SCHEDULE = "datathread_schedule"


def stats_line(stats: Mapping) -> str:
    """'3 steps · 16 rows · 1.2 MB scanned · 4.1 s' from TurnStats fields (a dict)."""
    steps = int(stats.get("steps", 0))
    parts = [counted(steps, "step")]
    if stats.get("rows"):
        parts.append(counted(int(stats["rows"]), "row"))
    if stats.get("bytes_scanned"):
        parts.append(f"{format_bytes(int(stats['bytes_scanned']))} scanned")
    parts.append(f"{float(stats.get('duration_s', 0.0)):.1f} s")
    return " · ".join(parts)


def footer_blocks(
    turn_id: str,
    stats: Mapping,
    *,
    receipt: Receipt | None = None,
    with_export: bool = True,
    schedulable: bool = False,
) -> list[dict]:
    """The compact footer under every answer: its receipt (or the stats), Show SQL & code, 👍/👎, Export
    and Schedule… — the last only when the turn's end says a schedule can repeat it (`schedulable`: not
    an answer that read a shared file, whose pick could only be refused). The thumbs carry words for
    screen readers, which read the emoji alone as "thumbs up sign"."""
    buttons = [
        _button("Show SQL & code", ACTION_SHOW_SQL, turn_id),
        _button("👍", ACTION_FEEDBACK_UP, turn_id, label="Mark this answer helpful"),
        _button("👎", ACTION_FEEDBACK_DOWN, turn_id, label="Mark this answer not helpful"),
    ]
    if with_export:  # not on private answers: both post into the channel
        buttons.append(_button("Export notebook", ACTION_EXPORT, turn_id))
        if schedulable:
            buttons.append(schedule_menu(turn_id))
    return [
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": receipt_mrkdwn(receipt) if receipt else stats_line(stats)}
            ],
        },
        {"type": "actions", "block_id": f"dt_footer_{turn_id}", "elements": buttons},
    ]


def receipt_mrkdwn(receipt: Receipt, *, now: datetime | None = None) -> str:
    """The receipt as mrkdwn: its words escaped, and "data as of" a date token that each reader sees in
    their own time zone and clock ("today 9:48 AM"; https://docs.slack.dev/messaging/formatting-message-text,
    dates), the UTC words its fallback. Other surfaces' receipts keep the UTC words."""
    return receipt_line(receipt, now=now, safe=escape, dated=_date_token)


def _date_token(as_of: AsOf) -> str:
    # Slack capitalises a date's first letter ("data as of Today"); a zero-width space before it does not.
    shown = "\u200b{date_short_pretty} {time}" if as_of.with_time else "{date_short}"
    return f"<!date^{int(as_of.moment.timestamp())}^{shown}|{escape(as_of.words)}>"


def schedule_menu(turn_id: str) -> dict:
    """ "Schedule…": post this answer's question again on a cadence (confirmed with Create / Cancel)."""
    return {
        "type": "static_select",
        "action_id": ACTION_SCHEDULE,
        "placeholder": {"type": "plain_text", "text": "Schedule…"},
        "options": [
            {"text": {"type": "plain_text", "text": label}, "value": f"{turn_id} {cron}"}
            for label, cron in ANSWER_CADENCES
        ],
    }


def _button(
    text: str, action_id: str, value: str, style: str | None = None, *, label: str | None = None
) -> dict:
    """A button as slack-sdk's model builds it (it checks Slack's limits: text, value, action id);
    `label` is what a screen reader says for it (`accessibility_label`)."""
    return ButtonElement(
        text=PlainTextObject(text=text, emoji=True),
        action_id=action_id,
        value=value,
        style=style,
        accessibility_label=label,
    ).to_dict()


def steps_messages(record: Mapping) -> list[dict]:
    """Every query and code step of a turn, for the person who clicked 'Show SQL & code' (the
    `markdown` block makes step text inert: entities for `<`, `>`, `&`)."""
    return answer_messages(recorded_steps(record, escape=str))  # all of it, over several messages


def confirm_blocks(prompt: str, token: str, yes: str = "Run it") -> list[dict]:
    """Run/Cancel (or Create/Cancel) buttons for a waiting step; `token` identifies it."""
    section = SectionBlock(text=MarkdownTextObject(text=to_mrkdwn(prompt)[:SECTION_LIMIT]))
    buttons = [
        _button(yes or "Run it", ACTION_CONFIRM_RUN, token, "primary"),
        _button("Cancel", ACTION_CONFIRM_CANCEL, token, "danger"),
    ]
    return [section.to_dict(), ActionsBlock(elements=buttons).to_dict()]


def failure_text(message: str, error_id: str) -> str:
    """The one line a failed turn ends with: short, human, with the id that matches the log line."""
    return f":warning: {message} (error id `{error_id}`)" if error_id else f":warning: {message}"


def home_view(tables: list[dict], examples: list[str], slash_command: str) -> dict:
    """The App Home tab: what datathread does, the tables it sees, and questions to try."""
    listed = "\n".join(
        f"• `{t['name']}`" + (f" — {counted(int(t['rows']), 'row')}" if t.get("rows") is not None else "")
        for t in tables[:40]
    )
    more = f"\n…and {len(tables) - 40} more" if len(tables) > 40 else ""
    intro = (
        "*datathread answers data questions in your threads.* Mention me in a channel, DM me, or use "
        f"`{slash_command} question` (`{slash_command} private question` answers only you). I query the "
        "warehouse, run Python for charts, and attach PNGs and CSVs. Follow-ups in a thread keep the context."
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "datathread"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": intro}},
        {"type": "divider"},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": ("*Tables I can see*\n" + (listed or "none") + more)[:SECTION_LIMIT],
            },
        },
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": "*Try asking*\n" + "\n".join(f"• {q}" for q in examples)},
        },
    ]
    return {"type": "home", "blocks": blocks}


EXAMPLE_QUESTIONS = (
    "Which carriers had the most delayed departures in 2013? Chart it.",
    "How many flights left each NYC airport per month? As a CSV.",
    "Which planes flew the most miles, and who made them?",
    "Did bad weather make departures later at JFK?",
)


def suggested_prompts() -> list[dict]:
    """Prompts shown when someone opens a DM with datathread (assistant.threads.setSuggestedPrompts)."""
    return [{"title": q.split("?")[0][:60], "message": q} for q in EXAMPLE_QUESTIONS[:4]]


ICONS = {"running": ":hourglass_flowing_sand:", "done": ":white_check_mark:", "failed": ":x:"}


def status_line(row: StepLine | str) -> str:
    """A line of the edited status message: a step with its icon and outcome, or the model's remark. A
    running step says so in words: the ⏳ alone was its only sign, and a screen reader's "hourglass"."""
    if isinstance(row, str):
        return f"_{inert(row)}_"
    outcome = inert(row.outcome) or ("running…" if row.status == "running" else "")
    return f"{ICONS[row.status]} {inert(row.title)}" + (f" — {outcome}" if outcome else "")
