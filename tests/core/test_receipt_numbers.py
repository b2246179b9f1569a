"""The numbers check: which numbers an answer writes that no number the thread gave the model stands for."""

from __future__ import annotations

import os

import pytest

from core.receipt_numbers import unsupported_numbers

PREVIEW = "rows: 3\ncarrier,n,share\nUA,58665,0.1742\nB6,54635,0.16223\nEV,54173,0.16085\n"


@pytest.mark.parametrize(
    "answer",
    [
        "UA flew the most flights: 58,665.",  # thousands separator
        "UA flew 58665 flights, B6 54635.",
        "UA's share is 17.4%.",  # a fraction shown as a percent, rounded
        "UA's share is 0.17.",  # rounded to the answer's precision
        "UA flew about 58.7k flights.",  # a scale
        "UA flew about 58.7K flights.",  # a capital K raised KeyError and the check was lost
        "The top 3 carriers in 2013 were UA, B6 and EV.",  # small integers and years are not judged
        "Between 2013-01-01 and 14:05 nothing else ran.",  # parts of dates and times are not judged
        "| carrier | n |\n|---|--:|\n| UA | 58,665 |\n| EV | 54,173 |",  # a Markdown table
        "UA flew 58,665/year.",  # a unit after a slash: "58,665/year" was flagged as "58"
        "Column `n_58665` and dep_delay_15 are names, not figures.",  # an identifier's digits
    ],
)
def test_numbers_taken_from_the_steps_are_supported(answer):
    assert unsupported_numbers(answer, [PREVIEW]) == ()


@pytest.mark.parametrize(
    "answer",
    [
        "UA flog 58.665 Flüge; die mittlere Verspätung war 12,11 Minuten.",  # German
        "UA a effectué 58 665 vols, avec 12,11 minutes de retard en moyenne.",  # French, a space
        "UA a effectué 58\u00a0665 vols ; B6 54\u202f635.",  # no-break and narrow no-break spaces
        "Der Anteil von UA ist 17,4 %.",  # a decimal comma before a percent
        "Spalten 3,4 und 5,6 der Tabelle.",  # numbers side by side, each too small to judge
        "UA a effectué 58 665,5 km.",  # grouped by spaces with a decimal comma: it raised ValueError
        "UA flew 1 234.5 km; B6 54,635 flights.",  # grouped by a space with a decimal point
        "Die mittlere Verspätung war 12,5 Minuten; UA flog 58.665 Flüge.",
        "Am 15.03.2024 flog UA 58.665 Flüge.",  # a date gives nothing away (it made 58.665 a decimal)
        "Columns 3,4 had 58,665 rows.",  # two small numbers side by side are no decimal comma
    ],
)
def test_numbers_written_the_german_or_french_way_are_read_so(answer):
    """A German answer's "58.665 Flüge … 12,11 Minuten" was marked "58.665, 11" (a decimal 58.665, and
    only the tail of 12,11); a French one's "58 665 … 12,11" was "58, 665, 11"."""
    evidence = [PREVIEW, "avg_delay\n12.11\n", "km\n58665.5\n1234.5\n", "mean\n12.5\n"]
    assert unsupported_numbers(answer, evidence) == ()


@pytest.mark.parametrize(
    ("answer", "flagged"),
    [
        # a made-up English number must not stand on another reading of it (an average of 12.5)
        ("UA flew 12,500 flights; the average delay was 12.5 minutes.", ("12,500",)),
        ("UA flew 12,500 flights.", ("12,500",)),  # nothing gives the convention away
        ("UA flew 1.250 flights; the average delay was 12.5 minutes.", ("1.250",)),  # English: 1.25
        ("UA flog 61.000 Flüge.", ("61.000",)),
        ("Die Verspätung war 12,7 Minuten.", ("12,7",)),
        ("UA a effectué 61 000 vols.", ("61 000",)),
    ],
)
def test_numbers_written_the_german_or_french_way_are_still_judged(answer, flagged):
    assert unsupported_numbers(answer, [PREVIEW, "avg_delay\n12.11\n", "mean\n12.5\n1250\n"]) == flagged


@pytest.mark.parametrize(
    ("answer", "flagged"),
    [
        ("UA flew 61,000 flights.", ("61,000",)),  # remembered, not queried
        ("Together UA and B6 flew 113,300 flights.", ("113,300",)),  # the model's own arithmetic
        ("UA's share is 21%.", ("21%",)),
        ("UA flew 1.2 million flights and B6 54635.", ("1.2 million",)),
        ("Delays averaged 12.5 minutes, 12.5 again.", ("12.5",)),  # reported once
        ("UA flew _61,000_ flights.", ("61,000",)),  # in italics: it passed unjudged
        ("UA flew __61,000__ flights.", ("61,000",)),
        ("UA flew 61,000/year.", ("61,000",)),  # whole, not "61"
        ("UA flew 1.2mn flights.", ("1.2mn",)),
    ],
)
def test_numbers_no_step_produced_are_marked(answer, flagged):
    assert unsupported_numbers(answer, [PREVIEW]) == flagged


# Ids past 2**53, a NUMERIC(38, 9) amount and a tiny float, as a preview prints them.
EXACT = (
    "id,amount,tiny\n9223372036854775807,12345678901234567890.123456789,1e-12\n9007199254740993,12.345,0\n"
)


@pytest.mark.parametrize(
    "answer",
    [
        "The top ids are 9223372036854775807 and 9,007,199,254,740,993.",
        "The amount is 12,345,678,901,234,567,890.12.",  # rounded to cents
        "The amount is 12,345,678,901,234,567,890.1235.",
        "The smallest is 0.000000000001.",
        "The mean is 12.35, or 12.34 rounded half to even.",  # a tie rounds either way
    ],
)
def test_large_and_tiny_numbers_stand_on_exactly_what_was_returned(answer):
    assert unsupported_numbers(answer, [EXACT]) == ()


@pytest.mark.parametrize(
    ("answer", "flagged"),
    [
        # compared as floats with a slack of 1e-9 of the value (±9.2e9 near 2**63), these all passed
        ("The id is 9007199254740992.", ("9007199254740992",)),  # the float twin of …993
        ("The top id is 9223372036000000000.", ("9223372036000000000",)),
        ("The amount is 12,345,678,901,234,567,890.99.", ("12,345,678,901,234,567,890.99",)),
        ("The smallest is 0.000000000003.", ("0.000000000003",)),  # the slack never went below 1e-9
        ("The mean is 12.36.", ("12.36",)),
    ],
)
def test_made_up_digits_of_large_and_tiny_numbers_are_marked(answer, flagged):
    assert unsupported_numbers(answer, [EXACT]) == flagged


POWERS = "f,g,n\n1e+20,2.5e-07,1234567\n3.7e+15,1e-12,0.000123\n"


@pytest.mark.parametrize(
    "answer",
    [
        "f reached 1e20 and 1.0E20; g fell to 2.5e-7.",
        "f is 3.7 × 10^15, 3.7x10^15 or 3.7·10¹⁵; g is 2.5 × 10^−7 or 2.5·10⁻⁷.",
        "About 10^6 rows (1.23e6); the smallest g is 1.2e-4.",  # rounded to the mantissa written
        "Not powers: hash 3e15a0, hex 0x1e5, id abc1e5, v1.2.3, le 3e trimestre, 2^10, a 3 x 10 grid.",
    ],
)
def test_powers_of_ten_are_read_as_one_number(answer):
    assert unsupported_numbers(answer, [POWERS]) == ()


@pytest.mark.parametrize(
    ("answer", "flagged"),
    [
        # neither was read at all: "3.7e15" is no number to a reader that stops at the "e"
        ("The value is 3.7e15 and 2.5E-7.", ("3.7e15", "2.5E-7")),
        ("About 4 × 10^3 flights, 3.8e15 and 1e21.", ("4 × 10^3", "3.8e15", "1e21")),
    ],
)
def test_powers_of_ten_no_step_produced_are_marked(answer, flagged):
    assert unsupported_numbers(answer, [PREVIEW]) == flagged


def test_a_power_of_ten_in_the_question_stands():
    question = "Is the total about 3.7 × 10^15, or nearer 10⁶?"
    assert unsupported_numbers("Yes: 3.7 × 10^15, not 10⁶.", [question]) == ()


SIGNS = "share,change,n\n-0.25,-12.5,58665\n0.1,14.2,54173\n0.452,−3.5,1250\n"


@pytest.mark.parametrize(
    "answer",
    [
        "The share fell by 0.25 and ended at 0.1.",  # no sign written: a change of -0.25 stands
        "The share went from -0.25 to 0.1; the change from -12.5 to 14.2.",
        "It changed by −25%, then by −3.5.",  # U+2212 minus signs, in the evidence too
        "| share | change |\n|---|--:|\n| -0.25 | -12.5 |",
        "- 58,665 flights in a list; 54,173 – 58,665 a year; UTC-5; 2013-01-01.",
        "Between 54,173-58,665 flights a year.",  # a range is not read: its tail was "665"
        "From -3 to 4, then 5-10.",  # small integers, signed or not, are not judged
    ],
)
def test_a_written_minus_stands_on_a_negative_value_and_no_sign_on_either(answer):
    assert unsupported_numbers(answer, [SIGNS]) == ()


@pytest.mark.parametrize(
    ("answer", "flagged"),
    [
        # compared by absolute value, a flipped sign passed
        ("The share 0.25 became -0.1.", ("-0.1",)),
        ("The change was -45.2%.", ("-45.2%",)),
        ("The change was −14.2 minutes.", ("−14.2",)),
        ("UA flew -58,665 flights.", ("-58,665",)),
    ],
)
def test_a_flipped_sign_is_marked(answer, flagged):
    assert unsupported_numbers(answer, [SIGNS]) == flagged


# Each shape of a long run, in a question, a step's output or the answer: 200,000 characters. Reading
# one as a power of ten's mantissa from every digit was quadratic: 20,000 digits in one step output
# (`print('9'*20000)`) held the event loop 11.5 s, these minutes.
LONG_RUNS = """
import json, time
from core.receipt_numbers import unsupported_numbers
n = 200_000
runs = {"digits": "9" * n, "commas": "1," * (n // 2), "spaces": "1 " * (n // 2), "dots": "1." * (n // 2),
        "groups": "1" + ",111" * (n // 4) + ".5.5", "spaced groups": "1" + " 111" * (n // 4) + ".5.5",
        "powers": "10^" * (n // 3), "times": "9x" * (n // 2), "digits then a letter": "9" * n + "a"}
cases = [("evidence: " + name, "There were 12,345 flights.", ["q " + run]) for name, run in runs.items()]
cases += [("answer: " + name, runs[name], ["rows: 1\\nn\\n58665\\n"])
          for name in ("digits", "digits then a letter", "dots", "groups", "spaced groups")]
took = {}
for case, answer, evidence in cases:
    started = time.perf_counter()
    unsupported_numbers(answer, evidence)
    took[case] = time.perf_counter() - started
print(json.dumps(took))
"""


def test_long_runs_of_digits_or_separators_are_read_in_linear_time():
    """In a child process, killed if it hangs: each run takes well under a second (the bound leaves
    room for a loaded two-core host)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    try:
        child = subprocess.run(
            [sys.executable, "-c", LONG_RUNS],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading long runs took over 60 s")
    slow = {run: s for run, s in json.loads(child.stdout).items() if s >= 2.0}
    assert slow == {}
