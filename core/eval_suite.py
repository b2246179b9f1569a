"""Evaluation suites: the YAML format, its validation, and the demo suite shipped in the package.

A suite is a top-level `questions:` list; each item has an `id`, the `question` as a person would ask
it, and the expected result as `gold_sql` (run on the same warehouse) or `expected` values. Scoring
rules (`ordered`, `order_by`, `tolerance`, `extra_columns`, `distinct`) may be set per question or once
under `defaults:`. Every problem with a suite becomes one `SuiteError` sentence naming the question.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.wording import os_words

DEMO_SUITE = Path(__file__).resolve().parent / "eval_suites" / "demo.yaml"

Scalar = str | int | float | bool | None


class SuiteError(ValueError):
    """The suite cannot be run; the message is one sentence for the person who wrote it."""


class ScoringRules(BaseModel):
    """How a question's result is compared with the gold result (see docs/EVAL.md, "Scoring")."""

    model_config = ConfigDict(extra="forbid")

    ordered: bool = False  # rows must come in the gold order
    order_by: list[str] = Field(default_factory=list)  # with `ordered`: rows tied on these may swap
    tolerance: float = Field(1e-3, ge=0, lt=1)  # relative tolerance for numbers
    extra_columns: bool = True  # the bot may return columns beyond the gold ones
    distinct: bool = False  # compare as sets (duplicate rows ignored) instead of multisets


class EvalQuestion(ScoringRules):
    """One question of a suite with its expected result. Unknown keys are kept and reported, not fatal."""

    model_config = ConfigDict(extra="allow")

    id: str | int
    question: str = Field(min_length=1)
    gold_sql: str | None = None
    expected: Any = None
    level: str = ""  # free label (easy/medium/hard) for the report
    notes: str = ""

    @model_validator(mode="after")
    def _one_expectation(self) -> EvalQuestion:
        if (self.gold_sql is None) == (self.expected is None):
            raise ValueError("give exactly one of gold_sql or expected")
        if self.order_by and not self.ordered:
            raise ValueError("order_by only applies with ordered: true")
        return self

    @field_validator("id")
    @classmethod
    def _id_not_blank(cls, value: str | int) -> str | int:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("expected")
    @classmethod
    def _expected_shape(cls, value: Any) -> Any:
        if value is not None:
            expected_rows(value)  # raises ValueError with a reason
        return value

    def rules(self) -> ScoringRules:
        return ScoringRules.model_validate(self.model_dump(include=set(ScoringRules.model_fields)))

    @property
    def key(self) -> str:
        """The id as text: report entries and resumes match on it."""
        return str(self.id)


class EvalSuite(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = ""
    description: str = ""
    defaults: dict[str, Any] = Field(default_factory=dict)
    questions: list[EvalQuestion] = Field(min_length=1)

    @field_validator("questions")
    @classmethod
    def _unique_ids(cls, questions: list[EvalQuestion]) -> list[EvalQuestion]:
        seen: set[str] = set()
        for q in questions:
            if q.key in seen:
                raise ValueError(f"the id {q.id!r} is used twice")
            seen.add(q.key)
        return questions

    def warnings(self) -> list[str]:
        """Keys the runner does not know (a typo like `tolerence` would otherwise pass silently)."""
        return [
            f"question {q.id!r}: unknown key {key!r} ignored"
            for q in self.questions
            for key in sorted(q.model_extra or {})
        ]


def expected_rows(value: Any) -> tuple[list[str], list[tuple]]:
    """`expected` as (column names, rows): a scalar is one cell, a list of scalars one column, a list of
    lists rows, a list of mappings rows with named columns (names are for people; matching is by value)."""
    if not isinstance(value, list):
        if isinstance(value, dict):
            raise ValueError("expected must be a value or a list, not a mapping")
        return ["value"], [(value,)]
    if not value:
        return [], []
    if all(isinstance(v, dict) for v in value):
        columns = list(value[0])
        if any(list(v) != columns for v in value):
            raise ValueError("every row of expected must have the same keys in the same order")
        return columns, [tuple(v.values()) for v in value]
    if all(isinstance(v, list) for v in value):
        width = len(value[0])
        if any(len(v) != width for v in value):
            raise ValueError("every row of expected must have the same number of values")
        return [f"c{i + 1}" for i in range(width)], [tuple(v) for v in value]
    if any(isinstance(v, list | dict) for v in value):
        raise ValueError("expected mixes rows and single values")
    return ["value"], [(v,) for v in value]


def load_suite(path: Path) -> EvalSuite:
    """Read and validate a suite file; every problem is a `SuiteError` with one sentence."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"There is no suite file at {path}.") from None
    except OSError as exc:  # a folder, no permission: the reason in words, not "[Errno 21] …"
        raise SuiteError(f"Cannot read the suite {path}: {os_words(exc) or type(exc).__name__}.") from None
    except UnicodeDecodeError:
        raise SuiteError(f"Cannot read the suite {path}: it is not UTF-8 text.") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SuiteError(f"The suite {path} is not valid YAML{_yaml_problem(text, exc)}.") from None
    return parse_suite(raw, source=str(path))


def _yaml_problem(text: str, exc: yaml.YAMLError) -> str:
    """Where a YAML error starts, for the person who wrote the suite (PyYAML's own words are parser
    jargon). PyYAML marks where it gave up, which for an unclosed quote is past the end of the file
    ("line 5" of a 4-line suite) or the next quote, lines below; the quote is what to point at."""
    problem, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    if problem is None:
        return ""
    if context is not None and "quoted scalar" in (getattr(exc, "context", None) or ""):
        return f": the quote opened at line {context.line + 1} is never closed"
    line = min(problem.line + 1, max(1, len(text.splitlines())))  # at the end: the last line, not past it
    opened = _quote_closed_at(text, line, before=problem.index)
    if opened is not None:
        return (
            f" at line {line}: the quote opened at line {opened} only closes there,"
            f" so line {opened} lacks its closing quote"
        )
    tab = " (a tab: YAML indents with spaces)" if "'\\t'" in (getattr(exc, "problem", None) or "") else ""
    return f" at line {line}{tab}"


def _quote_closed_at(text: str, line: int, *, before: int) -> int | None:
    """The line where a quoted value that closes on `line` (1-based), just before offset `before`,
    opened, when that is an earlier line — in a suite, almost always a quote left open that the next
    quote closed — or None."""
    last = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.end_mark.index > before:
                break
            last = token
    except yaml.YAMLError:
        pass
    if not isinstance(last, yaml.ScalarToken) or last.style not in ("'", '"'):
        return None
    opened, closed = last.start_mark.line + 1, last.end_mark.line + 1
    return opened if opened < closed == line else None


def parse_suite(raw: Any, *, source: str = "the suite") -> EvalSuite:
    """Validate already-parsed YAML; suite-level `defaults` fill the questions' unset rules."""
    if not isinstance(raw, dict) or "questions" not in raw:
        raise SuiteError(f"{source} needs a top-level `questions:` list.")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - set(ScoringRules.model_fields):
        allowed = ", ".join(ScoringRules.model_fields)
        raise SuiteError(f"`defaults:` in {source} may only set {allowed}.")
    items = raw["questions"]
    if isinstance(items, list):
        items = [{**defaults, **q} if isinstance(q, dict) else q for q in items]
    try:
        return EvalSuite.model_validate({**raw, "questions": items})
    except ValidationError as exc:
        raise SuiteError(_first_problem(exc, raw, source)) from None


# pydantic's error types in a suite author's words: its own messages ("Input should be greater than or
# equal to 0") read as a second sentence glued to the key ("tolerance Input should be …").
MUST = {
    "greater_than_equal": "must be {ge:g} or more",
    "greater_than": "must be more than {gt:g}",
    "less_than_equal": "must be {le:g} or less",
    "less_than": "must be less than {lt:g}",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "string_type": "must be text",
    "string_too_short": "must not be empty",
    "list_type": "must be a list",
    "dict_type": "must be a mapping (`key: value` lines)",
    "model_type": "must be a mapping (`key: value` lines)",
}
UNION_MEMBERS = {"str", "int", "float", "bool"}  # pydantic adds the member tried to a union's loc: id.str


def _first_problem(exc: ValidationError, raw: dict, source: str) -> str:
    """The first validation error as a sentence that names the question it is about and the key."""
    errors = exc.errors()
    error = errors[0]
    loc = list(error["loc"])
    where, item = source, None
    if len(loc) >= 2 and loc[0] == "questions" and isinstance(loc[1], int):
        item = raw["questions"][loc[1]] if loc[1] < len(raw.get("questions") or []) else None
        name = item.get("id") if isinstance(item, dict) else None
        where = f"question {loc[1] + 1}" + (f" ({name!r})" if name else "") + f" of {source}"
        loc = loc[2:]
    if loc and loc[-1] in UNION_MEMBERS:  # every member failed: what any of them would take
        tried = [e for e in errors if e["loc"][:-1] == error["loc"][:-1] and e["loc"][-1] in UNION_MEMBERS]
        loc, message = loc[:-1], " or ".join(_must(e).removeprefix("must be ") for e in tried)
        message = message if message.startswith("must") else f"must be {message}"
    else:
        message = _must(error)
    field = " ".join(f"item {p + 1}" if isinstance(p, int) else str(p) for p in loc)
    if where != source and loc and loc[0] not in (item or {}) and loc[0] in (raw.get("defaults") or {}):
        field += " (under `defaults:`)"  # the question inherited it: that is where to change it
    if error["type"] == "value_error" and not message.startswith("must"):
        field = ""  # our validators' sentences name what they are about ("the id 'a' is used twice")
    elif loc == ["questions"] and error["type"] == "too_short":  # pydantic's "List should have at least…"
        field, message = "", "there are no questions: add at least one under `questions:`"
    elif not field:
        field = "it"  # the question itself: "it must be a mapping"
    return f"In {where}: {field + ' ' if field else ''}{message}.".replace("..", ".")


def _must(error: dict) -> str:
    """One pydantic error as the rest of a sentence that starts with the key."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return "is missing"
    if kind == "extra_forbidden":
        return "is not a known key"
    if kind in MUST:
        return MUST[kind].format(**ctx)
    message = error["msg"].removeprefix("Value error, ")
    return re.sub(r"^(Input|Value|String|List) should ", "must ", message)  # a type not in MUST yet
