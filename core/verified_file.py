"""The curated `verified_queries.yaml`: read and checked once, at start-up, every mistake one sentence.

Its entries are offered to the model as worked examples "verified by" someone, so an entry must be
something the bot would run itself. Each entry's SQL goes through the read-only policy that checks the
model's own queries (core/policy.py), in the warehouse's dialect: a `DELETE`, two statements or a
`read_csv('/etc/passwd')` offered as verified would teach the model what it may not do. The table
allowlist is not applied here — it depends on who asks, and applies when the model runs its query.

Format::

    queries:
      - question: How many flights left JFK in 2013?
        sql: SELECT count(*) FROM flights WHERE origin = 'JFK'
        verified_by: data-team          # optional (default: the file's name)
        tables: [flights]               # optional: read from the SQL when missing
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from core.config import ConfigError
from core.policy import check_sql


@dataclass(frozen=True)
class CuratedEntry:
    """One checked entry, as written (the caller reads the tables from the SQL when `tables` is ())."""

    question: str
    sql: str
    tables: tuple[str, ...]
    verified_by: str


def read_curated(path: Path, dialect: str) -> list[CuratedEntry]:
    """The file's entries, checked; ConfigError in one sentence naming the entry at the first mistake."""
    items = _queries(_parse(path), path)
    return [_entry(item, f"Entry {n} of {path}", dialect) for n, item in enumerate(items, 1)]


def _parse(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"The verified queries file {path} cannot be read: {type(exc).__name__}.") from None


def _queries(raw: object, path: Path) -> list:
    items = raw.get("queries") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"The verified queries file {path} needs a top-level `queries:` list.")
    return items


def _entry(item: object, name: str, dialect: str) -> CuratedEntry:
    if not isinstance(item, dict) or not item.get("question") or not item.get("sql"):
        raise ConfigError(f"{name} needs a `question` and an `sql`.")
    question, sql = str(item["question"]).strip(), str(item["sql"]).strip()
    name = f'{name} ("{_short(question)}")'
    verdict = check_sql(sql, dialect=dialect)
    if not verdict.allowed:
        raise ConfigError(f"{name} has SQL the bot would refuse to run: {verdict.reason}")
    return CuratedEntry(
        question=question,
        sql=sql,
        tables=tuple(str(t) for t in item.get("tables") or ()),
        verified_by=str(item.get("verified_by") or ""),
    )


def _short(question: str, limit: int = 60) -> str:
    return question if len(question) <= limit else question[: limit - 1] + "…"
