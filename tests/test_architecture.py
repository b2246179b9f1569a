"""Imports go one way: bot/ and deploy/ use core/; core/ never imports a platform SDK or a surface.

Only core/sandbox_modal.py may import modal (it is the Modal implementation of the Sandbox protocol).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "core"
FORBIDDEN = ("slack_bolt", "slack_sdk", "botbuilder", "botframework", "modal", "bot", "deploy")
ALLOWED = {("sandbox_modal.py", "modal")}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_no_platform_sdk_and_no_surface(path: Path):
    bad = {root for root in imported_roots(path) if root in FORBIDDEN and (path.name, root) not in ALLOWED}
    assert not bad, f"core/{path.name} imports {sorted(bad)}"


def test_the_scan_sees_imports_inside_functions(tmp_path: Path):
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    import slack_sdk.web\n    from modal import App\n")
    assert imported_roots(sample) == {"slack_sdk", "modal"}


# --- one seam between surfaces and core ----------------------------------------------------------
ROOT = CORE.parent
BOT = ROOT / "bot"
# The core's parts: a surface goes through core/thread.py (`Threads`) or `Analyst.handle`, never these.
CORE_INTERNALS = frozenset({"store", "parts", "access", "sandbox", "warehouse", "verified", "redactor"})
SETTINGS_NAMES = frozenset({"settings", "s"})  # `settings.sandbox`/`.warehouse` are choices, not parts


def reach_throughs(path: Path) -> list[str]:
    """`x.store`, `analyst.parts.sandbox`, `threads._store`…: attribute reads past the seam. A private
    attribute is fine on `self`/`cls` only (the object's own state)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value.id if isinstance(node.value, ast.Name) else ""
        private = (
            node.attr.startswith("_") and not node.attr.startswith("__") and owner not in ("self", "cls")
        )
        if (node.attr in CORE_INTERNALS and owner not in SETTINGS_NAMES) or private:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(BOT.glob("*.py")), ids=lambda p: p.name)
def test_surfaces_do_not_reach_past_the_seam(path: Path):
    assert not reach_throughs(path), f"bot/{path.name} reaches into the core: {reach_throughs(path)}"


def test_the_seam_scan_sees_reach_throughs(tmp_path: Path):
    sample = tmp_path / "x.py"
    sample.write_text(
        "async def f(state, self):\n"
        "    await state.analyst.store.get_turn('t')\n"
        "    state.analyst.parts.sandbox.read_file('s', 'p')\n"
        "    state.threads._store\n"
        "    self._client\n"
        "    settings.sandbox == 'modal'\n"
    )
    assert sorted(reach_throughs(sample)) == [
        "x.py:2 .store",
        "x.py:3 .parts",
        "x.py:3 .sandbox",
        "x.py:4 ._store",
    ]


def test_app_state_has_no_string_keyed_locator():
    from bot.surface import AppState

    fields = AppState.__dataclass_fields__
    assert "extras" not in fields and all(f.type != "dict" for f in fields.values())


# --- no import cycles -----------------------------------------------------------------------------
PACKAGES = ("bot", "core", "deploy")


def import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (anywhere in the file, functions included)."""
    modules = {f"{pkg}.{p.stem}": p for pkg in PACKAGES for p in sorted((ROOT / pkg).glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
                deps |= names & modules.keys()
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


# Known cycles, to be broken (this list only shrinks).
KNOWN_CYCLES = [
    ["core.schedules_tool", "core.tools"],  # type-only: ToolContext.schedules names ScheduleDesk
]


def test_no_new_import_cycles():
    assert cycles(import_graph()) == KNOWN_CYCLES


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# --- modules of one concern ------------------------------------------------------------------------
MAX_LINES = 400  # no exceptions: a module past it is two concerns


@pytest.mark.parametrize(
    "path", sorted(p for pkg in PACKAGES for p in (ROOT / pkg).glob("*.py")), ids=lambda p: p.name
)
def test_modules_stay_small(path: Path):
    name = f"{path.parent.name}/{path.name}"
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{name} has {lines} lines (at most {MAX_LINES}): move one of its concerns into a module named "
        "for what it does (docs/CONTRIBUTING.md)"
    )


# --- tests share helpers through tests/fakes/, harness modules and conftest, not through each other ----
TESTS = ROOT / "tests"


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") for part in parts[1:])


def imported_test_modules(source: str, path: Path) -> list[str]:
    """The test modules (`tests/**/test_*.py`) that the module at `path` imports, absolute or relative,
    anywhere in the file. A helper two modules need belongs in tests/fakes/, a harness module or a
    conftest: importing a test module ties two modules' fixtures and collection together."""
    package = path.relative_to(ROOT).parent.parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if is_test_module(alias.name)}
        elif isinstance(node, ast.ImportFrom):
            parts = [*package[: len(package) - node.level + 1]] if node.level else []
            base = ".".join([*parts, *([node.module] if node.module else [])])
            if is_test_module(base):
                found.add(base)
            else:  # `from tests.bot import test_teams`
                found |= {f"{base}.{a.name}" for a in node.names if is_test_module(f"{base}.{a.name}")}
    return sorted(found)


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path):
    found = imported_test_modules(path.read_text(), path)
    assert not found, f"{path.relative_to(ROOT)} imports {found}"


def test_the_test_import_scan_sees_every_form():
    source = (
        "from tests.bot.test_teams import THREAD\n"
        "from . import test_cli, slack_harness\n"
        "from ..core.test_turns import assert_valid\n"
        "def f():\n    import tests.bot.test_doctor\n"
        "from tests.fakes.cli import run\n"
        "from tests.bot.slack_harness import serve\n"
        "from .teams_harness import THREAD\n"
    )
    assert imported_test_modules(source, TESTS / "bot" / "any.py") == [
        "tests.bot.test_cli",
        "tests.bot.test_doctor",
        "tests.bot.test_teams",
        "tests.core.test_turns",
    ]


def test_the_slow_first_order_names_modules_that_exist():
    from tests.conftest import SLOW_FIRST

    missing = [name for name in SLOW_FIRST if not (ROOT / name).is_file()]
    assert not missing and len(set(SLOW_FIRST)) == len(SLOW_FIRST), missing
