"""The curated `verified_queries.yaml`: read and checked once, at start-up, every mistake one sentence.

Its entries are offered to the model as worked examples "verified by" someone, so an entry must be
something the bot would run itself. Each entry's SQL goes through the read-only policy that checks the
model's own queries (core/policy.py), in the warehouse's dialect: a `DELETE`, two statements or a
`read_csv('/etc/passwd')` offered as verified would teach the model what it may not do. The table
allowlist is not applied here — it depends on who asks, and applies when the model runs its query.
An entry claims a date only when it gives one (`verified_on`): the file's modification time is when
it was last saved, copied or checked out — "verified today" to the model after every deploy. A
misspelled key, a table list written as one string, the same entry twice or a YAML syntax error is
refused too, naming the entry (or the line), rather than loaded as something other than what was meant.

Format::

    queries:
      - question: How many flights left JFK in 2013?
        sql: SELECT count(*) FROM flights WHERE origin = 'JFK'
        verified_by: data-team          # optional (default: the file's name)
        verified_on: 2026-03-02         # optional; without it no date is claimed
        tables: [flights]               # optional: read from the SQL when missing
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import re
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from core.config import ConfigError
from core.policy import check_sql
from core.wording import os_words

KEYS = ("question", "sql", "verified_by", "verified_on", "tables")


@dataclass(frozen=True)
class CuratedEntry:
    """One checked entry, as written (the caller reads the tables from the SQL when `tables` is ())."""

    question: str
    sql: str
    tables: tuple[str, ...]
    verified_by: str
    verified_at: float | None  # UTC midnight of `verified_on`; None: the file does not say


def read_curated(path: Path, dialect: str) -> list[CuratedEntry]:
    """The file's entries, checked; ConfigError in one sentence naming the entry at the first mistake."""
    items = _queries(_parse(path), path)
    out: list[CuratedEntry] = []
    seen: dict[tuple[str, str], int] = {}  # the same question and SQL twice: one id, listed twice
    for n, item in enumerate(items, 1):
        entry = _entry(item, f"Entry {n} of {path}", dialect)
        first = seen.setdefault((entry.question, entry.sql), n)
        if first != n:
            raise ConfigError(
                f"Entries {first} and {n} of {path} are the same verified query "
                f'("{_short(entry.question)}"); keep one of them.'
            )
        out.append(entry)
    return out


def _parse(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        why = os_words(exc) or type(exc).__name__
        raise ConfigError(f"The verified queries file {path} cannot be read: {why}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"The verified queries file {path} is not UTF-8 text (byte {exc.start + 1})."
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"The verified queries file {path} is not valid YAML{_yaml_problem(text, exc)}."
        ) from None


def _yaml_problem(text: str, exc: yaml.YAMLError) -> str:
    """Where PyYAML gave up and what it found there, in words: its token names ("<block end>") put
    plainly, without its excerpt of the file. It marks an unclosed quote (and a flow list left open)
    past the end of the file: the quote's own line is the one to point at."""
    problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
    mark, opened = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    if opened is not None and "quoted scalar" in (context or ""):
        return f": the quote opened at line {opened.line + 1}, column {opened.column + 1} is never closed"
    if mark is None:
        return f": {(str(exc).splitlines() or [type(exc).__name__])[0]}"
    what = _TOKEN.sub(lambda m: _TOKENS.get(m[1], m[1]), problem or "unexpected text")
    what = what.replace("found '?'", 'found a "key:"')
    what += next((hint for words, hint in _HINTS.items() if words in (problem or "")), "")
    if mark.line >= len(text.splitlines()):
        return f" at the end of the file: {what}"
    return f" at line {mark.line + 1}, column {mark.column + 1}: {what}"


_HINTS = {  # what usually causes PyYAML's complaint
    "block": "; check the indentation",
    "mapping values are not allowed": ' (a value containing ": " needs quotes)',
    "'\\t'": "; YAML indents with spaces, not tabs",
}
_TOKEN = re.compile(r"'?<([a-z ]+)>'?")
_TOKENS = {
    "block end": "the end of an indented block",
    "block sequence start": 'a list item ("- ")',
    "block entry": 'a list item ("- ")',
    "block mapping start": 'a "key: value"',
    "stream end": "the end of the file",
    "document start": 'a new document ("---")',
    "flow sequence end": 'a closing "]"',
    "flow mapping end": 'a closing "}"',
}


def _queries(raw: object, path: Path) -> list:
    items = raw.get("queries") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"The verified queries file {path} needs a top-level `queries:` list.")
    return items


def _entry(item: object, name: str, dialect: str) -> CuratedEntry:
    if not isinstance(item, dict):
        raise ConfigError(f"{name} needs a `question` and an `sql`.")
    if item.get("question") and not isinstance(item["question"], (dict, list)):
        name = f'{name} ("{_short(str(item["question"]).strip())}")'
    unknown = [str(k) for k in item if k not in KEYS]
    if unknown:  # a misspelled `verified_by` was ignored, and the entry said it was verified by the file
        close = difflib.get_close_matches(unknown[0], KEYS, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise ConfigError(f"{name} has an unknown key `{unknown[0]}`{hint}; the keys are {', '.join(KEYS)}.")
    if not item.get("question") or not item.get("sql"):
        raise ConfigError(f"{name} needs a `question` and an `sql`.")
    question = _text(item, "question", name)
    sql = _text(item, "sql", name)
    verdict = check_sql(sql, dialect=dialect)
    if not verdict.allowed:
        raise ConfigError(f"{name} has SQL the bot would refuse to run: {verdict.reason}")
    return CuratedEntry(
        question=question,
        sql=sql,
        tables=_tables(item.get("tables"), name),
        verified_by=_text(item, "verified_by", name) if item.get("verified_by") is not None else "",
        verified_at=_when(item.get("verified_on"), name),
    )


def _text(item: dict, key: str, name: str) -> str:
    value = item.get(key)
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{name} has a {type(value).__name__} as `{key}`; it should be text.")
    return str(value).strip()


def _tables(value: object, name: str) -> tuple[str, ...]:
    """A list of names, or one string of them (`tables: flights` was split into f, l, i, g, h, t, s)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or any(isinstance(t, (dict, list)) for t in value):
        raise ConfigError(f"{name} has `tables` that are not a list of table names, like [flights, weather].")
    return tuple(t for t in (str(t).strip() for t in value) if t)


def _when(value: object, name: str) -> float | None:
    """`verified_on` as a timestamp: a date (UTC midnight), or a date and time (without a zone: UTC)."""
    if value is None:
        return None
    if isinstance(value, str):  # quoted, or with a time YAML does not read itself
        with contextlib.suppress(ValueError):
            value = dt.datetime.fromisoformat(value.strip())
    if isinstance(value, dt.datetime):
        at = (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    elif isinstance(value, dt.date):
        at = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    else:
        raise ConfigError(f"{name} has a `verified_on` that is not a date: write it as 2026-03-02.")
    if at > time.time() + 86400:  # a day's grace for time zones: "verified" in the future is no date
        raise ConfigError(f"{name} has a `verified_on` in the future ({value}).")
    return at


def _short(question: str, limit: int = 60) -> str:
    return question if len(question) <= limit else question[: limit - 1] + "…"
