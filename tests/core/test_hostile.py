"""The hostile corpus: SQL and Python a steered model might send, run through the real tool path.

Every case goes through `core.tools.call_tool` with a `ToolContext` built as `core/analyst.py` builds
it, against one real fork-server sandbox and the real DuckDB demo warehouse. Each case states what
must happen — refused by policy (before the sandbox), an error from the sandbox, or harmless — and
every case is ALSO run straight into the sandbox with the policy bypassed, because the policy is
early feedback, not the boundary. After the corpus nothing outside the attacker's workspace may have
changed: the bot's home, a canary, another session's workspace, the warehouse (bytes and rows) and
the host's /tmp.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import pytest
import pytest_asyncio

from core.sandbox import StepRequest
from core.sandbox_local import read_inside
from core.tools import ToolContext, call_tool
from core.warehouse import QueryContext
from tests.core.sandbox_backends import BACKENDS, EXPECTED, holds, sandbox_options

pytestmark = pytest.mark.asyncio(loop_scope="module")

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


@pytest.fixture(scope="module")
def bot_secrets():
    """The bot's own environment holds secrets the sandbox must not see — for this module only."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in BOT_SECRETS.items():
            patch.setenv(key, value)
        yield


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def env(request, tmp_path_factory, bot_secrets):
    from core.config import load_settings
    from core.sandbox_factory import build_sandbox_and_warehouse
    from core.sessions import open_store
    from core.warehouse import build_demo_database
    from tests.conftest import DEMO_DB_CACHE

    base = tmp_path_factory.mktemp("hostile")
    home = base / "home"
    (home / "warehouse").mkdir(parents=True)
    warehouse = home / "warehouse" / "nycflights13.duckdb"
    warehouse.write_bytes(build_demo_database(DEMO_DB_CACHE / "nycflights13.duckdb").read_bytes())
    (home / "canary.txt").write_text("CANARY-9c1e")
    # Secret files outside every hidden directory (next to the code, as a real .env is): masked.
    secrets_dir = DEMO_DB_CACHE / f"hostile-{uuid.uuid4().hex[:8]}"
    secrets_dir.mkdir(parents=True)
    envfile, creds = secrets_dir / ".env", secrets_dir / "gcp.json"
    envfile.write_text("ANTHROPIC_API_KEY=DOTENV-SECRET-88aa\n")
    creds.write_text('{"private_key": "GCP-KEY-31cd"}')
    cwd = os.getcwd()
    os.chdir(secrets_dir)  # `.env` is resolved against the bot's working directory, as in production
    try:
        settings = load_settings(
            _env_file=None,
            anthropic_api_key=BOT_SECRETS["ANTHROPIC_API_KEY"],
            slack_bot_token=BOT_SECRETS["SLACK_BOT_TOKEN"],
            google_application_credentials=creds,
            home=home,
            step_timeout=3,
            isolation=sandbox_options(request.param)["isolation_policy"],
        )
        try:
            sandbox, warehouse_part = await build_sandbox_and_warehouse(settings)
        except RuntimeError as exc:  # this kernel does not offer the back end: one sentence
            pytest.skip(str(exc))
        if request.param == "refused":  # the same sandbox on a host that refuses namespaces
            await sandbox.close()
            sandbox.refuse_namespaces = True
            await sandbox.start()
    finally:
        os.chdir(cwd)
    assert sandbox.backend == EXPECTED[request.param]
    store = await open_store(settings)
    await store.save_history("s0", [{"role": "user", "content": "STATE-MARKER-5b2d"}])
    await store.close()
    del store
    gc.collect()  # SqliteStore.__init__ leaves a connection to the GC; its close checkpoints the WAL
    victim = sandbox.workspace(VICTIM)
    await sandbox.write_file(VICTIM, "victim.csv", b"secret\nVICTIM-ROW-7f3a\n")
    ws = sandbox.workspace(ATTACKER)
    await sandbox.write_file(ATTACKER, "ok.csv", b"a,b\n1,2\n3,4\n")
    listener = socket.create_server(("127.0.0.1", 0))  # a service the bot can reach and steps must not
    query = QueryContext(session_id=ATTACKER, surface="slack", channel_id="C1", user_id="U1", timeout_s=3)
    ctx = ToolContext(
        session_id=ATTACKER,
        turn_id="t-hostile",
        sandbox=sandbox,
        warehouse=warehouse_part,
        query=query,
        step_timeout_s=3,
        step_memory_mb=1024,
    )
    e = Env(
        home=home.resolve(),
        ws=ws,
        victim=victim,
        warehouse=warehouse.resolve(),
        envfile=envfile.resolve(),
        creds=creds.resolve(),
        hostfile=f"/tmp/datathread-hostile-{uuid.uuid4().hex[:8]}",
        runlock=f"/run/lock/datathread-hostile-{uuid.uuid4().hex[:8]}",
        port=listener.getsockname()[1],
        ctx=ctx,
        backend=sandbox.backend,
    )
    e.before = _disk(e)
    yield e
    listener.close()
    await sandbox.close()
    shutil.rmtree(secrets_dir, ignore_errors=True)


def _disk(e: Env) -> tuple:
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
    Case("sql-cpu-burn", S, "SELECT sum(i * i) FROM range(100000000000) t(i)", "error"),
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
    Case("py-infinite-loop", P, "while True:\n    pass", "error", guard="limits"),
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


def _leaks(text: str) -> list[str]:
    return [s for s in (*MARKERS, *BOT_SECRETS.values()) if s in text]


@pytest.mark.parametrize("case", SQL_CASES + PY_CASES, ids=lambda c: c.id)
async def test_hostile_case_through_the_tool_path(env: Env, case: Case):
    expect, _ = case.outcomes(env.backend)
    if expect != "refused" and not holds(env.ctx.sandbox.protections(), case.protection()):
        return  # this back end reports the protection OFF (checked by `holds`): nothing to stop it
    outcome = await asyncio.wait_for(call_tool(case.tool, case.input(env), env.ctx), timeout=30)
    assert not _leaks(outcome.content), outcome.content
    if expect == "refused":
        assert outcome.is_error and outcome.summary.startswith("refused"), outcome.content
    elif expect == "error":
        assert outcome.is_error and not outcome.summary.startswith("refused"), outcome.content
    else:
        assert not outcome.is_error, outcome.content
    assert "Traceback (most recent call last)" not in outcome.content or "step.py" in outcome.content


@pytest.mark.parametrize("case", [c for c in SQL_CASES + PY_CASES if c.tool != W], ids=lambda c: c.id)
async def test_hostile_case_with_the_policy_bypassed(env: Env, case: Case):
    """The sandbox alone must hold: the same attempt, straight into a step."""
    _, raw = case.outcomes(env.backend)
    if not holds(env.ctx.sandbox.protections(), case.protection()):
        return  # reported OFF on this back end (e.g. `none`): running it would really do it
    kind = "python" if case.tool == P else "sql"
    request = StepRequest(
        kind=kind, session_id=ATTACKER, code=env.fill(case.code), timeout_s=3, memory_mb=1024, file_mb=64
    )
    result = await env.ctx.sandbox.run(request)
    text = result.output + result.error + result.preview
    assert not _leaks(text), text
    if raw == "blocked":
        assert not result.ok, text
    elif raw == "harmless":
        assert result.ok, text


@pytest.mark.parametrize(
    "raw",
    [
        "import os\nos.symlink('@VICTIM@/victim.csv', 'leak.csv')",
        "import os\nos.symlink('@HOME@/state.sqlite3', 'leak.csv')",
        "import os\nos.symlink('@VICTIM@', 'leakdir')",
        "import os\nos.symlink('/etc/passwd', 'leak.csv')",
    ],
    ids=["victim-file", "state-file", "victim-dir", "passwd"],
)
async def test_symlinks_planted_in_the_workspace_are_not_followed_by_the_bot(env: Env, raw: str):
    if not holds(env.ctx.sandbox.protections(), "filesystem"):
        return  # the bot-side checks hold everywhere, but DuckDB in the step would follow the link
    for name in ("leak.csv", "leakdir"):
        (env.ws / name).unlink(missing_ok=True)
    made = await call_tool("run_python", {"code": env.fill(raw)}, env.ctx)
    assert not made.is_error, made.content  # making a link is allowed; following it out is not
    for path in ("leak.csv", "leakdir/victim.csv"):
        attached = await call_tool("attach_file", {"path": path}, env.ctx)
        assert attached.is_error and attached.artifact is None, attached.content
        with pytest.raises((PermissionError, OSError)):
            await env.ctx.sandbox.read_file(ATTACKER, path)
    if (env.ws / "leak.csv").is_symlink():  # even a path that passed the check is opened link-safe
        with pytest.raises(OSError):
            read_inside(env.ws, env.ws / "leak.csv")
    # DuckDB follows the link inside the step, but the step's filesystem has no victim or state in it
    scanned = await call_tool("run_sql", {"sql": "SELECT * FROM read_text('leak.csv')"}, env.ctx)
    assert not _leaks(scanned.content), scanned.content


async def test_background_process_does_not_outlive_its_step(env: Env):
    if not holds(env.ctx.sandbox.protections(), "leftover processes"):
        return
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(1.5)\n"
        "    open('late.txt', 'w').write('still here')\n"
        "    os._exit(0)\n"
        "print('parent done')"
    )
    first = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=daemon))
    assert first.ok and "parent done" in first.output
    await asyncio.sleep(2.5)
    assert not (env.ws / "late.txt").exists()


async def test_no_bot_secret_in_the_step_environment(env: Env):
    code = "import os\nfor k, v in sorted(os.environ.items()):\n    print(f'{k}={v}')"
    result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
    assert result.ok and "PATH=" in result.output
    assert not _leaks(result.output)
    names = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert not names & set(BOT_SECRETS)
    # the fork server's real environment block (read by the bot, which may) holds none either
    block = Path(f"/proc/{env.ctx.sandbox._proc.pid}/environ").read_bytes().decode()
    assert "PATH=" in block and not _leaks(block)
    # and the step cannot read its own /proc files at all (non-dumpable)
    own = await env.ctx.sandbox.run(
        StepRequest(kind="python", session_id=ATTACKER, code="open('/proc/self/environ').read()")
    )
    assert not own.ok and "Permission denied" in own.error


# A step that tries to forge its own result: the red team's `os.write(4, …)` on every descriptor it
# holds, with fields built to flood whatever handles them next. The runner holds no socket to the bot,
# only its own result pipe; what arrives there is validated and clipped like anything from a step.
_FLOOD = (
    "line = json.dumps({'ok': True, 'output': 'A' * 100_000, 'preview': 'P' * 100_000, 'error': 'E' * 100_000,"
    " 'columns': [{'name': 'N' * 100_000, 'type': 'T' * 1_000}] * 500,"
    " 'files': [{'path': '/etc/passwd', 'size': 1}, {'path': '../x', 'size': 1}]"
    " + [{'path': f'f{i}', 'size': i, 'kind': 'K' * 100} for i in range(5_000)],"
    " 'rows': 10 ** 30, 'saved_as': '../../etc/passwd', 'duration_s': 'soon', 'killed': 'yes'}).encode() + b'\\n'\n"
)
FORGERIES = {
    "every-fd": f"import os, json\n{_FLOOD}for fd in range(1024):\n    try:\n        os.write(fd, line)\n"
    "    except OSError:\n        pass\nos._exit(0)",
    "every-fd-then-print": f"import os, json\n{_FLOOD}for fd in range(3, 1024):\n    try:\n"
    "        os.write(fd, line * 3)\n    except OSError:\n        pass\nprint('B' * 100_000)",
    "oversized": "import os\nchunk = b'{' * 65_536\nfor fd in range(3, 64):\n    try:\n"
    "        for _ in range(160):\n            os.write(fd, chunk)\n    except OSError:\n        pass\nos._exit(0)",
    "garbage": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"ok\": tru')\n"
    "    except OSError:\n        pass\nos._exit(0)",
    "not-an-object": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'[1, 2, 3]\\n')\n"
    "    except OSError:\n        pass\nos._exit(0)",
}


def _assert_bounded(result, request: StepRequest) -> None:
    assert len(result.output.encode()) <= request.output_bytes
    assert len(result.preview.encode()) <= request.preview_bytes
    assert len(result.error.encode()) <= 4_000 + 400  # the step's clip, and the bot's quota sentence
    assert len(result.columns) <= 200 and all(len(c["name"]) <= 120 for c in result.columns)
    assert len(result.files) <= 200
    assert all(not f["path"].startswith("/") and ".." not in f["path"] for f in result.files)
    assert result.saved_as is None and (result.rows is None or result.rows <= 2**62)
    assert len(json.dumps(result.to_dict())) < 150_000


@pytest.mark.parametrize("forgery", FORGERIES, ids=list(FORGERIES))
async def test_a_step_cannot_forge_or_flood_its_result(env: Env, forgery: str):
    code = FORGERIES[forgery]
    request = StepRequest(kind="python", session_id=ATTACKER, code=code, timeout_s=3, memory_mb=1024)
    result = await env.ctx.sandbox.run(request)
    _assert_bounded(result, request)
    if forgery in ("oversized", "garbage", "not-an-object"):
        assert not result.ok and result.error and "A" * 100 not in result.error
    outcome = await asyncio.wait_for(call_tool("run_python", {"code": code}, env.ctx), timeout=30)
    assert len(outcome.content) < 60_000 and "A" * 20_001 not in outcome.content


async def test_the_process_running_model_code_holds_no_socket(env: Env):
    code = (
        "import os, stat\nsocks, pipes = [], []\nfor fd in range(1024):\n    try:\n        mode = os.fstat(fd).st_mode\n"
        "    except OSError:\n        continue\n    (socks if stat.S_ISSOCK(mode) else pipes if stat.S_ISFIFO(mode) else []).append(fd)\n"
        "print('sockets', socks, 'pipes', len(pipes))"
    )
    result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
    assert result.ok and "sockets [] pipes 1" in result.output, result.output + result.error


async def test_a_flooded_result_does_not_stall_the_event_loop(env: Env):
    """Everything the bot does with a flooded result (parse, clip, describe, redact) stays off the
    loop or bounded: a 10 ms ticker never waits 100 ms (what /healthz would show)."""
    lags: list[float] = []

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - before - 0.01)

    ticking = asyncio.create_task(ticker())
    try:
        marker = "-----BEGIN PRIVATE KEY-----"
        flood = f"import os, json\nline = json.dumps({{'ok': True, 'output': '{marker}' * 4000, 'columns': [{{'name': '{marker}' * 400, 'type': 't'}}] * 200}}).encode()\n"
        flood += "for fd in range(3, 1024):\n    try:\n        os.write(fd, line)\n    except OSError:\n        pass\nos._exit(0)"
        for _ in range(3):
            await call_tool("run_python", {"code": flood}, env.ctx)
    finally:
        ticking.cancel()
    assert lags and max(lags) < 0.1, max(lags)


# SysV IPC and the host's name. Segments and queues live in an IPC namespace, not in any process: the
# red team's 64 MB segment outlived the step, the turn and the bot, and session B read session A's
# message. Seccomp refuses SysV IPC on every Linux back end; root and userns steps also get their own
# IPC and UTS namespaces, so even a call that got through would be private and gone with the step.
_LIBC = "import numpy\nc = numpy.ctypeslib.ctypes\nlibc = c.CDLL(None, use_errno=True)\n"
IPC_SEND = {
    "shm-64mb": _LIBC
    + "i = libc.shmget(@KEY@, 64 * 2 ** 20, 0o1666)\nprint('made', i, libc.shmat(i, None, 0))",
    "msg-queue": _LIBC
    + (
        "q = libc.msgget(@KEY@, 0o1666)\nbuf = c.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00A-SECRET', 16)\n"
        "print('made', q, libc.msgsnd(q, buf, 8, 0o4000))"
    ),
    "sem": _LIBC + "print('made', libc.semget(@KEY@, 4, 0o1666))",
}
IPC_RECEIVE = _LIBC + (
    "buf = c.create_string_buffer(64)\nq = libc.msgget(@KEY@, 0)\n"
    "print('got', q, libc.msgrcv(q, buf, 48, 0, 0o4000), buf.raw[8:16])"
)


def _host_ipc_keys() -> set[int]:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
                keys.add(int(line.split()[0]))
    return keys


@pytest.mark.parametrize("path", ["tool", "raw"])
@pytest.mark.parametrize("what", IPC_SEND, ids=list(IPC_SEND))
async def test_sysv_ipc_is_refused_or_private_and_gone(env: Env, what: str, path: str):
    key = 0x5EED0000 + int(uuid.uuid4().hex[:4], 16)
    send, receive = (code.replace("@KEY@", str(key)) for code in (IPC_SEND[what], IPC_RECEIVE))
    if path == "tool":
        sent = (await call_tool("run_python", {"code": send}, env.ctx)).content
    else:
        step = StepRequest(kind="python", session_id=ATTACKER, code=send, timeout_s=3, memory_mb=1024)
        sent = (await env.ctx.sandbox.run(step)).output
    got = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=VICTIM, code=receive, timeout_s=3))
    assert "A-SECRET" not in got.output + got.error, got
    if holds(env.ctx.sandbox.protections(), "syscalls"):
        assert "made -1" in sent, sent  # refused outright
    if holds(env.ctx.sandbox.protections(), "syscalls") or env.backend in ("root", "userns"):
        assert key not in _host_ipc_keys()  # nothing left on the host, whatever the step managed


async def test_root_and_userns_steps_have_their_own_namespaces_hostname_and_run(env: Env):
    if env.backend not in ("root", "userns"):
        return  # landlock/none: no namespaces (the back end row says so); seccomp still refuses SysV IPC
    code = (
        "import os, socket\nprint(socket.gethostname())\nprint('run', len(os.listdir('/run')))\n"
        "for ns in ('ipc', 'uts', 'net', 'mnt'):\n    print(ns, os.readlink(f'/proc/self/ns/{ns}'))"
    )
    result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
    lines = result.output.split()
    assert result.ok and lines[0] == "datathread-step" != socket.gethostname(), result
    assert lines[1:3] == ["run", "0"]  # the host's /run (service sockets, lock files) is an empty cover
    for ns in ("ipc", "uts", "net", "mnt"):
        assert lines[lines.index(ns) + 1] != os.readlink(f"/proc/self/ns/{ns}"), ns


# The disk quota holds while a step runs, not only after it: a 20 MB quota, a step writing 200 MB.
QUOTA_MB, QUOTA_FILES = 20, 2_000
DISK_FLOODS = {  # each file's name carries the time it was made: the step's own write speed
    "many-1mb-files": "import os, time\nos.makedirs('flood', exist_ok=True)\nfor i in range(200):\n"
    "    with open(f'flood/f{i}_{time.monotonic_ns()}', 'wb') as f:\n        f.write(os.urandom(2 ** 20))",
    "one-growing-file": "import os\nos.makedirs('flood', exist_ok=True)\nwith open('flood/big', 'wb') as f:\n"
    "    for i in range(200):\n        f.write(os.urandom(2 ** 20))\n        f.flush()",
    "nested-dirs": "import os, time\nfor i in range(200):\n    os.makedirs(f'flood/{i}/a/b', exist_ok=True)\n"
    "    with open(f'flood/{i}/a/b/x_{time.monotonic_ns()}', 'wb') as f:\n        f.write(os.urandom(2 ** 20))",
    "empty-files": "import os, time\nos.makedirs('flood', exist_ok=True)\nfor i in range(100_000):\n"
    "    open(f'flood/e{i}_{time.monotonic_ns()}', 'w').close()",
}


def _step_speed(root: Path) -> tuple[float, float]:
    """Bytes and files per second the step wrote, from the times in its files' names (0 if unknown)."""
    made = [(int(p.name.rsplit("_", 1)[1]), p.lstat().st_size) for p in root.rglob("*_*") if p.is_file()]
    if len(made) < 3:
        return 0.0, 0.0
    span = (max(t for t, _ in made) - min(t for t, _ in made)) / 1e9 or 1e-3
    return sum(size for _, size in made) / span, len(made) / span


def _file_bytes(root: Path) -> int:
    """Bytes in regular files (what the quota counts; directories' own sizes are not data)."""
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _tree(root: Path) -> tuple[int, int]:
    sizes = [p.lstat().st_size for p in root.rglob("*")] if root.exists() else []
    return sum(sizes), len(sizes)


def _write_rate(folder: Path) -> tuple[float, float]:
    """How many bytes and empty files this host writes in one watchdog tick (0.1 s), from Python."""
    folder.mkdir(exist_ok=True)
    started = time.perf_counter()
    for i in range(20):
        (folder / f"r{i}").write_bytes(os.urandom(2**20))
    per_byte = (time.perf_counter() - started) / (20 * 2**20)
    started = time.perf_counter()
    for i in range(2000):
        (folder / f"e{i}").touch()
    per_file = (time.perf_counter() - started) / 2000
    shutil.rmtree(folder)
    return 0.1 / per_byte, 0.1 / per_file


@pytest.mark.parametrize("path", ["tool", "raw"])
@pytest.mark.parametrize("flood", DISK_FLOODS, ids=list(DISK_FLOODS))
async def test_the_workspace_quota_holds_while_a_step_runs(env: Env, flood: str, path: str):
    sandbox = env.ctx.sandbox
    shutil.rmtree(env.ws / "flood", ignore_errors=True)
    before_bytes, before_files = _tree(env.ws)
    tick_bytes, tick_files = _write_rate(env.ws.parent / f"rate-{uuid.uuid4().hex[:6]}")
    saved = sandbox.workspace_bytes, sandbox.workspace_files
    sandbox.workspace_bytes = before_bytes + QUOTA_MB * 2**20
    sandbox.workspace_files = before_files + QUOTA_FILES
    try:
        code = DISK_FLOODS[flood]
        if path == "tool":
            outcome = await call_tool("run_python", {"code": code}, replace(env.ctx, step_timeout_s=20))
            text, failed = outcome.content, outcome.is_error
        else:
            step = StepRequest(kind="python", session_id=ATTACKER, code=code, timeout_s=20, memory_mb=1024)
            result = await sandbox.run(step)
            text, failed = result.error, not result.ok
        used_bytes, used_files = _tree(env.ws)
        used_data = _file_bytes(env.ws)
        speed_bytes, speed_files = _step_speed(env.ws / "flood")
    finally:
        sandbox.workspace_bytes, sandbox.workspace_files = saved
        shutil.rmtree(env.ws / "flood", ignore_errors=True)
    log = sandbox._socket_dir / "zygote.log"
    assert failed and "filled the thread's workspace past its limit" in text, (text, log.read_text()[-2000:])
    # at most the quota plus what the step writes in a couple of ticks (a tick, and one measurement):
    # its own speed where its names tell it, else this host's; at least a quarter of the quota
    tick_bytes, tick_files = max(tick_bytes, 0.1 * speed_bytes), max(tick_files, 0.1 * speed_files)
    extra_bytes = max(2.5 * tick_bytes, QUOTA_MB * 2**18)
    extra_files = max(2.5 * tick_files, QUOTA_FILES / 4)
    assert used_bytes - before_bytes <= QUOTA_MB * 2**20 + extra_bytes, (used_bytes, tick_bytes)
    assert used_files - before_files <= QUOTA_FILES + extra_files, (used_files, tick_files)
    assert used_bytes - before_bytes < 200 * 2**20
    if flood == "one-growing-file":  # the kernel stops one file at what is left of the quota: no overshoot
        assert used_data <= before_bytes + QUOTA_MB * 2**20, used_data  # exactly the configured limit


async def test_zz_nothing_changed_outside_the_workspace(env: Env):
    """Runs last (file order): the whole corpus left the home, canary, victim and warehouse intact."""
    assert len(env.before[0]) >= 4 and sum(env.before[1].values()) > 300_000
    now = _disk(env)
    changed = {k for k in now[0].keys() | env.before[0].keys() if now[0].get(k) != env.before[0].get(k)}
    assert not changed and now[1:] == env.before[1:]
    assert (env.home / "canary.txt").read_text() == "CANARY-9c1e"
    assert (env.victim / "victim.csv").read_bytes() == b"secret\nVICTIM-ROW-7f3a\n"
    assert not os.path.exists(env.hostfile) and not os.path.exists(env.hostfile + ".csv")
    assert not os.path.exists(env.runlock)
    assert not os.path.exists("/tmp/x.txt") or os.stat("/tmp/x.txt").st_uid == 0


async def test_the_corpus_is_big_enough():
    sql = [c for c in SQL_CASES if c.tool in (S, W)]
    assert len(sql) >= 40 and len(PY_CASES) >= 25
