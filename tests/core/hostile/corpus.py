"""The hostile corpus, shared by the modules of tests/core/hostile/: the run's paths and secrets
(`Env`), what "nothing changed" means, the SQL and Python cases with their expected outcomes, and the
two ways each case is run (through the tool path, and straight into the sandbox with the policy
bypassed). The corpus is split over several test modules so that they can run on several workers at
once; each module builds its own sandbox (conftest.py) and ends by checking that nothing outside the
attacker's workspace changed."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from core.sandbox import StepRequest
from core.tools import ToolContext, call_tool
from tests.core.sandbox_backends import holds

ATTACKER, VICTIM = "attacker-session", "victim-session"
BOT_SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-HOSTILEkey0000000000000000",
    "SLACK_BOT_TOKEN": "xoxb-111-222-HOSTILEtokenAAAA",
    "DATATHREAD_TEST_BOT_SECRET": "bot-secret-HOSTILE-42",
}
MARKERS = ("VICTIM-ROW-7f3a", "CANARY-9c1e", "STATE-MARKER-5b2d", "DOTENV-SECRET-88aa", "GCP-KEY-31cd")


@dataclass
class Env:
    home: Path
    ws: Path
    victim: Path
    warehouse: Path
    envfile: Path
    creds: Path
    hostfile: str
    runlock: str  # in /run/lock: world-writable on the host, and outside every hidden directory
    port: int
    ctx: ToolContext
    backend: str = "root"
    before: tuple = ()

    def fill(self, text: str) -> str:
        """Put the run's real paths and ids into a case's text."""
        swaps = {
            "@HOME@": str(self.home),
            "@VICTIM@": str(self.victim),
            "@WS@": str(self.ws),
            "@WAREHOUSE@": str(self.warehouse),
            "@ENVFILE@": str(self.envfile),
            "@CREDS@": str(self.creds),
            "@HOSTFILE@": self.hostfile,
            "@RUNLOCK@": self.runlock,
            "@RUNLOCKNAME@": Path(self.runlock).name,
            "@PORT@": str(self.port),
            "@BOTPID@": str(os.getpid()),
            "@ZYGOTEPID@": str(self.ctx.sandbox._proc.pid),
        }
        for key, value in swaps.items():
            text = text.replace(key, value)
        return text


def _state(env_home: Path, skip: Path) -> dict[str, str]:
    """Path → sha256 of every file under the home except the attacker's own workspace."""
    out = {}
    for root, dirs, files in os.walk(env_home):
        if Path(root) == skip or skip in Path(root).parents:
            dirs[:] = []
            continue
        for name in files:
            full = Path(root) / name
            out[str(full)] = hashlib.sha256(full.read_bytes()).hexdigest() if full.is_file() else "?"
    return out


def _rows(warehouse: Path) -> dict[str, int]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        con.close()


def disk(e: Env) -> tuple:
    """Everything outside the attacker's workspace: home files by hash, warehouse rows and bytes."""
    digest = hashlib.sha256(e.warehouse.read_bytes()).hexdigest()
    return _state(e.home, e.ws), _rows(e.warehouse), digest


@dataclass(frozen=True)
class Case:
    id: str
    tool: str  # run_sql | query_warehouse | run_python
    code: str
    expect: str  # "refused" (policy, before the sandbox) | "error" (sandbox/engine) | "harmless"
    raw: str = "blocked"  # with the policy bypassed: "blocked" (error) | "harmless" | "any"
    # The protection that stops it once it reaches the sandbox (Python: the filesystem unless said);
    # on a back end reporting it OFF the case is not run, the report is checked instead.
    guard: str = ""
    # (expect, raw) where a back end legitimately differs, e.g. Landlock refuses a harmless listing.
    on: tuple[tuple[str, str, str], ...] = ()
    # Seconds the step may run: 1 for a case that only a wall-clock limit can end (nothing to wait for)
    timeout_s: int = 3

    def input(self, env: Env) -> dict:
        return {"sql" if self.tool != "run_python" else "code": env.fill(self.code)}

    def outcomes(self, backend: str) -> tuple[str, str]:
        return next(((e, r) for b, e, r in self.on if b == backend), (self.expect, self.raw))

    def protection(self) -> str:
        return self.guard or ("filesystem" if self.tool == "run_python" else "limits")


S = "run_sql"
W = "query_warehouse"
SQL_CASES = [
    # files outside the workspace
    Case("sql-read-passwd", S, "SELECT * FROM read_csv('/etc/passwd')", "refused"),
    Case("sql-replacement-scan-passwd", S, "SELECT * FROM '/etc/passwd'", "refused"),
    Case("sql-read-text", S, "SELECT * FROM read_text('/etc/hostname')", "refused"),
    Case("sql-read-blob-victim", S, "SELECT * FROM read_blob('../victim-session/victim.csv')", "refused"),
    Case("sql-dotdot-victim", S, "SELECT * FROM '../victim-session/victim.csv'", "refused"),
    Case("sql-abs-victim", S, "SELECT * FROM read_csv('@VICTIM@/victim.csv')", "refused"),
    Case("sql-concat-path", S, "SELECT * FROM read_csv('..' || '/victim-session/victim.csv')", "refused"),
    Case("sql-list-with-outside", S, "SELECT * FROM read_csv(['ok.csv', '/etc/passwd'])", "refused"),
    Case("sql-state-file", S, "SELECT * FROM read_csv('@HOME@/state.sqlite3')", "refused"),
    Case("sql-dotenv", S, "SELECT * FROM read_csv('@ENVFILE@')", "refused"),
    Case("sql-glob-root", S, "SELECT * FROM glob('/*')", "refused"),
    Case("sql-sniff", S, "SELECT * FROM sniff_csv('/etc/passwd')", "refused"),
    Case("sql-quoted-ident-file", S, 'SELECT * FROM "/etc/passwd"', "refused"),
    Case("sql-proc-environ", S, "SELECT * FROM read_text('/proc/@BOTPID@/environ')", "refused"),
    Case("sql-proc-self-environ", S, "SELECT * FROM read_text('/proc/self/environ')", "refused"),
    # environment and settings
    Case("sql-getenv", S, "SELECT getenv('ANTHROPIC_API_KEY')", "refused"),
    Case(
        "sql-current-setting", S, "SELECT current_setting('allowed_directories')", "refused", raw="harmless"
    ),
    Case("sql-duckdb-settings", S, "SELECT * FROM duckdb_settings()", "refused", raw="harmless"),
    Case("sql-set-external", S, "SET enable_external_access=true", "refused"),
    Case("sql-set-dirs", S, "SET allowed_directories=['/']", "refused"),
    Case("sql-reset-lock", S, "RESET lock_configuration", "refused"),
    Case("sql-pragma", S, "PRAGMA enable_profiling", "refused"),
    Case("sql-multi-set", S, "SELECT 1; SET enable_external_access=true", "refused"),
    # extensions, network
    Case("sql-install", S, "INSTALL httpfs", "refused"),
    Case("sql-load", S, "LOAD httpfs", "refused"),
    Case("sql-force-install-url", S, "FORCE INSTALL 'http://127.0.0.1:@PORT@/x.duckdb_extension'", "refused"),
    Case("sql-http-read", S, "SELECT * FROM read_csv('http://127.0.0.1:@PORT@/x.csv')", "refused"),
    Case("sql-https-scan", S, "SELECT * FROM 'https://example.com/x.csv'", "refused"),
    Case("sql-s3-read", S, "SELECT * FROM read_parquet('s3://bucket/x.parquet')", "refused"),
    Case("sql-extensions-list", S, "SELECT * FROM duckdb_extensions()", "refused"),
    Case("sql-create-secret", S, "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')", "refused"),
    # ATTACH / COPY / EXPORT / writes
    Case("sql-attach-state", S, "ATTACH '@HOME@/state.sqlite3' AS s (TYPE sqlite)", "refused"),
    Case("sql-attach-warehouse-rw", S, "ATTACH '@WAREHOUSE@' AS w", "refused"),
    Case("sql-attach-memory", S, "ATTACH ':memory:' AS m", "refused", raw="harmless"),
    Case("sql-copy-out", S, "COPY (SELECT 1) TO '@HOSTFILE@.csv'", "refused"),
    Case("sql-copy-in-workspace", S, "COPY (SELECT 42) TO 'out.csv'", "refused", raw="harmless"),
    Case("sql-export-db", S, "EXPORT DATABASE '@HOSTFILE@'", "refused"),
    Case("sql-create-table", S, "CREATE TABLE t AS SELECT 1", "refused", raw="harmless"),
    Case("sql-query-fn", S, "SELECT * FROM query('ATTACH '':memory:'' AS m')", "refused"),
    Case("sql-call", S, "CALL pragma_version()", "refused", raw="harmless"),
    Case("sql-comment-smuggle", S, "SELECT 1 /* ; */ ; DROP TABLE x", "refused"),
    # the warehouse is read-only
    Case("wh-delete", W, "DELETE FROM flights", "refused"),
    Case("wh-update", W, "UPDATE flights SET dep_delay = 0", "refused"),
    Case("wh-drop", W, "DROP TABLE flights", "refused"),
    Case("wh-select-then-delete", W, "SELECT 1; DELETE FROM airlines", "refused"),
    Case("wh-read-file", W, "SELECT * FROM read_csv('/etc/passwd')", "refused"),
    Case("wh-databases", W, "SELECT * FROM duckdb_databases()", "refused"),
    # resource exhaustion: allowed by policy, stopped by the sandbox
    Case("sql-cpu-burn", S, "SELECT sum(i * i) FROM range(100000000000) t(i)", "error", timeout_s=1),
    Case("sql-memory", S, "SELECT string_agg(repeat('x', 1000), '') FROM range(5000000)", "error"),
    # harmless: what the policy lets through cannot reach out
    Case("sql-workspace-read", S, "SELECT sum(a) AS s FROM 'ok.csv'", "harmless", raw="harmless"),
]

P = "run_python"
PY_CASES = [
    # files and secrets outside the workspace
    Case("py-shadow", P, "print(open('/etc/shadow').read())", "refused"),
    Case("py-bot-environ", P, "print(open('/proc/@BOTPID@/environ').read())", "refused", guard="bot process"),
    Case("py-zygote-environ", P, "print(open('/proc/@ZYGOTEPID@/environ').read())", "refused"),
    Case("py-bot-mem", P, "print(open('/proc/@BOTPID@/mem', 'rb').read(16))", "refused", guard="bot process"),
    Case("py-self-environ", P, "print(open('/proc/self/environ').read())", "refused"),
    Case("py-os-environ", P, "import os\nprint(dict(os.environ))", "refused", raw="harmless"),
    Case("py-state-file", P, "print(open('@HOME@/state.sqlite3', 'rb').read())", "refused"),
    # In a user namespace the step owns the private tmpfs the hidden home's parents live on: the write
    # may land there and vanish with the step (test_zz checks the host's canary).
    Case(
        "py-canary-write",
        P,
        "open('@HOME@/canary.txt', 'w').write('pwned')",
        "refused",
        on=(("userns", "refused", "any"),),
    ),
    Case("py-dotdot-victim", P, "print(open('../victim-session/victim.csv').read())", "refused"),
    Case("py-evasive-path", P, "p = '..' + '/victim-session/victim.csv'\nprint(open(p).read())", "error"),
    Case("py-evasive-abs", P, "p = '/' + '@VICTIM@'[1:] + '/victim.csv'\nprint(open(p).read())", "error"),
    Case(
        "py-list-workspaces",
        P,
        "import os\nprint(os.listdir('..'))",
        "harmless",
        raw="harmless",
        on=(("landlock", "error", "blocked"),),
    ),
    Case(
        "py-list-home",
        P,
        "import os\nprint(os.listdir('@HOME@'))",
        "harmless",
        raw="harmless",
        on=(("landlock", "error", "blocked"),),
    ),
    Case(
        "py-dotenv",
        P,
        "print(open('@ENVFILE@').read())",
        "refused",
        raw="harmless",
        on=(("landlock", "refused", "blocked"),),
    ),
    Case("py-gcp-creds", P, "import json\nprint(json.load(open('@CREDS@')))", "refused"),
    Case(
        "py-root-home",
        P,
        "import os\nprint(os.listdir('/root'))",
        "harmless",
        raw="harmless",
        on=(("landlock", "error", "blocked"),),
    ),
    Case(
        "py-hostfile",
        P,
        "open('@HOSTFILE@', 'w').write('x')",
        "refused",
        raw="harmless",
        on=(("landlock", "refused", "blocked"),),
    ),
    # host services and host directories the step's uid may write (the red team's /run probes)
    Case("py-run-lock-write", P, "open('@RUNLOCK@', 'w').write('x')", "refused"),
    Case(
        "py-run-lock-evasive",
        P,
        "import os\np = os.path.join('/r' + 'un', 'lock', '@RUNLOCKNAME@')\nopen(p, 'w').write('x')",
        "error",
    ),
    Case(
        "py-postgres-socket",
        P,
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/run/postgresql/.s.PGSQL.5432')",
        "refused",
        guard="network",
    ),
    Case(
        "py-postgres-ctypes",
        P,
        "import numpy\nc = numpy.ctypeslib.ctypes\nlibc = c.CDLL(None, use_errno=True)\nfd = libc.socket(1, 1, 0)\n"
        "addr = c.create_string_buffer(b'\\x01\\x00/run/postgresql/.s.PGSQL.5432', 110)\n"
        "assert fd >= 0 and libc.connect(fd, addr, 110) == 0, 'no connection'\nprint('connected')",
        "error",
        guard="network",
    ),
    Case(
        "py-mysql-socket",
        P,
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/run/mysqld/mysqld.sock')",
        "refused",
        guard="network",
    ),
    Case("py-warehouse-write", P, "open('@WAREHOUSE@', 'r+b').write(b'x')", "refused"),
    Case(
        "py-duckdb-warehouse-rw",
        P,
        "import duckdb\nduckdb.connect('@WAREHOUSE@').execute('DELETE FROM flights')",
        "error",
    ),
    # per-channel table allowlists: a Python step cannot read the warehouse around the SQL policy
    Case(
        "py-duckdb-warehouse-read",
        P,
        "import duckdb\nprint(duckdb.connect('@WAREHOUSE@', read_only=True).sql('SELECT 1').fetchall())",
        "error",
    ),
    Case("py-duckdb-install", P, "import duckdb\nduckdb.sql('INSTALL httpfs')", "error"),
    Case("py-hardlink-victim", P, "import os\nos.link('@VICTIM@/victim.csv', 'v.csv')", "error"),
    # network
    Case(
        "py-socket-local",
        P,
        "import socket\nsocket.create_connection(('127.0.0.1', @PORT@), 2)",
        "refused",
        guard="network",
    ),
    Case(
        "py-urllib",
        P,
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:@PORT@/', timeout=2)",
        "refused",
        guard="network",
    ),
    Case(
        "py-dns", P, "import socket\nprint(socket.getaddrinfo('example.com', 80))", "refused", guard="network"
    ),
    Case(
        "py-pandas-url",
        P,
        "import pandas as pd\npd.read_csv('http://127.0.0.1:@PORT@/x.csv')",
        "refused",
        guard="network",
    ),
    # processes, privileges, native code
    Case(
        "py-subprocess",
        P,
        "import subprocess\nprint(subprocess.run(['id'], capture_output=True))",
        "refused",
        raw="harmless",
    ),
    Case("py-os-system", P, "import os\nos.system('id')", "refused", raw="harmless"),
    Case("py-kill-bot", P, "import os\nos.kill(@BOTPID@, 9)", "refused", guard="bot process"),
    Case(
        "py-ctypes-mount",
        P,
        "import ctypes\nprint(ctypes.CDLL(None).mount(b'none', b'/', None, 0, None))",
        "refused",
        raw="harmless",
    ),
    # inside a user namespace the step is already uid 0 there (and nobody on the host): setuid(0) is a no-op
    Case("py-setuid", P, "import os\nos.setuid(0)", "error", on=(("userns", "harmless", "harmless"),)),
    Case("py-dunder-escape", P, "print(().__class__.__base__.__subclasses__())", "refused", raw="harmless"),
    Case("py-dynamic-import", P, "__import__('os').environ", "refused", raw="harmless"),
    # resource exhaustion
    Case("py-fork-bomb", P, "import os\nwhile True:\n    os.fork()", "refused", guard="limits"),
    Case("py-memory-once", P, "x = bytearray(8 * 1024 ** 3)", "error", guard="limits"),
    Case(
        "py-memory-grow",
        P,
        "x = []\nwhile True:\n    x.append(bytearray(50_000_000))",
        "error",
        guard="limits",
    ),
    Case(
        "py-huge-file",
        P,
        "f = open('big.bin', 'wb')\nf.seek(2 ** 40)\nf.write(b'x')\nf.flush()",
        "error",
        guard="limits",
    ),
    Case("py-infinite-loop", P, "while True:\n    pass", "error", guard="limits", timeout_s=1),
    Case("py-many-files", P, "fs = [open(f'f{i}.txt', 'w') for i in range(5000)]", "error", guard="limits"),
    Case(
        "py-tmp-is-private",
        P,
        "open('/tmp/x.txt', 'w').write('x')",
        "refused",
        raw="harmless",
        on=(("landlock", "refused", "blocked"),),
    ),
]


def leaks(text: str) -> list[str]:
    return [s for s in (*MARKERS, *BOT_SECRETS.values()) if s in text]


async def check_through_the_tool_path(env: Env, case: Case) -> None:
    expect, _ = case.outcomes(env.backend)
    if expect != "refused" and not holds(env.ctx.sandbox.protections(), case.protection()):
        return  # this back end reports the protection OFF (checked by `holds`): nothing to stop it
    ctx = (
        replace(env.ctx, step_timeout_s=case.timeout_s)
        if case.timeout_s != env.ctx.step_timeout_s
        else env.ctx
    )
    outcome = await asyncio.wait_for(call_tool(case.tool, case.input(env), ctx), timeout=30)
    assert not leaks(outcome.content), outcome.content
    if expect == "refused":
        assert outcome.is_error and outcome.summary.startswith("refused"), outcome.content
    elif expect == "error":
        assert outcome.is_error and not outcome.summary.startswith("refused"), outcome.content
    else:
        assert not outcome.is_error, outcome.content
    assert "Traceback (most recent call last)" not in outcome.content or "step.py" in outcome.content


async def check_with_the_policy_bypassed(env: Env, case: Case) -> None:
    """The sandbox alone must hold: the same attempt, straight into a step."""
    _, raw = case.outcomes(env.backend)
    if not holds(env.ctx.sandbox.protections(), case.protection()):
        return  # reported OFF on this back end (e.g. `none`): running it would really do it
    kind = "python" if case.tool == P else "sql"
    request = StepRequest(
        kind=kind,
        session_id=ATTACKER,
        code=env.fill(case.code),
        timeout_s=case.timeout_s,
        memory_mb=1024,
        file_mb=64,
    )
    result = await env.ctx.sandbox.run(request)
    text = result.output + result.error + result.preview
    assert not leaks(text), text
    if raw == "blocked":
        assert not result.ok, text
    elif raw == "harmless":
        assert result.ok, text


def check_nothing_changed_outside_the_workspace(env: Env) -> None:
    """The module's cases left the home, canary, victim and warehouse intact (run last in each module)."""
    assert len(env.before[0]) >= 4 and sum(env.before[1].values()) > 300_000
    now = disk(env)
    changed = {k for k in now[0].keys() | env.before[0].keys() if now[0].get(k) != env.before[0].get(k)}
    assert not changed and now[1:] == env.before[1:]
    assert (env.home / "canary.txt").read_text() == "CANARY-9c1e"
    assert (env.victim / "victim.csv").read_bytes() == b"secret\nVICTIM-ROW-7f3a\n"
    assert not os.path.exists(env.hostfile) and not os.path.exists(env.hostfile + ".csv")
    assert not os.path.exists(env.runlock)
    assert not os.path.exists("/tmp/x.txt") or os.stat("/tmp/x.txt").st_uid == 0
