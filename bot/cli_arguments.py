"""Command-line arguments read as text UTF-8 can encode, once for every command (core/text_repair.py).

Python decodes argv with `surrogateescape`: a byte that is not UTF-8 (a Latin-1 `$(cat id.txt)`, any
non-ASCII letter under `LC_ALL=C`) arrives as a lone surrogate, which failed to encode wherever it
went next. `schedule pause`, `verified show` and `audit --user` ended in a UnicodeEncodeError
traceback from the store's look-up; `schedule add` stored the escape. So every argument is read with
`readable` before its command sees it, except a file name: "M\\udcfcnchen.ipynb" names the file whose
name holds the byte 0xFC, and only the escape still names that file. A file name is a `Path`, or a
`FileName` (`output_option`) where the text itself matters (`-o out/` and `-o out` differ by the slash a Path drops).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

import typer
from typer.core import TyperGroup

from core.text_repair import readable


class FileName(str):
    """An argument that names a file: kept as argv gave it. `typer.Option(..., parser=FileName)`."""


def output_option(default: str | None, help: str) -> Any:
    """`-o`/`--output FILE` (export, teams-package): a file name, kept as given."""
    return typer.Option(default, "-o", "--output", parser=FileName, help=help)


def as_read(value: Any) -> Any:
    """`value` as a command receives it: each string `readable`, file names untouched."""
    if isinstance(value, FileName | PurePath):
        return value
    if isinstance(value, str):
        return readable(value)
    if isinstance(value, list | tuple):
        return type(value)(as_read(v) for v in value)
    return value


def _reading(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def call(*args: Any, **params: Any) -> Any:
        return callback(*args, **{name: as_read(value) for name, value in params.items()})

    return call


class ReadableArguments(TyperGroup):
    """The root command group (`typer.Typer(cls=ReadableArguments)`): every command under it, in its
    sub-groups too, gets its arguments through `as_read`. Typer builds the group anew for each run,
    the console script's and a test's CliRunner alike, so each build is wrapped once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _read_arguments(self)


def _read_arguments(command: Any) -> None:
    if command.callback is not None:
        command.callback = _reading(command.callback)
    for sub in getattr(command, "commands", {}).values():
        _read_arguments(sub)
