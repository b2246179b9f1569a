"""Writes docs/BENCHMARKS.md: the latest table, the notes, and what changed since the previous run.

The previous run's figures are kept as JSON in an HTML comment at the end of the file, so the next
run can diff against them and a partial run (`python -m bench steps`) keeps the other benchmarks'
latest rows. Sections measured by hand (the test suite's wall time, say) sit between the
`<!-- by hand -->` and `<!-- end by hand -->` lines and are carried over unchanged.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict
from pathlib import Path

from bench.harness import BenchResult, Figure, fmt

DATA_MARK = "bench-data"
BY_HAND = ("<!-- by hand -->", "<!-- end by hand -->")
HEADER = ["figure", "value", "baseline", "ratio", "target", "met?"]


def load_previous(path: Path) -> dict:
    """The data block of the previous report ({} when there is none or it cannot be read)."""
    if not path.exists():
        return {}
    match = re.search(rf"<!-- {DATA_MARK}\n(.*?)\n-->", path.read_text(), re.S)
    if not match:
        return {}
    try:
        return json.loads(match.group(1))
    except ValueError:
        return {}


def load_by_hand(path: Path) -> str:
    """The hand-measured part of the previous report, markers included ("" when there is none)."""
    if not path.exists():
        return ""
    start, end = BY_HAND
    match = re.search(rf"{re.escape(start)}\n.*?\n{re.escape(end)}", path.read_text(), re.S)
    return match.group(0) if match else ""


def _table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return out


def _changes(old: dict, new: dict) -> list[str]:
    """One line per figure whose value moved, appeared or disappeared since the previous run."""
    ran = set(new["benches"])
    before = {f["name"]: f for n, b in old.get("benches", {}).items() if n in ran for f in b["figures"]}
    lines = []
    for bench in new["benches"].values():
        for f in bench["figures"]:
            prev = before.pop(f["name"], None)
            if prev is None:
                lines.append(f"- new: {f['name']} = {fmt(f['value'])} {f['unit']}")
            elif prev["value"] != f["value"] or prev.get("met") != f.get("met"):
                change = f["value"] / prev["value"] - 1 if prev["value"] else 0.0
                flip = (
                    "" if prev.get("met") == f.get("met") else f" (met: {prev.get('met')} → {f.get('met')})"
                )
                lines.append(
                    f"- {f['name']}: {fmt(prev['value'])} → {fmt(f['value'])} {f['unit']} ({change:+.0%}){flip}"
                )
    lines += [f"- gone: {name}" for name in before]
    return lines or ["- nothing: every figure is unchanged."]


def write(path: Path, results: list[BenchResult], *, machine: dict, command: str) -> None:
    """Merge this run's results over the previous data and render the whole report."""
    old, by_hand = load_previous(path), load_by_hand(path)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    benches = dict(old.get("benches", {}))
    for r in results:
        benches[r.name] = {
            "title": r.title,
            "date": now,
            "figures": [asdict(f) for f in r.figures],
            "notes": r.notes,
        }
    data = {"date": now, "machine": machine, "command": command, "benches": benches}
    ran = {r.name for r in results}
    lines = [
        "# Benchmarks",
        "",
        "Measured speed, scale and cost of datathread, each figure next to a baseline measured in the",
        "same run (the machine is shared, so ratios mean more than absolute times). Medians of several",
        "repetitions unless a figure says p99. Loopback fakes stand in for the Messages API and Slack.",
        "",
        f"- date: {now}",
        *[f"- {k}: {v}" for k, v in machine.items()],
        f"- command: `{command}`",
        "",
        "## Results",
        "",
    ]
    rows = []
    for bench in benches.values():
        rows += [Figure(**f).row() for f in bench["figures"]]
    lines += _table(rows)
    stale = [f"{name} ({b['date']})" for name, b in benches.items() if name not in ran]
    if stale:
        lines += [
            "",
            f"Rows of {', '.join(stale)} are from an earlier run (this run: {', '.join(sorted(ran))}).",
        ]
    lines += ["", "## What changed since the last run", ""]
    lines += _changes(old, {"benches": {n: benches[n] for n in ran}}) if old else ["- first run."]
    lines += ["", "## Notes: where the time goes, and misses", ""]
    for name, bench in benches.items():
        lines += [f"### {bench['title']} (`python -m bench {name}`)", ""]
        lines += [f"- {n}" for n in bench["notes"]] or ["- (no notes)"]
        lines.append("")
    if by_hand:
        lines += [by_hand, ""]
    lines += [f"<!-- {DATA_MARK}", json.dumps(data, indent=1), "-->", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
