"""Which numbers an answer writes that no number the thread gave the model stands for.

Its own module because reading numbers as people write them (grouping, decimal marks, scales,
conventions of other languages) is a concern of its own, apart from gathering a receipt's fields;
`core/receipt.py` calls `unsupported_numbers` and shows what it returns.

The check is deliberately simple, and its limits are these: it compares the numbers written in the
answer with every number the thread gave the model (its questions, and what its steps returned,
earlier turns' included), allowing for rounding, thousands separators and decimal marks as English,
German or French answers write them (58,665 · 58.665 · 58 665; 12.11 · 12,11: an answer's numbers are
read by the convention they give away, and one that gives none may be read either way, except that a
comma before exactly three digits groups), percent and thousand/million/billion scales. It ignores
small integers (0–10: "top 3", list numbers), years and parts of dates and times (not a time written
14.30, nor Swiss 58'665 grouping). It cannot tell a right number from a coincidentally equal one, and
it marks honest arithmetic the model did itself (a sum of two results) — which is the point: such
numbers should come from a query.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable

# A number as people write it: 336,776 · 12.5 · -3 · 45% · 1.2M · 3.4 million, and as German, French
# or Swiss answers do: 58.665 · 12,11 · 58 665 (a space, no-break or narrow no-break space). Not part of
# a word, an identifier, a date (2013-01-01), a time (14:02) or a version (1.2.3).
# Markdown's underscores (`_40,000_`, but not an identifier's: `delay_15`) and a unit after a slash
# (`12,500/month`) do not hide one; a number never stops inside another (`$12,500/month` was "12").
_WRITTEN = re.compile(
    r"(?<![.:/-])(?<![^\W_])(?<![^\W_]_)(?P<sign>[-−])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?:\.\d{3})+(?:,\d+)?"
    r"|\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?:[.,]\d+)?|\d+(?:[.,]\d+)?)"
    r"(?:\s?(?P<scale>%|percent\b|[kKMB]\b|bn\b|mn\b|thousand\b|million\b|billion\b))?"
    r"(?![^\W_]|_[^\W_]|:|/\d|[.,-]\d)"
)
# Each way to read a written number, as (pattern, thousands separators, decimal mark): "58.665" is
# 58665 in German and 58.665 in English; "1,234" is 1234 or 1.234. Which ways count depends on how the
# answer writes its numbers (`_convention`); a number stands if a reading that counts does.
_SPACES = " \u00a0\u202f"
_DOT_READINGS = (
    (re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?"), ",", "."),
    (re.compile(r"\d+(?:\.\d+)?"), "", "."),
    (re.compile(r"\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?:\.\d+)?"), _SPACES, "."),
)
_COMMA_READINGS = (
    (re.compile(r"\d{1,3}(?:\.\d{3})+(?:,\d+)?"), ".", ","),
    (re.compile(r"\d+(?:,\d+)?"), "", ","),
    (re.compile(r"\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?:,\d+)?"), _SPACES, ","),
)
# In an answer that gives its convention away nowhere, a comma before exactly three digits groups.
_COMMA_DECIMAL_NOT_THREE = (re.compile(r"\d+(?:,(?:\d{1,2}|\d{4,}))?"), "", ",")
# "3,4" is as likely two small numbers side by side as a decimal: it gives nothing away.
_SMALL_PAIR = re.compile(r"(?:10|\d),(?:10|\d)")
# What gives an answer's convention away (in its numbers only: a date, 15.03.2024, gives nothing): a decimal that is not three digits (12.5 · 12,11), a group
# then a decimal (1,234.5 · 1.234,5), two groups (1,234,567 · 1.234.567).
_DOT_SIGNS = re.compile(r"\d\.\d{1,2}(?!\d)|\d\.\d{4,}|\d,\d{3}\.\d|\d,\d{3},\d{3}")
_COMMA_SIGNS = re.compile(r"\d,\d{1,2}(?!\d)|\d,\d{4,}|\d\.\d{3},\d|\d\.\d{3}\.\d{3}")
_LIST = re.compile(r"[, \u00a0\u202f]")  # between numbers side by side: "3,4", "10 200"
# Every number in machine output, however it is separated (CSV commas included).
_RAW = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SCALES = {
    "k": 1e3,
    "thousand": 1e3,
    "M": 1e6,
    "mn": 1e6,
    "million": 1e6,
    "B": 1e9,
    "bn": 1e9,
    "billion": 1e9,
}


def unsupported_numbers(answer: str, evidence: Iterable[str]) -> tuple[str, ...]:
    """The numbers written in `answer` that match no number in `evidence` (see the module's limits)."""
    known = _raw_numbers(evidence)
    readings = _convention(answer)
    missing: list[str] = []
    for match in _WRITTEN.finditer(answer):
        text = match.group(0).strip()
        number, scale = match.group("num"), match.group("scale") or ""
        if _stands(number, scale, known, readings):
            continue
        if not scale and _side_by_side(number, known, readings):
            continue
        if text not in missing:
            missing.append(text)
    return tuple(missing)


def _convention(answer: str) -> tuple:
    """The readings an answer's numbers may have. One that writes 12.5 or 1,234.5 is read the English
    way, one that writes 12,5 or 1.234,5 the German or French way; one that gives nothing away either,
    except that a comma before exactly three digits is a thousands separator then (a made-up "12,500
    flights" must not stand on an average of 12.5)."""
    numbers = [m.group("num") for m in _WRITTEN.finditer(answer)]  # not dates, times, addresses
    dot = any(_DOT_SIGNS.search(n) for n in numbers)
    comma = any(_COMMA_SIGNS.search(n) and not _SMALL_PAIR.fullmatch(n) for n in numbers)
    if dot != comma:
        return _DOT_READINGS if dot else _COMMA_READINGS
    return _DOT_READINGS + _COMMA_READINGS[:1] + (_COMMA_DECIMAL_NOT_THREE,) + _COMMA_READINGS[2:]


def _side_by_side(number: str, known: list[float], readings: tuple) -> bool:
    """Whether a number is rather several written side by side, each standing: "columns 3,4" (by a
    comma only numbers too small to judge: 12,5 is a decimal), "top 10 200-mile routes"."""
    pieces = _LIST.split(number)
    if len(pieces) < 2 or not all(p.isdigit() for p in pieces):
        return False
    if "," in number:
        return all(_ignored(p, float(p), "") for p in pieces)
    return all(_stands(p, "", known, readings) for p in pieces)


def _stands(number: str, scale: str, known: list[float], readings: tuple) -> bool:
    """Whether a written number is too common to judge, or one of its `readings` is in `known`."""
    for pattern, thousands, mark in readings:
        if not pattern.fullmatch(number):
            continue
        whole, _, decimals = number.translate({ord(c): None for c in thousands}).partition(mark)
        value = float(f"{whole}.{decimals}" if decimals else whole)
        if _ignored(number, value, scale) or _supported(value, len(decimals), scale, known):
            return True
    return False


def _raw_numbers(evidence: Iterable[str]) -> list[float]:
    values: set[float] = set()
    for text in evidence:
        for token in _RAW.findall(text):
            values.add(abs(float(token)))
        for token in re.findall(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):  # 336,776 as one number too
            values.add(float(token.replace(",", "")))
    return sorted(v for v in values if math.isfinite(v))


def _ignored(number: str, value: float, scale: str) -> bool:
    if scale:
        return False
    if not number.isdigit():
        return False
    return value <= 10 or 1900 <= value <= 2100  # "top 3", list items, "one of 2 origins"; a year


def _supported(value: float, decimals: int, scale: str, known: list[float]) -> bool:
    unit = 10.0**-decimals  # the answer's precision as written: 12.3 stands for [12.25, 12.35)
    if scale in ("%", "percent"):
        targets = [(value, unit), (value / 100, unit / 100)]  # 45.2% from 45.2 or from 0.452
    elif scale:
        factor = _SCALES[scale]
        targets = [(value * factor, unit * factor)]
    else:
        targets = [(value, unit)]
    for target, width in targets:
        slack = width / 2 + 1e-9 * max(1.0, target)
        i = bisect.bisect_left(known, target - slack)
        if i < len(known) and known[i] <= target + slack:
            return True
    return False
