"""Which BigQuery datasets an allowlist names, and which of those BigQuery says are not there: the
listing's starting point and `datathread doctor`'s dataset check.

`split_pattern` is the one reading of an allowlist pattern's project and dataset (the listing and the
doctor each had their own). `missing_datasets` asks datasets.get a few at a time within a time limit
and says how many it could not check: one at a time, up to 50 of them, inside a bound whose timeout was
suppressed, the check said "ok" for datasets it never reached.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable

from core.bigquery_client import bounded

WILDCARD = "*?["
CHECK_WORKERS = 6  # datasets.get at once
MAX_CHECKED = 50  # datasets one check asks about


def split_pattern(pattern: str, default_project: str | None) -> tuple[str, str | None]:
    """(project, dataset) of an allowlist pattern (`proj.ds`, `proj.ds.table`, `proj.ds_*`); the dataset
    is None where a wildcard stands in it (its datasets must be listed). A pattern whose project is a
    wildcard is read in the default project. The dataset as written (BigQuery's dataset names are
    case-sensitive: lower-cased, the doctor called `Analytics` missing), the project id lower case."""
    project, _, rest = pattern.partition(".")
    if not project or any(c in project for c in WILDCARD):
        project, rest = default_project or "", pattern
    dataset = rest.partition(".")[0]
    return project.lower(), (dataset if dataset and not any(c in dataset for c in WILDCARD) else None)


def named_datasets(patterns: Iterable[str], default_project: str | None) -> list[str]:
    """The datasets allowlist patterns name outright (`proj.ds`, `proj.ds.table`), not by a wildcard."""
    pairs = (split_pattern(pattern, default_project) for pattern in patterns)
    return sorted({f"{project}.{dataset}" for project, dataset in pairs if project and dataset})


def missing_datasets(client, datasets: Iterable[str], call_s: float, limit_s: float) -> tuple[list[str], int]:
    """(those of `datasets` BigQuery says do not exist or the account may not see, how many could not be
    checked — an error, or `limit_s` over); datasets.get (free) CHECK_WORKERS at once, in daemon threads
    that stop calling at `limit_s`. For `datathread doctor`, where a listing skips such a dataset with a
    line the model reads, not an admin."""
    from google.api_core import exceptions as gexc

    todo: queue.SimpleQueue = queue.SimpleQueue()
    asked = list(datasets)
    names = asked[:MAX_CHECKED]
    for name in names:
        todo.put(name)
    missing: list[str] = []
    checked: list[str] = []
    lock, stop = threading.Lock(), threading.Event()
    base = bounded(call_s)  # google's retry, which also ends when the check is over
    retry = base.with_predicate(lambda exc: not stop.is_set() and base._predicate(exc))

    def worker() -> None:
        while not stop.is_set():
            try:
                name = todo.get_nowait()
            except queue.Empty:
                return
            try:
                client.get_dataset(name, retry=retry, timeout=call_s)
                gone = False
            except (gexc.NotFound, gexc.Forbidden):
                gone = True
            except Exception:  # a 5xx, unreachable: not checked
                continue
            with lock:
                checked.append(name)
                if gone:
                    missing.append(name)

    threads = [
        threading.Thread(target=worker, daemon=True, name="bigquery")
        for _ in range(min(CHECK_WORKERS, len(names)))
    ]
    deadline = time.monotonic() + limit_s
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    stop.set()
    with lock:
        return sorted(missing, key=names.index), len(asked) - len(checked)
