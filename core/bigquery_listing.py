"""`list_tables` on BigQuery at a real data team's scale: hundreds of datasets, thousands of tables,
tables dropped while listing, an allowlisted dataset that no longer exists.

It was one `tables.list` per dataset and one `tables.get` per table, one after another, and the first
error ended it: 300 datasets at 0.2 s a round trip ran into the 120 s limit with nothing to show (and
its thread kept calling after the caller gave up); one staging table dropped between the list and the
get, one unreadable table or one deleted dataset failed the whole listing. Now:

- `tables.list` alone says what a table is (its type); `tables.get` (row count, description) is made
  only when the listing is short enough to read whole (COUNTED_TABLES). No query is run: row counts
  from `__TABLES__` or INFORMATION_SCHEMA would be billed (10 MB minimum per query, never cached) and
  need `bigquery.jobs.create`, where discovery is free and needs only metadata rights (docs/BIGQUERY.md).
- The calls run a few at a time (LISTING_WORKERS), at most LISTING_CALLS of them, within LIST_S;
  what was found by then is listed, with a line saying the list is partial and what was not listed.
  `Run.stop()` (the caller gave up, or was cancelled) ends every worker before its next call, and
  its retries.
- A dataset or table BigQuery says is gone or forbidden, or that met a server error (5xx) to the end of
  its retries, is skipped, with one line saying which and why (and a log line for a configured dataset
  that does not exist); the rest is listed. (One dataset's 5xx stopped every worker.)
- A partial listing (bounds reached, a 5xx skipped, the caller gone) is cached PARTIAL_TTL_S only.
- At most MAX_LISTED lines across all datasets; date-sharded tables (`events_20240101`, …) are one line
  (`events_*`); the note says how many there were and how to ask for one dataset.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core import bigquery_metadata
from core.bigquery_client import bounded
from core.bigquery_datasets import split_pattern
from core.bigquery_errors import describe_error
from core.policy import TableAllowlist
from core.table_notes import TableNotes

log = logging.getLogger(__name__)

MAX_LISTED = 200  # lines of a listing (a shard group is one)
COUNTED_TABLES = 50  # a listing this short gets row counts and descriptions (a tables.get each)
LISTING_CALLS = 400  # metadata calls one listing may make
LISTING_WORKERS = 6  # of them at once (BigQuery allows 100 API requests a second per user and method)
LIST_S = 40.0  # a whole listing; what was found by then is listed
PAGE = 1000  # tables.list page size (BigQuery's maximum)
PARTIAL_TTL_S = 60.0  # a partial listing is served again this long (a whole one: the metadata TTL)
SHARD = re.compile(r"^(.*\D)?((?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01]))$")


class TableListing(list):
    """[{name, rows?, description}] — `rows` absent where it was not looked up — and `notes`: lines on
    what was skipped, left out or not reached, for the model to read after the tables."""

    def __init__(self, tables: Iterable[dict] = (), notes: Iterable[str] = (), partial: bool = False):
        super().__init__(tables)
        self.notes = list(notes)
        self.partial = partial  # not everything was listed: cached PARTIAL_TTL_S only


@dataclass
class Run:
    """One listing's bounds, shared by its worker threads and the caller, who may give up on it."""

    call_s: float
    deadline: float
    calls_left: int = LISTING_CALLS
    stopped: threading.Event = field(default_factory=threading.Event)
    ran_out: str = ""  # why it stopped early, in words ("its 40 s", "its 400 calls")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, call_s: float | None = None, seconds: float = LIST_S) -> Run:
        """A listing from now, each call given up after `call_s` (default: a metadata call's CALL_S)."""
        return cls(call_s=call_s or bigquery_metadata.CALL_S, deadline=time.monotonic() + seconds)

    def stop(self) -> None:
        self.stopped.set()

    def next_call(self) -> dict | None:
        """The keywords of one more call (bounded by what is left), or None: the listing is over."""
        with self._lock:
            left = self.deadline - time.monotonic()
            if self.stopped.is_set():
                return None
            if left <= 0.05 or self.calls_left <= 0:
                self.ran_out = self.ran_out or ("its time limit" if left <= 0.05 else "its call limit")
                return None
            self.calls_left -= 1
        seconds = min(self.call_s, left)
        retry = bounded(seconds)  # google's retry, which also ends when the listing was stopped
        return {
            "retry": retry.with_predicate(lambda exc: not self.stopped.is_set() and retry._predicate(exc)),
            "timeout": seconds,
        }


@dataclass
class Found:
    """What the workers found so far: readable by the caller whenever it stops waiting."""

    datasets: list[str] = field(default_factory=list)
    tables: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # dataset → [(table, type)]
    details: dict[str, dict] = field(default_factory=dict)  # full name → {rows, description}
    skipped: list[str] = field(default_factory=list)
    failure: BaseException | None = None  # not a per-item refusal: the listing stopped on it
    transient: bool = False  # an item skipped for a server error, which may pass
    lock: threading.Lock = field(default_factory=threading.Lock)

    def skip(self, what: str, why: str) -> None:
        with self.lock:
            self.skipped.append(f"{what} ({why})")

    def snapshot(self) -> Found:
        """A copy to read while workers given up on may still be adding to this one."""
        with self.lock:
            return Found(
                list(self.datasets),
                dict(self.tables),
                dict(self.details),
                list(self.skipped),
                self.failure,
                self.transient,
            )


def gather(
    client, allow: TableAllowlist, default_project: str | None, run: Run, found: Found, *, dataset=None
):
    """Fill `found` within `run`'s bounds (blocking; the warehouse runs it in a thread)."""
    # a project whose datasets cannot be listed at all is the listing's failure, not one item's
    found.datasets = [dataset] if dataset else _datasets(client, allow, default_project, run, found)
    _in_parallel(found.datasets, lambda ds: _list_dataset(client, ds, allow, run, found), run, found)
    entries = _entries(found)
    if len(entries) <= COUNTED_TABLES and not run.ran_out and found.failure is None:
        plain = [f"{ds}.{table}" for ds, table, dates in entries if not dates]
        _in_parallel(plain, lambda name: _get_table(client, name, run, found), run, found)


def dataset_to_list(dataset: str, allow: TableAllowlist, default_project: str | None) -> str:
    """`project.dataset` of the dataset list_tables was asked for (`dataset` alone: of the billing
    project), if the allowlist admits any table of it; LookupError otherwise. The dataset's name keeps
    its case (BigQuery's are case-sensitive: lower-cased, `Reporting` was skipped as not found)."""
    parts = [p for p in dataset.strip().replace("`", "").split(".") if p]
    if len(parts) == 1 and default_project:
        parts = [default_project, *parts]
    name = ".".join([parts[0].lower(), *parts[1:]]) if parts else ""
    if len(parts) != 2 or not (allow.allow_all or allow.allows_some(f"{name}.")):
        raise LookupError(f"No dataset named {dataset!r} that you may use. Call list_tables to see them.")
    return name


def _in_parallel(items: list, work: Callable, run: Run, found: Found) -> None:
    """`work(item)` for each item in LISTING_WORKERS daemon threads (named `bigquery`, as off_loop's);
    a failure that is not about one item stops the rest."""
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for item in items:
        todo.put(item)

    def worker() -> None:
        while not run.stopped.is_set():
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            try:
                work(item)
            except Exception as exc:  # BigQuery unreachable, a 5xx: the listing ends with what it has
                found.failure = found.failure or exc
                run.stop()

    threads = [
        threading.Thread(target=worker, daemon=True, name="bigquery")
        for _ in range(min(LISTING_WORKERS, len(items)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _item_error(exc: BaseException, found: Found) -> str | None:
    """Why one dataset or table is skipped (a 403, a 404, a 5xx retried to its bound), or None: the
    error is not about that item (BigQuery unreachable) and ends the listing."""
    from google.api_core import exceptions as gexc

    cause = exc.cause if isinstance(exc, gexc.RetryError) and exc.cause is not None else exc
    if not isinstance(cause, gexc.GoogleAPICallError):
        return None
    if cause.code in (403, 404):
        return "not found" if cause.code == 404 else "the bot's account may not read it"
    if (cause.code or 0) >= 500:
        found.transient = True
        return f"error: {describe_error(cause)}"
    return None


def _list_dataset(client, dataset: str, allow: TableAllowlist, run: Run, found: Found) -> None:
    token, tables = None, []
    while True:
        call = run.next_call()
        if call is None:
            return  # not reached: the dataset stays out of found.tables
        try:
            listed = client.list_tables(dataset, page_size=PAGE, page_token=token, **call)
            page = next(listed.pages, None)
        except Exception as exc:
            why = _item_error(exc, found)
            if why is None:
                raise
            if why == "not found":
                log.warning("BigQuery dataset %s (from the allowlist) does not exist", dataset)
            found.skip(f"dataset {dataset}", why)
            return
        for item in page or ():
            full = f"{item.project}.{item.dataset_id}.{item.table_id}"
            if allow.allows(full):
                tables.append((item.table_id, item.table_type or "TABLE"))
        token = listed.next_page_token
        if not token:
            with found.lock:
                found.tables[dataset] = tables
            return


def _get_table(client, full: str, run: Run, found: Found) -> None:
    call = run.next_call()
    if call is None:
        return
    try:
        table = client.get_table(full, **call)
    except Exception as exc:
        why = _item_error(exc, found)
        if why is None:
            raise
        found.skip(full, "gone since it was listed" if why == "not found" else why)
        with found.lock:
            found.details[full] = {"gone": True}
        return
    # A view has no row count (BigQuery gives none): None, never "0 rows" (it read as empty).
    rows = table.num_rows if table.table_type not in ("VIEW", "EXTERNAL") else None
    with found.lock:
        found.details[full] = {"rows": rows, "description": table.description}


def _datasets(
    client, allow: TableAllowlist, default_project: str | None, run: Run, found: Found
) -> list[str]:
    """Datasets worth listing: those an allowlist pattern names, or all of a named project."""
    out: set[str] = set()
    for pattern in allow.patterns:
        project, dataset = split_pattern(pattern, default_project)
        if dataset:
            out.add(f"{project}.{dataset}")
            continue
        token = None
        while True:
            call = run.next_call()
            if call is None:
                break
            listed = client.list_datasets(project, page_token=token, **call)
            page = next(listed.pages, None)
            for item in page or ():
                if allow.allows_some(f"{project}.{item.dataset_id}."):
                    out.add(f"{project}.{item.dataset_id}")
            token = listed.next_page_token
            if not token:
                break
    return sorted(out)


def _shard_key(name: str) -> tuple[str, str] | None:
    """(prefix, date) of a date-sharded table's name (`events_20240101`), else None."""
    matched = SHARD.match(name.rsplit(".", 1)[-1])
    # a name that is only a date (`20240101`) is no shard of anything: `ds.*` would be every table
    return (matched.group(1), matched.group(2)) if matched and matched.group(1) else None


def _entries(found: Found) -> list[tuple[str, str, list[str]]]:
    """(dataset, table or shard prefix + '*', [shard dates]) per line, in name order: a prefix with
    two or more date shards is one line."""
    out = []
    for dataset in found.datasets:
        tables = found.tables.get(dataset, [])
        shards: dict[str, list[str]] = {}
        for table, _ in tables:
            key = _shard_key(table)
            if key:
                shards.setdefault(key[0], []).append(key[1])
        for table, _ in tables:
            key = _shard_key(table)
            if key and len(shards[key[0]]) > 1:
                if key[1] == min(shards[key[0]]):
                    out.append((dataset, f"{key[0]}*", sorted(shards[key[0]])))
            else:
                out.append((dataset, table, []))
    return sorted(out)


def render(found: Found, run: Run, notes: TableNotes) -> TableListing:
    """The listing for the model: at most MAX_LISTED lines, and notes on what is not in them."""
    found = found.snapshot()
    if found.failure is not None and not any(found.tables.values()):
        raise found.failure  # nothing listed at all: the caller says why in one sentence
    entries = [e for e in _entries(found) if not found.details.get(f"{e[0]}.{e[1]}", {}).get("gone")]
    listing = TableListing()
    for dataset, table, dates in entries[:MAX_LISTED]:
        full = f"{dataset}.{table}"
        if dates:
            about = (
                f"{len(dates)} date shards, {dates[0]}–{dates[-1]}: query `{full}` with a WHERE on "
                "_TABLE_SUFFIX, or one shard by name"
            )
            listing.append({"name": full, "description": about})
            continue
        entry: dict = {"name": full, "description": notes.headline(full)}
        detail = found.details.get(full)
        if detail is not None:
            entry = {
                "name": full,
                "rows": detail["rows"],
                "description": detail["description"] or entry["description"],
            }
        listing.append(entry)
    listing.notes = _notes(found, run, entries, len(listing))
    unlisted = [ds for ds in found.datasets if ds not in found.tables and not _was_skipped(found, ds)]
    listing.partial = bool(run.ran_out or found.failure or found.transient or unlisted)
    return listing


def _notes(found: Found, run: Run, entries: list, shown: int) -> list[str]:
    lines = []
    if shown < len(entries):
        datasets = sorted({e[0] for e in entries[shown:]})
        lines.append(
            f"{shown} of {len(entries)} shown ({len(found.tables)} datasets). Not shown: tables of "
            f"{_names(datasets)}. To see one dataset whole, call list_tables with dataset='{datasets[0]}'."
        )
    unlisted = [ds for ds in found.datasets if ds not in found.tables and not _was_skipped(found, ds)]
    if unlisted:
        why = run.ran_out or (
            f"an error: {describe_error(found.failure)}" if found.failure is not None else "being stopped"
        )
        lines.append(
            f"The list is partial: listing stopped at {why} with {len(found.tables)} of "
            f"{len(found.datasets)} datasets listed. Not listed: {_names(unlisted)}. Ask for one with "
            f"list_tables dataset='{unlisted[0]}'."
        )
    if found.skipped:
        lines.append(f"Skipped: {'; '.join(sorted(found.skipped))}.")
    if entries and not found.details:
        lines.append("Row counts are not listed here: describe_table shows a table's.")
    return lines


def _was_skipped(found: Found, dataset: str) -> bool:
    return any(s.startswith(f"dataset {dataset} (") for s in found.skipped)


def _names(names: list[str], limit: int = 40) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
