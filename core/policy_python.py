"""Python policy: early, friendly feedback on model-written analysis code.

Owns ``check_python``. This is *not* the security boundary (the sandbox is); it catches the obvious
things the sandbox will block anyway — shells, network, environment, dynamic code, interpreter
introspection, files outside the workspace — and tells the model what to do instead, before a run is
wasted. It is AST-based, pure, and deliberately light on false positives: ``df.eval``, ``re.compile``,
``os.path.join``, relative ``open()`` and the usual pandas/numpy/matplotlib/duckdb code all pass.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from typing import NamedTuple

from core.policy_types import Verdict

_ADVICE = {
    "process": "Running processes, shells or signals is not available in the sandbox; do the work in "
    "Python (pandas/numpy) or in SQL with run_sql.",
    "network": "Network access is not available in the sandbox; load data with query_warehouse or files "
    "in the workspace.",
    "env": "Environment variables are not available to analysis code; use values from the conversation "
    "or the workspace files.",
    "dynamic": "Dynamic code execution and imports are not allowed; write the code directly and use "
    "plain import statements.",
    "introspection": "Interpreter introspection is not allowed; work with your data objects directly.",
    "native": "Native code (ctypes) is not available in the sandbox; use numpy/pandas instead.",
    "fs": "Deleting directory trees is not allowed; remove individual files you created with os.remove.",
    "path": "Files live in the workspace (the current directory); use a relative path such as "
    "'out.csv' or 'charts/plot.png'.",
}
_MODULES = {
    **dict.fromkeys(("subprocess", "multiprocessing", "pty", "signal", "posix", "nt"), "process"),
    **dict.fromkeys(("socket", "requests", "urllib", "urllib3", "http.client", "http.server", "httpx",
                     "aiohttp", "ftplib", "smtplib", "telnetlib", "socketserver", "xmlrpc",
                     "websocket", "websockets", "paramiko"), "network"),
    **dict.fromkeys(("importlib", "builtins"), "dynamic"),
    **dict.fromkeys(("gc", "inspect"), "introspection"),
    "ctypes": "native",
}  # fmt: skip
# Dotted names (fnmatch patterns) reached through attributes or `from x import y`.
_ATTRS = {
    **dict.fromkeys(("os.system", "os.popen", "os.exec*", "os.spawn*", "os.posix_spawn*", "os.fork",
                     "os.forkpty", "os.kill", "os.killpg"), "process"),
    **dict.fromkeys(("os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv",
                     "os.unsetenv"), "env"),
    **dict.fromkeys(("sys.modules", "sys._getframe"), "introspection"),
    "shutil.rmtree": "fs",
}  # fmt: skip
_BUILTINS = {"eval": "dynamic", "exec": "dynamic", "compile": "dynamic", "__import__": "dynamic",
             "__builtins__": "introspection"}  # fmt: skip
_DUNDERS = frozenset({"__subclasses__", "__globals__", "__builtins__", "__code__", "__class__",
                      "__bases__", "__base__", "__mro__", "__closure__"})  # fmt: skip
_PATH_CALLS = frozenset({"open", "io.open", "Path", "pathlib.Path", "PurePath", "pathlib.PurePath"})
_URL_SCHEMES = ("http://", "https://", "ftp://", "s3://", "gs://")


class _Issue(NamedTuple):
    line: int
    col: int
    kind: str
    what: str


def check_python(code: str) -> Verdict:
    """Give the model early, specific feedback on code the sandbox would block, before running it.

    Returns an allowed Verdict (kind "python") or the first problem by position, naming the construct
    and line and saying what to do instead.
    """
    try:
        tree = ast.parse(code or "")
    except SyntaxError as e:
        where = f"line {e.lineno}" + (f", column {e.offset}" if e.offset else "")
        return Verdict(
            False, f"Syntax error at {where}: {e.msg}. Fix it and run again.", (), "refused:syntax"
        )
    except (ValueError, RecursionError, MemoryError) as e:
        return Verdict(False, f"The code could not be parsed: {e}.", (), "refused:syntax")
    finder = _Finder(_aliases(tree))
    finder.visit(tree)
    if not finder.issues:
        return Verdict(True, "", (), "python")
    first, *rest = sorted(finder.issues)
    more = f" ({len(rest)} more issue{'s' if len(rest) > 1 else ''} of this kind may follow.)" if rest else ""
    reason = f"Line {first.line}: {first.what} — {_ADVICE[first.kind]}{more}"
    return Verdict(False, reason, (), f"refused:{first.kind}")


def _module_kind(module: str) -> str | None:
    if module == "urllib.parse" or module.startswith("urllib.parse."):
        return None  # pure string parsing, no network
    for name, kind in _MODULES.items():
        if module == name or module.startswith(name + "."):
            return kind
    return None


def _attr_kind(dotted: str) -> tuple[str, str] | None:
    """Match a dotted name against _ATTRS; returns (pattern-matched prefix, kind)."""
    segs = dotted.split(".")
    for pattern, kind in _ATTRS.items():
        n = pattern.count(".") + 1
        head = ".".join(segs[:n])
        if len(segs) >= n and fnmatchcase(head, pattern):
            return head, kind
    return None


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Map local names bound by imports to the dotted names they stand for (``o`` → ``os``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _literal_path_problem(node: ast.AST | None) -> str | None:
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    p = node.value
    if p.startswith(_URL_SCHEMES):
        return "url"
    parts = p.replace("\\", "/").split("/")
    if p.startswith(("/", "\\", "~")) or (len(p) > 1 and p[1] == ":") or ".." in parts:
        return "path"
    return None


class _Finder(ast.NodeVisitor):
    def __init__(self, aliases: dict[str, str]):
        self.aliases = aliases
        self.issues: list[_Issue] = []

    def _add(self, node: ast.AST, kind: str, what: str) -> None:
        self.issues.append(_Issue(getattr(node, "lineno", 0), getattr(node, "col_offset", 0), kind, what))

    def _dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            kind = _module_kind(a.name)
            if kind:
                self._add(node, kind, f"`import {a.name}`")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for a in node.names:
            full = f"{module}.{a.name}"
            kind = _module_kind(module) or _module_kind(full) or (_attr_kind(full) or (None, None))[1]
            if kind:
                self._add(node, kind, f"`from {module} import {a.name}`")
            elif a.name == "*" and module in ("os", "sys", "shutil"):
                self._add(node, "process", f"`from {module} import *` (import the names you need)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _DUNDERS:
            self._add(node, "introspection", f"`.{node.attr}`")
            return
        hit = _attr_kind(self._dotted(node) or "")
        if hit:
            self._add(node, hit[1], f"`{hit[0]}`")
            return  # one report per chain
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        resolved = self.aliases.get(node.id)
        if resolved is None and node.id in _BUILTINS:
            self._add(node, _BUILTINS[node.id], f"`{node.id}`")
        elif resolved and resolved != node.id:
            hit = _attr_kind(resolved)
            if hit:
                self._add(node, hit[1], f"`{hit[0]}`")

    def visit_Call(self, node: ast.Call) -> None:
        func = self._dotted(node.func) or ""
        short = func.rsplit(".", 1)[-1]
        if func in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                hit = _attr_kind(f"{self._dotted(node.args[0]) or '?'}.{name.value}")
                if name.value in _DUNDERS:
                    self._add(node, "introspection", f"`{func}(…, {name.value!r})`")
                elif hit:
                    self._add(node, hit[1], f"`{func}(…, {name.value!r})` reaching `{hit[0]}`")
        if func in _PATH_CALLS or short.startswith("read_"):
            target = node.args[0] if node.args else None
            for kw in node.keywords:
                if kw.arg in ("file", "filepath_or_buffer", "path", "io"):
                    target = kw.value
            problem = _literal_path_problem(target)
            if problem == "url":
                self._add(node, "network", f"`{func}()` of a URL")
            elif problem == "path":
                self._add(node, "path", f"`{func}({target.value!r})` outside the workspace")
        self.generic_visit(node)
