"""2. Step overhead: the round trip of a trivial step on a warm worker, against a cold interpreter that
imports the data stack (what a step would cost without the pre-warmed fork server).

Measured for the local sandbox (`LocalSandbox.run`) and for the Modal worker side run locally
(`VolumeWorkspaces.run_step`, with no-op Volume reload/commit standing in for the Volume).
"""

from __future__ import annotations

import time

from bench.harness import BenchResult, Figure, cold_import_seconds, demo_database, median, ratio, temp_dir

STEPS = {
    "run_python": ("python", "print(1)"),
    "run_sql": ("sql", "SELECT 1 AS x"),
    "warehouse": ("warehouse", "SELECT count(*) AS n FROM airlines"),
}
TARGET = 0.1


async def _time_steps(run, session: str, repeats: int) -> dict[str, list[float]]:
    """Round-trip times per step kind, after one untimed warm-up of each."""
    from core.sandbox import StepRequest

    times: dict[str, list[float]] = {name: [] for name in STEPS}
    for n in range(repeats + 1):
        for name, (kind, code) in STEPS.items():
            started = time.perf_counter()
            result = await run(StepRequest(kind=kind, session_id=session, code=code, save_as=f"s{n}"))
            elapsed = time.perf_counter() - started
            ok = result.ok if hasattr(result, "ok") else result["ok"]
            if not ok:
                raise RuntimeError(f"{name} step failed: {result}")
            if n:
                times[name].append(elapsed)
    return times


BACKENDS = ("root", "userns", "landlock", "none")  # each isolation back end this host offers


def _local(backend: str):
    async def measure(repeats: int) -> dict[str, list[float]] | None:
        from core.sandbox_local import LocalSandbox

        with temp_dir("steps") as tmp:
            sandbox = LocalSandbox(workspaces=tmp / "ws", warehouse=demo_database(), isolation_policy=backend)
            try:
                await sandbox.start()
            except RuntimeError:  # not offered by this host (e.g. `root` for an ordinary user)
                await sandbox.close()
                return None
            try:
                return await _time_steps(sandbox.run, "bench-steps", repeats)
            finally:
                await sandbox.close()

    return measure


async def _modal_local(repeats: int) -> dict[str, list[float]]:
    from core.sandbox_modal import VolumeWorkspaces

    def noop() -> None:
        return None

    with temp_dir("modal") as tmp:
        worker = VolumeWorkspaces(root=tmp / "volume", reload=noop, commit=noop, warehouse=demo_database())
        await worker.start()
        try:
            return await _time_steps(lambda req: worker.run_step(req.to_dict()), "bench-modal", repeats)
        finally:
            await worker.close()


async def run(*, quick: bool = False) -> BenchResult:
    """Median round trips per step kind vs the median cold import, for both step runners."""
    result = BenchResult("steps", "2. Step overhead")
    repeats = 3 if quick else 15
    cold = median(cold_import_seconds(repeats=2 if quick else 5)) * 1000
    runners = [(f"local, {backend} back end", _local(backend)) for backend in BACKENDS]
    for label, measure in [*runners, ("modal worker, local", _modal_local)]:
        times = await measure(repeats)
        if times is None:
            continue
        for name, values in times.items():
            value = median(values) * 1000
            r = ratio(value, cold)
            result.add(
                Figure(
                    name=f"steps: {name} round trip ({label})",
                    value=value,
                    unit="ms",
                    baseline=cold,
                    baseline_name="cold `python -c 'import pandas, matplotlib, duckdb'`",
                    ratio=r,
                    target=f"≤ {TARGET}× cold",
                    met=r is not None and r <= TARGET,
                )
            )
    result.note(
        f"Median of {repeats} steps per kind after one warm-up; the cold baseline is the median of "
        "fresh interpreters importing pandas, matplotlib and duckdb. Each step forks a child of the "
        "pre-warmed fork server, isolates it with the named back end (root: per-session uid + "
        "namespaces; userns: user namespaces; landlock: Landlock + seccomp; none: rlimits only), runs, snapshots "
        "the workspace for new files and returns JSON over a Unix socket."
    )
    result.note(
        "The Modal figure runs the worker side (`VolumeWorkspaces.run_step`) on this machine with "
        "no-op Volume reload/commit: it is the step runner's own overhead. On Modal add the "
        "`.remote.aio` call (tens of ms warm) and Volume reload+commit."
    )
    return result
