"""What went wrong with BigQuery, in words someone can act on: for the model (which tries something
else), or for an admin (`datathread doctor`), who can fix a role or a setting the model cannot.

BigQuery's own messages name the real cause — a missing `bigquery.jobs.create` on the billing project,
a policy tag on one column, a dataset looked for in the wrong location, a daily custom quota — and each
has its own remedy. A generic "permission denied: use another table" sent the model hunting through
tables when no query at all could run, and "wait a little" had it retry a quota that resets tomorrow.
Also here: the failures of a query's result (too many rows, a type Arrow cannot hold) and what a failed
job billed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from core.bigquery_client import NoAnswer
from core.bigquery_cost import format_bytes


def _network_reason(exc: BaseException) -> str:
    """The innermost reason of a transport failure, in a few words ("Connection refused")."""
    text = str(exc)
    if re.search(r"(?i)read timed out|timed out", text) and "Errno" not in text:  # urllib3's pool text
        return "it did not answer in time"
    found = re.findall(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    return (found[-1] if found else text[:160]).strip().rstrip(".")


JOBS_CREATE = re.compile(r"bigquery\.jobs\.create permission in project ([\w.:-]+?)\.?(?:\s|$)", re.I)
POLICY_TAG = re.compile(r"policy tags? .*? on columns? (.+?)\.?\s*$", re.I | re.S)
WRONG_LOCATION = re.compile(r"was not found in location ([\w-]+)", re.I)
DAILY_QUOTA = re.compile(r"(?i)custom quota|per ?day|daily")
ROLES_HINT = (
    "roles/bigquery.jobUser on the billing project and roles/bigquery.dataViewer on the datasets "
    "(docs/BIGQUERY.md)"
)


def describe_error(exc: BaseException, *, timeout_s: float | None = None, for_admin: bool = False) -> str:
    """A BigQuery failure in plain, actionable words (never a traceback): for the model, or with
    `for_admin` for the person who runs the bot (no advice to call a tool)."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, NoAnswer):
        return f"BigQuery did not answer within {exc.seconds:g} s. Try again shortly."
    if isinstance(exc, gexc.RetryError):  # every try failed to reach it, for as long as `bounded` let it
        cause = exc.cause if exc.cause is not None else exc
        if isinstance(cause, gexc.GoogleAPICallError):
            return describe_error(cause, timeout_s=timeout_s, for_admin=for_admin)
        limit = f" within {timeout_s:g} s" if timeout_s else ""
        return f"Could not reach BigQuery{limit}: {_network_reason(cause)}. Try again shortly."
    if isinstance(exc, TimeoutError | gexc.DeadlineExceeded) or type(exc).__name__ == "TimeoutError":
        limit = f" within {timeout_s:g} s" if timeout_s else ""
        return (
            f"The query did not finish{limit} and was cancelled. Narrow it (fewer columns, a partition "
            "filter, pre-aggregation) and try again."
        )
    if isinstance(exc, json.JSONDecodeError):  # a 200 with a proxy's or web server's page
        return (
            "BigQuery's address answered with something that is not a BigQuery reply (a proxy or web page, "
            "perhaps): an admin needs to check DATATHREAD_BIGQUERY_API_URL and the network."
        )
    if not isinstance(exc, gexc.GoogleAPICallError):
        return f"Could not reach BigQuery: {_network_reason(exc)}. Try again shortly."
    first = (exc.errors or [{}])[0] if isinstance(exc.errors, list) else {}
    reason = str(first.get("reason") or getattr(exc, "reason", "") or "")
    detail = str(first.get("message") or exc.message or "").strip()
    said = _service_words(exc.code, reason, detail, for_admin)
    return said or f"BigQuery error ({exc.code} {reason}): {detail}".strip()


def _service_words(code: int | None, reason: str, detail: str, for_admin: bool) -> str | None:
    """BigQuery's answer (HTTP code, reason, message) as a sentence with its remedy; None: no rule."""
    if reason == "bytesBilledLimitExceeded":
        return f"BigQuery stopped the query at its byte limit: {detail} Narrow the query."
    if reason == "resourcesExceeded":
        return (
            f"BigQuery ran out of memory for this query: {detail} Make it need less: fewer GROUP BY keys "
            "or DISTINCT values, no ORDER BY over the whole result (ORDER BY … LIMIT instead), filter and "
            "aggregate before joining."
        )
    if reason == "quotaExceeded" and DAILY_QUOTA.search(detail):
        return (
            f"BigQuery's daily quota for this project is used up: {detail} It resets the next day "
            "(midnight Pacific time); only an admin can raise it. Do not retry today."
        )
    if reason in ("quotaExceeded", "rateLimitExceeded") or code == 429:
        return f"BigQuery quota or rate limit reached: {detail} Wait a little, or make the query cheaper."
    if code == 403 or reason == "accessDenied":
        return _permission_words(detail, for_admin)
    if code == 404:
        wrong = WRONG_LOCATION.search(detail)
        if wrong:
            return (
                f"Not found in BigQuery: {detail} BigQuery looked in location {wrong.group(1)} "
                "(DATATHREAD_BIGQUERY_LOCATION) and the dataset is in another region: an admin must set "
                "DATATHREAD_BIGQUERY_LOCATION to the datasets' location, or leave it unset. Retrying will "
                "not help."
            )
        if for_admin:
            return f"Not found in BigQuery: {detail}"
        return f"Not found in BigQuery: {detail} Check the name with list_tables / describe_table."
    if code == 400:
        return f"BigQuery rejected the query: {detail} Fix the SQL (BigQuery standard SQL) and try again."
    return None


def _permission_words(detail: str, for_admin: bool) -> str:
    """A 403 by its cause: no right to run jobs at all (an admin's fix), one protected column (leave
    it out), or a table the account cannot read (another table, or an admin's grant)."""
    jobs = JOBS_CREATE.search(detail)
    if jobs:
        return (
            f"The bot's service account may not run queries in project {jobs.group(1)}: an admin must "
            f"grant it roles/bigquery.jobUser there. ({detail}) No query can run until then."
        )
    tagged = POLICY_TAG.search(detail)
    if tagged and not for_admin:
        columns = _column_names(tagged.group(1))
        if columns:
            names = ", ".join(columns)
            return (
                f"Permission denied by BigQuery: {detail} Column-level security protects "
                f"{'column' if len(columns) == 1 else 'columns'} {names}: leave "
                f"{'it' if len(columns) == 1 else 'them'} out (e.g. SELECT * EXCEPT({names}))."
            )
    if for_admin:
        return f"Permission denied by BigQuery: {detail} The service account needs {ROLES_HINT}."
    return (
        f"Permission denied by BigQuery: {detail} The bot's account cannot read this; "
        "use another table from list_tables."
    )


def _column_names(listed: str) -> list[str]:
    """`bill.shop.orders.email, bill.shop.orders.phone` → [email, phone] (a nested field's top
    column: EXCEPT takes top-level names only)."""
    names = []
    for item in re.split(r"[,\s]+", listed.strip().rstrip(".")):
        parts = [p for p in item.strip("`\"'").split(".") if p]
        name = parts[3] if len(parts) > 3 else (parts[-1] if parts else "")
        if re.fullmatch(r"\w+", name) and name not in names:
            names.append(name)
    return names


def service_errors() -> tuple[type[BaseException], ...]:
    """What BigQuery, its transport or its credentials raise (a bug of ours stays a bug)."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth

    return (gexc.GoogleAPIError, auth.GoogleAuthError, requests.RequestException, OSError)


MAX_RESULT_ROWS = 5_000_000  # results travel through the bot: aggregate in SQL beyond this


class ResultTooLarge(Exception):
    """The result has more rows than the bot will download (`args`: rows, bytes the job billed)."""

    def __init__(self, rows: int, billed: int = 0):
        super().__init__(rows, billed)
        self.billed = billed

    def __str__(self) -> str:
        return (
            f"The result has {self.args[0]:,} rows, more than the {MAX_RESULT_ROWS:,} rows the bot downloads. "
            "Aggregate or filter in SQL."
        )


class ResultUnsaved(Exception):
    """The query ran (and billed), but its result could not be made a parquet file: a type Arrow cannot
    hold as BigQuery sent it (a BIGNUMERIC of 77 digits, past Arrow's 76). It was "Could not reach
    BigQuery … Try again shortly": the model ran it again, billed again, and the person heard BigQuery
    was down. Arrow's error names no column ("Decimal type with precision 77…"): `columns` does."""

    def __init__(self, billed: int, cause: BaseException, columns: Sequence[str] = ()):
        super().__init__(billed, cause)
        self.billed, self.cause, self.columns = billed, cause, list(columns)

    def __str__(self) -> str:
        reason = (str(self.cause).strip().splitlines() or [type(self.cause).__name__])[0][:200]
        which = f"the column{'s' if len(self.columns) > 1 else ''} {', '.join(self.columns)}"
        return (
            f"BigQuery ran the query ({format_bytes(self.billed)} billed), but its result could not be saved: "
            f"{reason}. Cast {which if self.columns else 'the column of that type'} in SQL (to STRING, or "
            "BIGNUMERIC to NUMERIC or FLOAT64) and run it again."
        )


class ResultUndelivered(Exception):
    """The query ran (and billed), but its result did not download in the time allowed: "BigQuery did
    not answer … Try again" had the model run it again, and bill again, for the same too-big result."""

    def __init__(self, billed: int | None, seconds: float):
        super().__init__(billed, seconds)
        self.billed, self.seconds = billed, seconds

    def __str__(self) -> str:
        billed = f" ({format_bytes(self.billed)} billed)" if self.billed is not None else ""
        return (
            f"BigQuery ran the query{billed}, but its result did not download within {self.seconds:g} s: it "
            "is too big to bring over. Do not run it again as it is: aggregate or filter in SQL so the "
            "result is smaller."
        )


RISKY_TYPES = ("BIGNUMERIC", "BIGDECIMAL", "RANGE")  # may not convert (an INTERVAL is saved as text)


def risky_columns(schema: Sequence[Any], prefix: str = "") -> list[str]:
    """The result's columns (`SchemaField`s) that may not convert: `bn (BIGNUMERIC)`, `st.x (RANGE)`."""
    found = []
    for field in schema or ():
        if field.field_type in RISKY_TYPES:
            found.append(f"{prefix}{field.name} ({field.field_type})")
        found += risky_columns(field.fields, f"{prefix}{field.name}.")
    return found


def is_unsavable(exc: BaseException) -> bool:
    """An error of the result's conversion (Arrow, parquet), not of BigQuery or the network."""
    if isinstance(exc, json.JSONDecodeError):  # a proxy's page instead of a result page
        return False
    return isinstance(exc, ValueError | TypeError | NotImplementedError | ArithmeticError)


def billed_by_failed(exc: BaseException) -> int | None:
    """What a query job that ended in `exc` billed, where that is known: a result too large to download
    ran and billed; a job BigQuery refused billed nothing. Otherwise (no answer, stopped at the time
    limit or by the person, the connection cut) it may have run, and a cancelled job is billed for
    what it processed: None, and its estimate stays counted in the budgets."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, ResultTooLarge):
        return exc.billed
    if isinstance(exc, gexc.GoogleAPICallError) and not is_timeout(exc):
        return 0
    return None


def is_timeout(exc: BaseException) -> bool:
    import concurrent.futures

    from google.api_core import exceptions as gexc

    return isinstance(exc, TimeoutError | concurrent.futures.TimeoutError | gexc.DeadlineExceeded)
