"""A scripted fake of the BigQuery REST API (v2) for `responses`, below the real google-cloud-bigquery client.

Tests register tables (metadata + rows) and scripted query answers (`on_query(substring, ...)`); the
fake serves jobs.insert (dry runs and real runs), jobs.get, jobs.getQueryResults (paged with pageToken),
jobs.cancel, datasets.list, datasets.get, tables.list, tables.get and tabledata.list, and records every
request. As the service does: lists come in pages (`nextPageToken`), tables.list of a dataset that does
not exist is a 404, dataset and table names match exactly (case-sensitive: `Analytics` is not
`analytics`), a cancelled job ends DONE with errorResult `stopped`, and a job that failed while
running is DONE with its errorResult (getQueryResults then answers the error). `latency` makes every
call take that long (a round trip from outside Google Cloud is 0.1-0.3 s).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlparse

import requests
import responses

API = "http://bq.test"  # where the tests point bigquery_api_url (no real host is ever resolved)
TOKEN_URI = "https://oauth2.googleapis.com/token"


@dataclass
class FakeTable:
    project: str
    dataset: str
    table: str
    schema: list[dict]  # [{"name", "type", "mode"?, "description"?}]
    rows: list[list] = field(default_factory=list)
    description: str = ""
    table_type: str = "TABLE"
    extra: dict = field(default_factory=dict)  # timePartitioning, clustering, ...

    def resource(self) -> dict:
        ref = {"projectId": self.project, "datasetId": self.dataset, "tableId": self.table}
        body = {
            "kind": "bigquery#table",
            "id": f"{self.project}:{self.dataset}.{self.table}",
            "tableReference": ref,
            "type": self.table_type,
            "schema": {"fields": self.schema},
            **(
                {}
                if self.table_type == "VIEW"
                else {"numRows": str(len(self.rows)), "numBytes": str(1000 * len(self.rows))}
            ),
            **self.extra,
        }
        if self.description:
            body["description"] = self.description
        return body


@dataclass
class Answer:
    """What the fake says for a query: a dry-run estimate and (when run) a result or an error."""

    schema: list[dict] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)
    bytes_processed: int = 1_000_000
    bytes_billed: int | None = None
    statement_type: str = "SELECT"
    referenced: list[str] = field(default_factory=list)  # "p.d.t"
    run_referenced: list[str] | None = None  # the real run's, when not `referenced` (a view redefined)
    cache_hit: bool = False
    error: tuple[int, str, str] | None = None  # (status, reason, message) on insert
    run_error: tuple[int, str, str] | None = None  # same, but only for the real run (after the dry run)
    run_unreachable: bool = False  # the real run's insert meets a refused connection (the network went)
    pending: bool = False  # the job never finishes (timeouts)
    # The real run's insert is taken and held (as a connection that never answers) until `released`,
    # then the connection drops: a test releases it before it ends, so no thread of the bot's outlives
    # it (one that woke later sent its next call into the next test's fake).
    held: threading.Event | None = None
    page_size: int = 1000
    failed: tuple[str, str] | None = None  # (reason, message): the real run ends DONE with this error


# The HTTP status getQueryResults answers for a job that ended with this errorResult reason
FAILED_STATUS = {"resourcesExceeded": 400, "stopped": 400, "accessDenied": 403, "quotaExceeded": 403}


def _cell(value) -> dict:
    if value is None:
        return {"v": None}
    if isinstance(value, bool):
        return {"v": "true" if value else "false"}
    return {"v": str(value)}


def _rows(rows: list[list]) -> list[dict]:
    return [{"f": [_cell(v) for v in row]} for row in rows]


class FakeBigQuery:
    """Register with a `responses.RequestsMock`; `base` is the api_endpoint the client is given."""

    def __init__(self, base: str = "http://bq.test"):
        self.base = base.rstrip("/")
        self.tables: dict[str, FakeTable] = {}
        self.answers: list[tuple[str, Answer]] = []
        self.jobs: dict[str, dict] = {}
        self.job_answers: dict[str, Answer] = {}
        self.inserts: list[dict] = []  # bodies of jobs.insert
        self.calls: list[tuple[str, str, dict]] = []  # (method, path, query parameters)
        self.headers: list[dict] = []
        self.bugs: list[Exception] = []
        self.cancelled: list[str] = []
        self.latency = 0.0  # seconds every call takes
        self.page = 1000  # tables.list's page size when the client gives no maxResults
        self.dataset_page = 50  # datasets.list's
        self.table_errors: dict[str, tuple[int, str, str]] = {}  # "p.d.t" → tables.get's error
        self.list_errors: dict[str, tuple[int, str, str]] = {}  # "p.d" → tables.list's error
        self.dataset_errors: dict[str, tuple[int, str, str]] = {}  # "p.d" → datasets.get's error
        self.gone_datasets: set[str] = set()  # "p.d": listed by datasets.list no more, 404 elsewhere

    # --- scripting ----------------------------------------------------------------------------
    def add_table(self, table: FakeTable) -> FakeTable:
        self.tables[f"{table.project}.{table.dataset}.{table.table}"] = table
        return table

    def on_query(self, contains: str, answer: Answer) -> Answer:
        self.answers.append((contains, answer))
        return answer

    def runs(self) -> list[dict]:
        """jobs.insert bodies that were real runs (not dry runs)."""
        return [b for b in self.inserts if not b.get("configuration", {}).get("dryRun")]

    # --- wiring -------------------------------------------------------------------------------
    def register(self, mock: responses.RequestsMock) -> None:
        api = re.escape(self.base) + r"/bigquery/v2/projects/([^/]+)"
        routes = [
            ("POST", api + r"/jobs", self._insert),
            ("POST", api + r"/jobs/([^/?]+)/cancel", self._cancel),
            ("GET", api + r"/jobs/([^/?]+)", self._get_job),
            ("GET", api + r"/queries/([^/?]+)", self._results),
            ("GET", api + r"/datasets/([^/?]+)/tables/([^/?]+)/data", self._tabledata),
            ("GET", api + r"/datasets/([^/?]+)/tables/([^/?]+)", self._get_table),
            ("GET", api + r"/datasets/([^/?]+)/tables", self._list_tables),
            ("GET", api + r"/datasets/([^/?]+)", self._get_dataset),
            ("GET", api + r"/datasets", self._list_datasets),
        ]
        for method, pattern, handler in routes:
            mock.add_callback(
                method, re.compile(pattern + r"(\?.*)?$"), callback=self._wrap(pattern, handler)
            )

    def _wrap(self, pattern: str, handler):
        regex = re.compile(pattern + "$")

        def callback(request):
            if self.latency:
                time.sleep(self.latency)
            url = urlparse(request.url)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            self.calls.append((request.method, url.path, query))
            self.headers.append(dict(request.headers))
            groups = regex.match(f"{self.base}{url.path}").groups()
            body = json.loads(request.body) if request.body else {}
            try:
                status, payload = handler(*groups, query=query, body=body)
            except requests.ConnectionError:  # scripted: the network, not a bug of the fake
                raise
            except Exception as exc:  # a bug in the fake: fail loudly, not as a retried 5xx
                self.bugs.append(exc)
                raise
            return status, {"content-type": "application/json"}, json.dumps(payload)

        return callback

    # --- handlers -----------------------------------------------------------------------------
    def _answer(self, sql: str) -> Answer:
        for contains, answer in self.answers:
            if contains in sql:
                return answer
        return Answer(error=(400, "invalidQuery", f"Syntax error: Unexpected query (fake): {sql[:60]}"))

    @staticmethod
    def _error(status: int, reason: str, message: str) -> tuple[int, dict]:
        err = {"code": status, "message": message, "errors": [{"reason": reason, "message": message}]}
        return status, {"error": err}

    def _insert(self, project, _q=None, *, query, body):
        self.inserts.append(body)
        config = body.get("configuration", {})
        answer = self._answer(config.get("query", {}).get("query", ""))
        if answer.error:
            return self._error(*answer.error)
        if answer.run_error and not config.get("dryRun"):
            return self._error(*answer.run_error)
        if answer.held is not None and not config.get("dryRun"):
            answer.held.wait(30)  # in the caller's thread
            raise requests.ConnectionError("scripted: the held connection dropped")
        if answer.run_unreachable and not config.get("dryRun"):
            raise requests.ConnectionError(
                "Failed to establish a new connection: [Errno 111] Connection refused"
            )
        ref = {"projectId": project, "jobId": body["jobReference"]["jobId"], "location": "US"}
        stats_q = {
            "totalBytesProcessed": str(answer.bytes_processed),
            "statementType": answer.statement_type,
            "referencedTables": [
                dict(zip(("projectId", "datasetId", "tableId"), r.split("."), strict=True))
                for r in (
                    answer.run_referenced
                    if answer.run_referenced is not None and not config.get("dryRun")
                    else answer.referenced
                )
            ],
        }
        if not config.get("dryRun"):
            billed = answer.bytes_billed if answer.bytes_billed is not None else answer.bytes_processed
            stats_q |= {"totalBytesBilled": str(billed), "cacheHit": answer.cache_hit}
            config = config | {
                "query": config["query"]
                | {
                    "destinationTable": {
                        "projectId": project,
                        "datasetId": "_anon",
                        "tableId": "anon_" + ref["jobId"][:8],
                    }
                }
            }
        job = {
            "kind": "bigquery#job",
            "id": f"{project}:US.{ref['jobId']}",
            "jobReference": ref,
            "configuration": config,
            "status": {"state": "RUNNING" if answer.pending and not config.get("dryRun") else "DONE"},
            "statistics": {"totalBytesProcessed": str(answer.bytes_processed), "query": stats_q},
        }
        if answer.failed and not config.get("dryRun"):
            self._end(job, *answer.failed)
        self.jobs[ref["jobId"]] = job
        self.job_answers[ref["jobId"]] = answer
        return 200, job

    def _get_job(self, project, job_id, _q=None, *, query, body):
        job = self.jobs.get(job_id)
        return (200, job) if job else self._error(404, "notFound", f"Not found: Job {project}:{job_id}")

    @staticmethod
    def _end(job: dict, reason: str, message: str) -> None:
        error = {"reason": reason, "message": message}
        job["status"] = {"state": "DONE", "errorResult": error, "errors": [error]}

    def _cancel(self, project, job_id, _q=None, *, query, body):
        self.cancelled.append(job_id)
        job = self.jobs.get(job_id)
        if job and job["status"]["state"] != "DONE":  # as BigQuery: the job ends, stopped
            self._end(job, "stopped", "Job execution was cancelled: User requested cancellation")
        return 200, {"kind": "bigquery#jobCancelResponse", "job": job or {}}

    def _results(self, project, job_id, _q=None, *, query, body):
        answer = self.job_answers[job_id]
        failed = self.jobs[job_id]["status"].get("errorResult")
        if failed:
            return self._error(FAILED_STATUS.get(failed["reason"], 400), failed["reason"], failed["message"])
        if answer.pending:
            return 200, {"jobReference": self.jobs[job_id]["jobReference"], "jobComplete": False}
        start = int(query.get("pageToken") or query.get("startIndex") or 0)
        size = min(int(query.get("maxResults", answer.page_size)), answer.page_size)
        page = answer.rows[start : start + size]
        out = {
            "kind": "bigquery#getQueryResultsResponse",
            "jobReference": self.jobs[job_id]["jobReference"],
            "jobComplete": True,
            "schema": {"fields": answer.schema},
            "totalRows": str(len(answer.rows)),
            "totalBytesProcessed": str(answer.bytes_processed),
            "cacheHit": answer.cache_hit,
        }
        if page:  # like the real API: no "rows" key for an empty page (maxResults=0 while waiting)
            out["rows"] = _rows(page)
        if size and start + size < len(answer.rows):
            out["pageToken"] = str(start + size)
        return 200, out

    def _table(self, project, dataset, table) -> FakeTable | None:
        return self.tables.get(f"{project}.{dataset}.{table}")

    def _get_table(self, project, dataset, table, _q=None, *, query, body):
        if f"{project}.{dataset}.{table}" in self.table_errors:
            return self._error(*self.table_errors[f"{project}.{dataset}.{table}"])
        t = self._table(project, dataset, table)
        if t is None:
            return self._error(404, "notFound", f"Not found: Table {project}:{dataset}.{table}")
        return 200, t.resource()

    def _tabledata(self, project, dataset, table, _q=None, *, query, body):
        t = self._table(project, dataset, table)
        if t is None:
            return self._error(404, "notFound", f"Not found: Table {project}:{dataset}.{table}")
        n = int(query.get("maxResults", len(t.rows)))
        return 200, {
            "kind": "bigquery#tableDataList",
            "totalRows": str(len(t.rows)),
            "rows": _rows(t.rows[:n]),
        }

    def _dataset_exists(self, project: str, dataset: str) -> bool:
        return f"{project}.{dataset}" not in self.gone_datasets and any(
            (t.project, t.dataset) == (project, dataset) for t in self.tables.values()
        )

    def _get_dataset(self, project, dataset, _q=None, *, query, body):
        if f"{project}.{dataset}" in self.dataset_errors:
            return self._error(*self.dataset_errors[f"{project}.{dataset}"])
        if not self._dataset_exists(project, dataset):
            return self._error(404, "notFound", f"Not found: Dataset {project}:{dataset}")
        ref = {"projectId": project, "datasetId": dataset}
        return 200, {"kind": "bigquery#dataset", "id": f"{project}:{dataset}", "datasetReference": ref}

    @staticmethod
    def _page(items: list, query: dict, size: int) -> tuple[list, dict]:
        """One page of `items` by maxResults and pageToken (an offset here; opaque to the client)."""
        size = int(query.get("maxResults") or size)
        start = int(query.get("pageToken") or 0)
        more = {"nextPageToken": str(start + size)} if start + size < len(items) else {}
        return items[start : start + size], more

    def _list_tables(self, project, dataset, _q=None, *, query, body):
        if f"{project}.{dataset}" in self.list_errors:
            return self._error(*self.list_errors[f"{project}.{dataset}"])
        if not self._dataset_exists(project, dataset):
            return self._error(404, "notFound", f"Not found: Dataset {project}:{dataset}")
        items = sorted(
            (t for t in self.tables.values() if (t.project, t.dataset) == (project, dataset)),
            key=lambda t: t.table,
        )
        listed = [
            {"kind": "bigquery#table", "id": f"{t.project}:{t.dataset}.{t.table}", "type": t.table_type}
            | {"tableReference": t.resource()["tableReference"]}
            for t in items
        ]
        page, more = self._page(listed, query, self.page)
        return 200, {"kind": "bigquery#tableList", "tables": page, "totalItems": len(listed)} | more

    def _list_datasets(self, project, _q=None, *, query, body):
        names = sorted({t.dataset for t in self.tables.values() if t.project == project})
        items = [
            {
                "kind": "bigquery#dataset",
                "id": f"{project}:{d}",
                "datasetReference": {"projectId": project, "datasetId": d},
            }
            for d in names
            if f"{project}.{d}" not in self.gone_datasets
        ]
        page, more = self._page(items, query, self.dataset_page)
        return 200, {"kind": "bigquery#datasetList", "datasets": page} | more


def service_account_key(path, token_uri: str):
    """A well-formed service-account key file (a fresh RSA key) whose token endpoint is `token_uri`."""
    import json as _json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path.write_text(
        _json.dumps(
            {
                "type": "service_account",
                "project_id": "bill",
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": "datathread@bill.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return path


def qctx(store, **kw):
    """A warehouse step's QueryContext for a Slack thread (session s1), with `kw` changed."""
    from core.warehouse import QueryContext

    base = dict(
        session_id="s1",
        surface="slack",
        channel_id="C1",
        user_id="U123",
        turn_id="turn1",
        store=store,
        timeout_s=10,
    )
    return QueryContext(**(base | kw))
