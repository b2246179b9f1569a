"""`python -m bench [NAME ...] [--quick] [--no-report]`: run the benchmarks, print, write docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time

from bench import BENCHMARKS
from bench.harness import ROOT, machine
from bench.report import write


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmarks (all by default, in the documented order) and report them."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"any of: {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions (smoke run)")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    logging.basicConfig(level=logging.WARNING)
    names = args.names or list(BENCHMARKS)
    info = machine()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    results = []
    for name in names:
        title, run = BENCHMARKS[name]
        print(f"\n== {name}: {title}", flush=True)
        started = time.perf_counter()
        result = asyncio.run(run(quick=args.quick))
        print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
        results.append(result)
    if not args.no_report:
        command = (
            "python -m bench" + "".join(f" {n}" for n in args.names) + (" --quick" if args.quick else "")
        )
        write(ROOT / "docs" / "BENCHMARKS.md", results, machine=info, command=command)
        print("\nwrote docs/BENCHMARKS.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
