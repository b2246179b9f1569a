"""How a bad setting is said: one sentence naming the variable, its value unless it is a secret, and
what is wrong with it — pydantic's own report is a paragraph of its internals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import get_args

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from core.redact import without_login


def is_secret(field: FieldInfo) -> bool:
    """A setting held as `SecretStr` (optional or not, checked by a validator or not): stripped of
    surrounding space when read, and never echoed in an error."""
    return any(kind is SecretStr for kind in _kinds(field.annotation))


def _kinds(annotation: object) -> Iterator[object]:
    """The annotation and everything inside it: `Annotated[SecretStr, …] | None` holds SecretStr."""
    yield annotation
    for inner in get_args(annotation):
        yield from _kinds(inner)


HIDDEN_VALUES = ("REDIS_URL",)  # may carry a password: never echoed


def _secret_names(fields: dict[str, FieldInfo]) -> set[str]:
    """The variables of secret settings (SecretStr): a bad value of one is never echoed."""
    return {
        str(name)
        for key, f in fields.items()
        if is_secret(f)
        for name in (key, *getattr(f.validation_alias, "choices", ()))
    }


def describe_setting_error(error: dict, fields: dict[str, FieldInfo]) -> str:
    """One sentence naming the variable, its value (unless secret) and what is wrong with it; `fields`
    are the Settings model's."""
    where = ".".join(str(p) for p in error.get("loc", ()))
    field = fields.get(where)  # a default that fails is reported by field name
    if field is not None and field.validation_alias is not None:
        where = str(field.validation_alias.choices[0])
    message = str(error.get("msg", "is invalid")).removeprefix("Value error, ").rstrip(".")
    if not where:  # a rule across settings: its message names the variables itself
        return f"{message}."
    value = error.get("input")
    hidden = where in HIDDEN_VALUES or where in _secret_names(fields)
    if isinstance(value, str):
        value = without_login(value)  # a URL's password is no more for the screen than a secret is
    shown = f"={value}" if isinstance(value, str | int | float | Path) and not hidden else ""
    if shown and field is not None and value == field.default:  # not set: which value failed, and why
        shown = f" (default {value if not isinstance(value, Path) or value.is_absolute() else f'./{value}'})"
    if error.get("type") == "value_error":
        return f"{where}{shown} {message.removeprefix(repr(value) + ' ')}."
    return f"Invalid setting {where}{shown}: {message}."
