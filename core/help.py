"""Replies the bot gives without the model: `help` (on every surface) and an empty message.

Both cost nothing and take no session lock: they list what the bot can do, the tables this
conversation may see (under its allowlist) and example questions. Surfaces only route the text to
`Analyst.handle`, which asks `is_local` first; the words and the table list are built here, once.
"""

from __future__ import annotations

import asyncio
import logging

from core.config import Settings
from core.policy import TableAllowlist
from core.warehouse import DEMO_TABLES, Warehouse

log = logging.getLogger("datathread.help")

HELP_WORDS = frozenset({"help", "/help", "?", "-h", "--help"})
RESET_WORDS = frozenset({"new", "reset", "/new", "/reset", "new chat", "start over"})  # a chat starts afresh


def fresh_start(settings: Settings, *, deleted: bool = True, files_gone: bool = True) -> str:
    """What `reset` says, every surface: what it deleted, and what it did not (the audit trail keeps
    the questions for DATATHREAD_AUDIT_TTL_DAYS). It said "earlier questions here are forgotten" while
    everything stayed in the store (core/thread.py's `reset` now deletes it). A shared conversation (a
    Teams channel or group chat) starts afresh without deleting anything (`deleted` False): it is
    everyone's, and anyone in it could type `reset`. `files_gone` False: the files bucket did not
    answer in time, and the download links' copies are queued for the hourly sweep."""
    days = settings.audit_ttl_days
    kept = (
        f"the audit log keeps the questions {f'for {days} days' if days else 'until an admin deletes them'}."
    )
    if not deleted:
        return (
            "Started a fresh conversation: earlier questions here no longer carry over. Nothing was "
            "deleted, as this conversation is shared with others: its history expires "
            f"{settings.history_ttl_days} days after its last message, and {kept}"
        )
    if not files_gone:
        return (
            "Started a fresh conversation: I've deleted this conversation's history and its files here; "
            "the files behind its download links could not be deleted yet and are retried within the "
            f"hour; {kept}"
        )
    return f"Started a fresh conversation: I've deleted this conversation's history and files; {kept}"


# `reset` is a command, not a question: files sent with it are not taken in, and the person is told.
FILES_NOT_READ = "I didn't read the files sent with it: share them again with your question."
LISTED_TABLES = 15
TABLES_TIMEOUT_S = 5.0
# Each listing call's own bound, under TABLES_TIMEOUT_S: an unreachable warehouse then fails with its
# cause ("Connection refused") before help stops waiting; help cut BigQuery's 20 s calls at 5 s, and
# could only say it "could not list the tables just now", never why.
TABLES_CALL_S = 3.5

DEMO_EXAMPLES = (
    "Which carriers had the most delayed flights in 2013? Chart it.",
    "How many flights left each NYC airport per month? As a CSV.",
    "Does wind speed at JFK relate to departure delays?",
)
GENERIC_EXAMPLES = (
    "What tables are there, and what is in {table}?",
    "Summarize {table} by month, and chart it.",
    "Give me the top 10 rows of {table} by the biggest numeric column, as a CSV.",
)
UNLISTED_EXAMPLES = (
    "What tables are there, and what is in them?",
    "Which table is the biggest, and what does one of its rows look like?",
    "Summarize a table you name by month, and chart it.",
)
SURFACE_TIPS = {
    # one tip for `chat` and `ask` (both are the terminal surface): ask's help once named only chat's keys
    "terminal": (
        "In `datathread chat`, Ctrl-C stops an answer in progress or clears the line, and Ctrl-D or `exit` quits; "
        "`datathread ask --session ID …` follows up on a session in one go; `/file PATH` in chat (or "
        "`ask --file PATH`) shares a CSV, Parquet, JSON or Excel file with a question."
    ),
    "slack": (
        "Mention me in a channel and reply in the thread for follow-ups; `/ask [private] …` asks in one go. "
        "In a direct message, `reset` starts over and deletes our conversation's history and files."
    ),
    # Teams gives a bot only the channel and group-chat messages that @-mention it (the app asks for no
    # ChannelMessage.Read.Group): a follow-up in the thread without a mention never reached it.
    "teams": (
        "In channels and group chats I only see messages that @-mention me: mention me again in the "
        "thread to follow up; in a chat, `new` starts over and deletes our conversation's history and files."
    ),
}


def is_reset(text: str) -> bool:
    """True for a message asking a chat to start afresh (`reset`, `new chat`…)."""
    return text.lower().strip(" .!") in RESET_WORDS


def is_local(text: str) -> bool:
    """True for messages answered here: empty, whitespace, or a help word."""
    return not text.strip() or text.strip().lower() in HELP_WORDS


async def local_answer(text: str, surface: str, warehouse: Warehouse, allowlist: TableAllowlist) -> str:
    """The help text; for an empty message, prefixed by a line saying nothing was asked."""
    tables = await _table_names(warehouse, allowlist)
    if isinstance(tables, str):
        body = help_text(surface, None, unlisted=tables)
    else:
        body = help_text(surface, tables)
    return body if text.strip() else f"You didn't ask anything. {body}"


def help_text(surface: str, tables: list[str] | None, *, unlisted: str = "") -> str:
    """What I do, the tables this conversation sees, three example questions, a tip for the surface;
    `unlisted`: why the tables could not be listed (the warehouse's sentence), when they could not."""
    lines = [
        "I answer questions about your data: I query the warehouse (read-only), work on the results with "
        "SQL and Python in a sandbox, and reply with the numbers, charts (PNG) and files (CSV). "
        "Follow-up questions in the same thread build on earlier answers.",
        "",
    ]
    if tables is None and unlisted:
        lines.append(f"I could not list the tables just now. {unlisted}")
    elif tables is None:
        lines.append("I could not list the tables just now; ask me “what tables are there?”.")
    elif not tables:
        lines.append("I can't see any tables from here (an admin may need to allow some for this channel).")
    else:
        shown = ", ".join(f"`{t}`" for t in tables[:LISTED_TABLES])
        more = f" and {len(tables) - LISTED_TABLES} more" if len(tables) > LISTED_TABLES else ""
        lines.append(f"**Tables I can see:** {shown}{more}.")
    if tables != []:  # none allowed here: questions about tables would only be refused
        lines += ["", "**Try:**", *(f"- {q}" for q in example_questions(tables or []))]
    if surface in SURFACE_TIPS:
        lines += ["", SURFACE_TIPS[surface]]
    return "\n".join(lines)


def example_questions(tables: list[str]) -> list[str]:
    """The demo's questions over the demo's tables; else questions about the first table seen; with
    no table seen (none allowed, or listing failed) none that name one — a BigQuery bot whose listing
    failed offered questions about 2013's flights."""
    if tables and set(DEMO_TABLES) <= {t.rsplit(".", 1)[-1] for t in tables}:
        return list(DEMO_EXAMPLES)
    if tables:
        return [q.format(table=f"`{tables[0]}`") for q in GENERIC_EXAMPLES]
    return list(UNLISTED_EXAMPLES)


async def _table_names(warehouse: Warehouse, allowlist: TableAllowlist) -> list[str] | str | None:
    """The names of the tables; else why they could not be listed (a sentence), or None (a bug)."""
    try:
        async with asyncio.timeout(TABLES_TIMEOUT_S):
            listed = await warehouse.list_tables(allowlist, call_s=TABLES_CALL_S)
            return [str(t["name"]) for t in listed]
    except Exception as exc:  # help must answer even when the warehouse does not
        log.warning("help: could not list tables: %s: %s", type(exc).__name__, exc)
        said = str(exc)
        # The warehouse's sentence is written for the model: shown as it is only when it is about
        # reaching the warehouse; the others name projects and datasets and tell the model which tool
        # to call next, in a channel everyone reads.
        if isinstance(exc, LookupError) and said.startswith(("Could not reach", "BigQuery did not answer")):
            return said
        if isinstance(exc, LookupError):
            return "The warehouse refused to list them; an admin can run `datathread doctor` to see why."
        if isinstance(exc, TimeoutError):
            return f"Listing them took over {TABLES_TIMEOUT_S:g} s; ask me “what tables are there?”, which waits longer."
        return None
