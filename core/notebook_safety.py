"""Which recorded steps are safe to replay in an exported notebook, outside any sandbox.

In the bot, model-written code runs in a sandbox with no credentials, no network and only its
workspace. In an exported notebook it runs as the reader, with their files, network and credentials —
so a step that reached for anything beyond the data stack (environment variables, processes, sockets,
native code, interpreter internals, files outside the working directory) must not be replayed, even if
it ran harmlessly in the sandbox. `step_hazard` says why a step is unsafe ("" when it is fine); the
notebook comments such steps out with that reason.

Stricter than `core/policy_python.py` (which gives the model early feedback and avoids false positives):
here a false positive costs a commented cell, a false negative runs attacker code on a laptop. So
imports are an allowlist, `os` is limited to path handling, and dynamic attribute access is refused.
"""

from __future__ import annotations

import ast

from core.policy import check_python, check_sql

# Modules a data step needs; anything else (os beyond paths, sys, subprocess, socket, ctypes, pickle,
# importlib, shutil, …) is outside the data stack.
DATA_STACK = frozenset({
    "pandas", "numpy", "matplotlib", "duckdb", "pyarrow", "scipy", "statsmodels", "seaborn", "sklearn",
    "math", "statistics", "datetime", "json", "re", "collections", "itertools", "functools", "decimal",
    "fractions", "textwrap", "string", "random", "calendar", "zoneinfo", "typing", "dataclasses",
    "operator", "csv", "heapq", "bisect", "enum", "warnings", "pprint", "time", "os", "pathlib", "glob",
})  # fmt: skip
# What `os.` may reach: path handling and the working directory's own files.
_OS_ATTRS = frozenset({"path", "makedirs", "mkdir", "listdir", "scandir", "walk",
                       "remove", "unlink", "rename", "replace", "stat", "linesep"})  # fmt: skip
# Attribute names that lead out of the data stack wherever they appear in a chain (np.ctypeslib,
# pd.io.common.os, df.__class__ …).
_BAD_ATTRS = frozenset({"ctypes", "ctypeslib", "environ", "environb", "getenv", "putenv", "system",
                        "popen", "subprocess", "socket", "os", "sys", "builtins", "importlib",
                        "import_module", "load_library", "cdll", "CDLL", "dlopen", "modules",
                        "load_extension",
                        # the reader's home and what is above or outside the working directory: in
                        # the sandbox HOME is nowhere and the root is empty, so `Path.home() /
                        # '.bashrc'` or `Path(*Path.cwd().parts[:3])` ran harmlessly there
                        "home", "expanduser", "expandvars", "parent", "parents", "getcwd", "cwd",
                        "anchor", "parts", "dirname", "abspath", "absolute", "resolve", "realpath",
                        "sep", "root", "drive",
                        # unpickling runs code the file chose: pandas/numpy read pickles, HDF5 object
                        # columns are pickles
                        "read_pickle", "read_hdf", "HDFStore"})  # fmt: skip
_BAD_NAMES = frozenset({"eval", "exec", "compile", "__import__", "globals", "locals", "vars",
                        "breakpoint", "input", "getattr", "setattr", "delattr", "__builtins__",
                        "__loader__", "__spec__", "memoryview", "help"})  # fmt: skip
_SQL_CALLS = frozenset({"sql", "execute", "executemany", "query", "from_query", "read_sql"})
_SCHEMES = ("http://", "https://", "ftp://", "s3://", "gs://", "gcs://", "az://", "abfs://", "hf://",
            "file:", "r2://")  # fmt: skip


def step_hazard(tool: str, args: dict, *, dialect: str) -> str:
    """Why replaying this recorded step on the reader's machine is unsafe; "" when it is fine."""
    if tool == "query_warehouse" and isinstance(args.get("sql"), str):
        verdict = check_sql(args["sql"], dialect=dialect)
        return "" if verdict.allowed else f"its SQL does not pass the read-only policy: {verdict.reason}"
    if tool == "run_sql" and isinstance(args.get("sql"), str):
        verdict = check_sql(args["sql"], dialect="duckdb", workspace_files=True)
        return "" if verdict.allowed else f"its SQL does not pass the read-only policy: {verdict.reason}"
    if tool == "run_python" and isinstance(args.get("code"), str):
        return python_hazard(args["code"])
    return ""


def python_hazard(code: str) -> str:
    """The first construct of ``code`` that reaches beyond the data stack, in words; "" if none."""
    verdict = check_python(code)
    if not verdict.allowed:
        return verdict.reason
    finder = _Finder()
    finder.visit(ast.parse(code))  # check_python parsed it already
    return min(finder.problems)[2] if finder.problems else ""  # the first by position


class _Finder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.problems: list[tuple[int, int, str]] = []
        self.os_names: set[str] = set()

    def _flag(self, node: ast.AST, what: str) -> None:
        line, end = getattr(node, "lineno", 0), getattr(node, "end_col_offset", 0) or 0
        self.problems.append((line, end, f"line {line}: {what}"))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top not in DATA_STACK:
                self._flag(node, f"`import {alias.name}` is outside the data stack")
            elif top == "os":
                self.os_names.add(alias.asname or "os")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        top = (node.module or "").split(".")[0]
        if node.level or top not in DATA_STACK:
            self._flag(node, f"`from {node.module or '.'} import …` is outside the data stack")
        elif top == "os" and (node.module != "os" or any(a.name not in _OS_ATTRS for a in node.names)):
            self._flag(node, f"`from {node.module} import …` reaches beyond path handling")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _BAD_ATTRS or node.attr.startswith("__"):
            self._flag(node, f"`.{node.attr}` leads outside the data stack")
        elif (
            isinstance(node.value, ast.Name) and node.value.id in self.os_names and node.attr not in _OS_ATTRS
        ):
            self._flag(node, f"`os.{node.attr}` reaches beyond path handling")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _BAD_NAMES:
            self._flag(node, f"`{node.id}` runs or reaches code dynamically")

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str) and _outside(value):
            self._flag(node, f"{value[:60]!r} points outside the working directory")

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if any(k.arg == "allow_pickle" for k in node.keywords):  # np.load(..., allow_pickle=True)
            self._flag(node, "`allow_pickle` unpickles: the file decides what code runs")
        sql = node.args[0] if node.args else None
        if name in _SQL_CALLS and isinstance(sql, ast.Constant) and isinstance(sql.value, str):
            verdict = check_sql(sql.value, dialect="duckdb", workspace_files=True)
            if not verdict.allowed:
                self._flag(node, f"its SQL does not pass the read-only policy: {verdict.reason}")
        self.generic_visit(node)


def _outside(text: str) -> bool:
    """A string that names a place outside the working directory: absolute, home, parent or a URL."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered.startswith(_SCHEMES) or "://" in lowered:
        return True
    if stripped.startswith("~") or (len(stripped) > 2 and stripped[1] == ":" and stripped[2] in "/\\"):
        return True
    if len(stripped) > 1 and stripped[0] in "/\\" and (stripped[1].isalnum() or stripped[1] in "._"):
        return True
    return ".." in stripped.replace("\\", "/").split("/")
