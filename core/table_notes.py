"""Curated business notes per table (`DATATHREAD_TABLE_NOTES`): what "revenue" means, which rows to drop.

A data team knows things no schema says. They write them once, in YAML or Markdown, and the model gets
each table's note in `describe_table` and a short summary in the system prompt.

YAML::

    overview: Finance data; amounts are USD net of refunds.
    tables:
      shop.orders:
        description: One row per order. Exclude status='test'.
        columns: {amount: "USD, net of refunds"}
      shop.customers: One row per customer.

Markdown: text before the first `## ` heading is the overview; each `## <table>` section is a note.
Table keys may be `project.dataset.table`, `dataset.table` or a bare table name; lookups try all three.
The module also phrases BigQuery table metadata (layout, columns) for `describe_table`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.config import ConfigError

SUMMARY_CHARS = 1500


@dataclass(frozen=True)
class TableNotes:
    """Notes keyed by lower-case table name (as written in the file)."""

    overview: str = ""
    tables: dict[str, str] = field(default_factory=dict)

    def for_table(self, full_name: str) -> str:
        """The note for `project.dataset.table`, matched on the full, dataset-level or bare name."""
        parts = full_name.lower().strip("`").split(".")
        for k in range(len(parts)):
            note = self.tables.get(".".join(parts[k:]))
            if note:
                return note
        return ""

    def headline(self, full_name: str) -> str:
        """The first line of a table's note: a listing's description where the table has none."""
        return (self.for_table(full_name).splitlines() or [""])[0]

    def prompt_section(self) -> str:
        """The summary as the system prompt's closing section, or '' without notes."""
        summary = self.summary()
        return "\nNotes from the data team:\n" + summary if summary else ""

    def described(self, full_name: str) -> list[str]:
        """A table's note as lines of describe_table's text, or none."""
        note = self.for_table(full_name)
        return ["Notes from the data team:", note] if note else []

    def summary(self, limit: int = SUMMARY_CHARS) -> str:
        """A short text for the system prompt: the overview and each table's first line."""
        lines = [self.overview.strip()] if self.overview.strip() else []
        lines += [
            f"- {name}: {note.strip().splitlines()[0]}"
            for name, note in sorted(self.tables.items())
            if note.strip()
        ]
        text = "\n".join(lines)
        return text if len(text) <= limit else text[: limit - 1].rsplit("\n", 1)[0] + "\n…"


def _yaml_note(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    if not isinstance(value, dict):
        return str(value).strip() if value is not None else ""
    lines = [str(value.get("description", "")).strip()]
    columns = value.get("columns") or {}
    if isinstance(columns, dict) and columns:
        lines.append("Column notes:")
        lines += [f"  {col}: {str(text).strip()}" for col, text in columns.items()]
    lines += [f"{k}: {v}" for k, v in value.items() if k not in ("description", "columns")]
    return "\n".join(line for line in lines if line)


def parse_yaml(text: str) -> TableNotes:
    """Notes from YAML: `{overview, tables: {name: text | {description, columns}}}` or `{name: ...}`."""
    import yaml

    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ConfigError("DATATHREAD_TABLE_NOTES (YAML) must be a mapping of table name to notes.")
    overview = str(data.get("overview", "") or "").strip()
    tables = (
        data.get("tables")
        if isinstance(data.get("tables"), dict)
        else {k: v for k, v in data.items() if k != "overview"}
    )
    return TableNotes(overview, {str(k).lower().strip("`"): _yaml_note(v) for k, v in tables.items()})


def parse_markdown(text: str) -> TableNotes:
    """Notes from Markdown: the overview, then one `## table` section per table."""
    overview: list[str] = []
    tables: dict[str, list[str]] = {}
    current: list[str] = overview
    for line in text.splitlines():
        if line.startswith("## "):
            name = line[3:].strip().strip("`").lower()
            current = tables.setdefault(name, [])
            continue
        if current is overview and line.startswith("# "):
            continue  # the document title
        current.append(line)
    return TableNotes("\n".join(overview).strip(), {k: "\n".join(v).strip() for k, v in tables.items()})


def load_table_notes(path: Path | None) -> TableNotes:
    """Read the notes file once at start; no file configured means no notes."""
    if path is None:
        return TableNotes()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"DATATHREAD_TABLE_NOTES ({path}) could not be read: {exc.strerror}.") from None
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        try:
            return parse_yaml(text)
        except ConfigError:
            raise
        except Exception as exc:  # yaml.YAMLError and friends: one sentence, not a traceback
            raise ConfigError(
                f"DATATHREAD_TABLE_NOTES ({path}) is not valid YAML: {_problem(exc)}."
            ) from None
    return parse_markdown(text)


def _problem(exc: Exception) -> str:
    """PyYAML's error in a few words and its line, not its four-line excerpt of the file."""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} (line {mark.line + 1})" if mark is not None else str(problem)


def layout_lines(t) -> list[str]:
    """Partitioning and clustering of a BigQuery table, phrased as advice on scanning less."""
    out = []
    if t.time_partitioning is not None:
        tp = t.time_partitioning
        column = tp.field or "_PARTITIONTIME (ingestion time)"
        must = " A partition filter is required." if t.require_partition_filter else ""
        out.append(f"Partitioned by {tp.type_} on {column}: filter on it to scan less.{must}")
    if t.range_partitioning is not None:
        out.append(f"Range-partitioned on {t.range_partitioning.field}: filter on it to scan less.")
    if t.clustering_fields:
        out.append(f"Clustered by {', '.join(t.clustering_fields)}: filters on these scan less.")
    return out


MAX_COLUMN_LINES = 300  # of describe_table: a 1,500-column table filled the tool's 64,000 characters
MAX_COLUMN_CHARS = 30_000  # and so may fewer lines with long descriptions; the samples need room too


def column_lines(schema, prefix: str = "", depth: int = 0) -> list[str]:
    """One line per column (nested RECORD fields as a.b), with mode, description, and a mark on a
    column under column-level security (a policy tag: the bot's account may not be allowed to read it)."""
    lines = []
    for f in schema:
        mode = " REPEATED" if f.mode == "REPEATED" else (" NOT NULL" if f.mode == "REQUIRED" else "")
        doc = f" — {f.description}" if f.description else ""
        tagged = " [policy tag: may not be readable; leave it out if refused]" if _policy_tagged(f) else ""
        lines.append(f"  {prefix}{f.name} {f.field_type}{mode}{tagged}{doc}")
        if f.fields and depth < 3:
            lines += column_lines(f.fields, f"{prefix}{f.name}.", depth + 1)
    return lines


def column_section(schema, full_name: str, *, can_query_schema: bool = True) -> list[str]:
    """describe_table's columns within MAX_COLUMN_LINES and MAX_COLUMN_CHARS, saying how many there are
    and how to see the rest: a wide table's lines ran past the tool's limit, cut mid-line with no count,
    its sample rows lost (300 lines of 1,024-character descriptions did too). The INFORMATION_SCHEMA
    query is offered only where the allowlist lets it run (`can_query_schema`)."""
    lines = column_lines(schema)
    shown, used = 0, 0
    for line in lines[:MAX_COLUMN_LINES]:
        if used + len(line) + 1 > MAX_COLUMN_CHARS:
            break
        shown, used = shown + 1, used + len(line) + 1
    if shown == len(lines):
        return ["Columns:", *lines]
    project, dataset, table = (full_name.split(".") + ["", "", ""])[:3]
    rest = f"  … {len(lines) - shown:,} more."
    if can_query_schema:
        rest += (
            " To find others by name: SELECT column_name, data_type "
            f"FROM `{project}.{dataset}.INFORMATION_SCHEMA.COLUMNS` WHERE table_name = '{table}' AND "
            "column_name LIKE '%word%' (a metadata query: billed BigQuery's 10 MB minimum)."
        )
    return [
        f"Columns: {len(lines):,} (nested fields counted); the first {shown} shown:",
        *lines[:shown],
        rest,
    ]


def _policy_tagged(field_) -> bool:
    tags = getattr(field_, "policy_tags", None)
    return bool(tags is not None and getattr(tags, "names", None))
