"""Write pytest's cache of rewritten test modules once, at `make setup` (`python -m tests.assert_cache`).

pytest rewrites the asserts of every test module and conftest it imports (parse, rewrite, compile:
5 s of CPU for this suite) and caches the result next to the module — unless PYTHONDONTWRITEBYTECODE
is set, as on CI machines, where every test process (each xdist worker) rewrites the whole suite
again. It still reads a cache it finds, checked against the source's hash, so writing it here once
saves each worker those seconds; a module edited since is rewritten by pytest as before.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent


class _State:
    @staticmethod
    def trace(*_args) -> None:
        pass


def _cache(fn: Path) -> bool:
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir

    pyc = get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)
    if _read_pyc(fn, pyc) is not None:
        return False
    pyc.parent.mkdir(exist_ok=True)
    source_hash, code = _rewrite_test(fn, None)  # type: ignore[arg-type]  # no config: the defaults
    return _write_pyc(_State, code, source_hash, pyc)  # type: ignore[arg-type]


def main() -> None:
    modules = sorted(p for p in TESTS.rglob("*.py") if p.name == "conftest.py" or p.name.startswith("test_"))
    try:
        with ProcessPoolExecutor(2) as pool:
            list(pool.map(_cache, modules))
    except Exception as exc:  # a pytest without this private API: pytest rewrites them itself, as before
        print(f"pytest's assert cache not written ({type(exc).__name__}: {exc})", file=sys.stderr)


if __name__ == "__main__":
    main()
