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
