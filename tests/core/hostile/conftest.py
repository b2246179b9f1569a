"""The hostile corpus's sandbox: one real fork server per test module (and back end) on a copy of the
demo warehouse, with secrets in the bot's environment and in files next to it, a victim session, and a
service on loopback the steps must not reach. Each module gets its own home, so its sessions' uids and
cgroups (keyed by workspace path) never meet another module's running on another worker."""

from __future__ import annotations

import gc
import os
import shutil
import socket
import uuid

import pytest
import pytest_asyncio

from core.tools import ToolContext
from core.warehouse import QueryContext
from tests.core.hostile.corpus import ATTACKER, BOT_SECRETS, VICTIM, Env, disk
from tests.core.sandbox_backends import BACKENDS, EXPECTED, sandbox_options


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
    e.before = disk(e)
    yield e
    listener.close()
    await sandbox.close()
    shutil.rmtree(secrets_dir, ignore_errors=True)
