"""Which `DATATHREAD_*` names are settings: a misspelled one is named at start, not silently ignored
(and a near miss of one of the other names datathread reads, such as SLACK_SIGNNG_SECRET).

Settings ignore variables they do not know (`extra="ignore"`: the environment is full of other
programs' variables), so `DATATHREAD_ISOLATON=strict` used to run without strict isolation and without
a word. The known names come from the Settings model's aliases; the few `DATATHREAD_*` variables that
are read elsewhere on purpose are listed here, next to the reason.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Iterator
from difflib import get_close_matches
from pathlib import Path

from core.config import Settings

PREFIX = "DATATHREAD_"
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Read by tests' fault-injection hooks (core/zygote.py, core/step_processes.py, core/isolation_backends.py)
# and set by the hostile corpus (tests/core/hostile/corpus.py): never settings, never a user's typo.
TEST_HOOK_PREFIX = "DATATHREAD_TEST_"
NOT_SETTINGS = frozenset(
    {
        "DATATHREAD_WAREHOUSE_PATH",  # an exported notebook's own variable (core/notebook.py)
        "DATATHREAD_CI_USER",  # the ordinary user of .ci/run's second pass
    }
)


def setting_names() -> frozenset[str]:
    """Every environment variable the Settings model reads (all aliases of every field)."""
    return frozenset(
        str(choice).upper()
        for field in Settings.model_fields.values()
        for choice in getattr(field.validation_alias, "choices", ())
    )


def unknown_setting_warnings(names: Iterable[str]) -> list[str]:
    """One sentence per `DATATHREAD_*` name that is not a setting, with the closest setting's name.

    Case-insensitive, as the settings themselves are read; each name once, sorted."""
    known = setting_names()
    # Compared without the shared prefix, which would make every name look alike (DATATHREAD_XYZZY
    # "close to" DATATHREAD_HOME); so DATATHREAD_SLACK_BOT_TOKEN finds SLACK_BOT_TOKEN.
    by_stem = {known_name.removeprefix(PREFIX): known_name for known_name in sorted(known)}
    out = []
    for name in sorted(set(names)):
        upper = name.upper()
        if upper in known or upper in NOT_SETTINGS or upper.startswith(TEST_HOOK_PREFIX):
            continue
        if not upper.startswith(PREFIX):
            if near := _near_miss(upper, known):  # SLACK_SIGNNG_SECRET: ours, misspelled
                out.append(f"{name} is not a setting datathread reads (did you mean {near}?); it is ignored.")
            continue
        close = get_close_matches(upper.removeprefix(PREFIX), list(by_stem), n=1)
        hint = f" (did you mean {by_stem[close[0]]}?)" if close else ""
        out.append(f"{name} is not a datathread setting{hint}; it is ignored.")
    return out


def _near_miss(upper: str, known: frozenset[str]) -> str | None:
    """The setting (not `DATATHREAD_*`: SLACK_, MICROSOFT_, ANTHROPIC_, …) that `upper` is a typo of:
    same family prefix, and nearly the same name — another program's SLACK_WEBHOOK_URL is not one."""
    family = upper.split("_", 1)[0] + "_"
    if family == "_":
        return None
    ours = sorted(k for k in known if k.startswith(family) and not k.startswith(PREFIX))
    close = get_close_matches(upper, ours, n=1, cutoff=0.9)
    return close[0] if close else None


def _env_texts(env_file: object) -> Iterator[tuple[Path, str]]:
    """Each `.env` file settings are read from, with its text, when it is there and readable (an
    unreadable one is for `load_settings` to report, not for a warning)."""
    files = env_file if isinstance(env_file, list | tuple) else [env_file]
    for path in (Path(f) for f in files if f is not None):
        try:
            if path.is_file():
                yield path, path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue


def unparsable_lines(env_file: object = Settings.model_config.get("env_file")) -> list[str]:
    """One sentence per line of the `.env` file(s) that is not NAME=value (python-dotenv skips it and
    logs "could not parse statement starting at line 2" — once per reading, without the file's name)."""
    from dotenv.parser import parse_stream

    return [
        f"{path} line {binding.original.line} is not NAME=value; it is ignored."
        for path, text in _env_texts(env_file)
        for binding in parse_stream(io.StringIO(text))
        # `"OOPS=` is a binding to python-dotenv, of a name no program can read: a typo all the same
        if binding.error or (binding.key is not None and not VARIABLE_NAME.fullmatch(binding.key))
    ]


def names_given(env_file: object = Settings.model_config.get("env_file")) -> set[str]:
    """The names in the environment and in the readable `.env` file(s) settings are read from."""
    from dotenv import dotenv_values

    names = set(os.environ)
    for _, text in _env_texts(env_file):
        names |= {name for name in dotenv_values(stream=io.StringIO(text)) if name}
    return names
