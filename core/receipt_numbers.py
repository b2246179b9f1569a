"""Which numbers an answer writes that no number the thread gave the model stands for.

Its own module because reading numbers as people write them (grouping, decimal marks, scales,
conventions of other languages) is a concern of its own, apart from gathering a receipt's fields;
`core/receipt.py` calls `unsupported_numbers` and shows what it returns.

The check is deliberately simple, and its limits are these: it compares the numbers written in the
answer with every number the thread gave the model (its questions, and what its steps returned, earlier
turns' included), allowing for rounding, thousands separators and decimal marks as English, German or
French answers write them (58,665 · 58.665 · 58 665; 12.11 · 12,11: an answer's numbers are read by the
convention they give away, and one that gives none may be read either way, except that a comma before
exactly three digits groups), percent, thousand/million/billion scales and powers of ten (3.7e15,
3.7×10^15). It compares exactly, in decimals read from the text (floats let an id past 2**53 stand on
its neighbour, and made-up cents on a large amount): a written number stands on a value that, rounded
to the precision written, is it, and one written with a minus sign stands only on a negative value
(without a sign, on either: "fell by 0.25" on -0.25). It ignores small integers (0–10: "top 3", list
numbers), years and parts of dates and times (not a time written 14.30, nor Swiss 58'665 grouping). It
cannot tell a right number from a coincidentally equal one, and it marks honest arithmetic the model
did itself (a sum of two results) — which is the point: such numbers should come from a query.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, InvalidOperation

# A number as people write it: 336,776 · 12.5 · -3 · 45% · 1.2M · 3.4 million, and as German, French
# or Swiss answers do: 58.665 · 12,11 · 58 665 (a space, no-break or narrow no-break space). Not part of
# a word, an identifier, a date (2013-01-01), a time (14:02) or a version (1.2.3).
# Markdown's underscores (`_40,000_`, but not an identifier's: `delay_15`) and a unit after a slash
# (`12,500/month`) do not hide one; a number never stops inside another (`$12,500/month` was "12"),
# nor starts inside one (the range `54,173-58,665` is not read, and was "665").
# A power of ten is part of the number: 3.7e15 · 2.5E-7 · 3.7 × 10^15 · 3.7x10¹⁵ · 10^6 (not 2^10, and
# not inside a word or a hexadecimal: `0x1e5`, `3e15a0`; "3e" alone is a French ordinal, not a power).
_POWER = (
    r"(?:[eE](?P<e>[-+−]?\d{1,4})"
    r"|(?:(?P<times>\s?[×x*·]\s?10)|(?<=(?<![\d.,])10))"
    r"(?:\^(?P<pow>[-+−]?\d{1,4})|(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)))"
)
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺−", "0123456789-+-")
_WRITTEN = re.compile(
    r"(?<![.:/-])(?<!\d,)(?<![^\W_])(?<![^\W_]_)(?P<sign>[-−])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?:\.\d{3})+(?:,\d+)?"
    r"|\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?:[.,]\d+)?|\d+(?:[.,]\d+)?)"
    rf"{_POWER}?"
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
_RAW = re.compile(r"[-−]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_GROUPED = re.compile(r"[-−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 336,776 as one number too
# A question's 3.7 × 10^15 or 10⁶, as the answer may repeat it. Both starts are anchored: unanchored,
# the mantissa was tried from every digit of a run, each try reading to its end (quadratic: one
# question or step output of 20,000 digits held the bot's event loop 11.5 s).
_RAW_POWER = re.compile(
    r"(?:(?<![\d.])([-−]?\d+(?:\.\d+)?)\s?[×x*·]\s?)?(?<!\d)10"
    r"(?:\^([-+−]?\d{1,4})|([⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))"
)
_SCALES = {  # as powers of ten
    "k": 3,
    "K": 3,
    "thousand": 3,
    "M": 6,
    "mn": 6,
    "million": 6,
    "B": 9,
    "bn": 9,
    "billion": 9,
}


def unsupported_numbers(answer: str, evidence: Iterable[str]) -> tuple[str, ...]:
    """The numbers written in `answer` that match no number in `evidence` (see the module's limits)."""
    known = _raw_numbers(evidence)
    readings = _convention(answer)
    missing: list[str] = []
    for match in _WRITTEN.finditer(answer):
        text = match.group(0).strip()
        number, scale, power = match.group("num"), match.group("scale") or "", _power(match)
        if (match.group("pow") or match.group("sup")) and not match.group("times"):
            number = "1"  # a bare 10^6 is 1 × 10^6
        if _stands(number, scale, known, readings, power=power, negative=bool(match.group("sign"))):
            continue
        if not scale and power is None and _side_by_side(number, known, readings):
            continue
        if text not in missing:
            missing.append(text)
    return tuple(missing)


def _power(match: re.Match) -> int | None:
    """The power of ten a written number carries, if it carries one."""
    written = match.group("e") or match.group("pow") or match.group("sup")
    return int(written.translate(_SUPERSCRIPTS)) if written else None


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


def _side_by_side(number: str, known: _Known, readings: tuple) -> bool:
    """Whether a number is rather several written side by side, each standing: "columns 3,4" (by a
    comma only numbers too small to judge: 12,5 is a decimal), "top 10 200-mile routes"."""
    pieces = _LIST.split(number)
    if len(pieces) < 2 or not all(p.isdigit() for p in pieces):
        return False
    if "," in number:
        return all(_ignored(p, Decimal(p), "") for p in pieces)
    return all(_stands(p, "", known, readings) for p in pieces)


def _stands(
    number: str,
    scale: str,
    known: _Known,
    readings: tuple,
    *,
    power: int | None = None,
    negative: bool = False,
) -> bool:
    """Whether a written number is too common to judge, or one of its `readings` is in `known`."""
    for pattern, thousands, mark in readings:
        if not pattern.fullmatch(number):
            continue
        whole, _, decimals = number.translate({ord(c): None for c in thousands}).partition(mark)
        value = Decimal(f"{whole}.{decimals}" if decimals else whole)
        if power is None and _ignored(number, value, scale):
            return True
        if _supported(value, len(decimals), scale, known, power=power or 0, negative=negative):
            return True
    return False


@dataclass(frozen=True)
class _Known:
    """The evidence's numbers as written, in the order of their nearest floats. Sorting and searching
    floats is quick (sorting 400,000 decimals took seconds), and a float never orders two numbers the
    wrong way round, only sometimes ties them (9007199254740992 and …993): a float window finds the
    candidates, and their text, read as a decimal, is judged exactly."""

    texts: list[str]
    near: list[float]

    def any_within(self, low: Decimal, high: Decimal) -> bool:
        i = bisect.bisect_left(self.near, float(low))
        while i < len(self.near) and self.near[i] <= float(high):
            with contextlib.suppress(InvalidOperation):  # an exponent past what Decimal holds: 1e99…9
                if low <= Decimal(self.texts[i]) <= high:
                    return True
            i += 1
        return False


def _raw_numbers(evidence: Iterable[str]) -> _Known:
    """Every number in `evidence`, kept as its text writes it (a float would make 9007199254740993
    and 9007199254740992 one number)."""
    tokens = {token.replace("−", "-") for text in evidence for token in _tokens(text)}
    texts = sorted(tokens, key=float)
    return _Known(texts, list(map(float, texts)))


def _tokens(text: str) -> Iterator[str]:
    yield from _RAW.findall(text)
    yield from (grouped.replace(",", "") for grouped in _GROUPED.findall(text))
    for mantissa, power, superscript in _RAW_POWER.findall(text):
        yield f"{mantissa or 1}e{(power or superscript).translate(_SUPERSCRIPTS)}"


def _ignored(number: str, value: Decimal, scale: str) -> bool:
    if scale:
        return False
    if not number.isdigit():
        return False
    return value <= 10 or 1900 <= value <= 2100  # "top 3", list items, "one of 2 origins"; a year


def _supported(
    value: Decimal, decimals: int, scale: str, known: _Known, *, power: int, negative: bool
) -> bool:
    """Whether a value in `known`, rounded to the precision written, is the written number: 12.3 stands
    on [12.25, 12.35] (a tie rounds either way), 12,345,678,901,234,567,890.12 on no other cents."""
    # Exact arithmetic: the context holds every digit written, one more (the half unit's) and a carry;
    # were it ever short, Inexact raises and the receipt goes without the check rather than guess.
    digits = len(value.as_tuple().digits) + 3
    exact = Context(prec=digits, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact])
    half = Decimal(5).scaleb(-decimals - 1, exact)
    shifts = [0, -2] if scale in ("%", "percent") else [_SCALES[scale] if scale else 0]
    for shift in (s + power for s in shifts):  # 45.2% from 45.2 or 0.452; 58.7k from 58,700
        target, width = value.scaleb(shift, exact), half.scaleb(shift, exact)
        low, high = exact.subtract(target, width), exact.add(target, width)
        # Written with a minus, only a negative value; without a sign, either ("fell by 0.25": -0.25).
        if known.any_within(exact.minus(high), exact.minus(low)):
            return True
        if not negative and known.any_within(low, high):
            return True
    return False
