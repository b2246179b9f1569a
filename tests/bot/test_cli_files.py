"""Files shared from the terminal: `datathread ask --file PATH` (in a real subprocess, once, then in
process) and `/file PATH` in `datathread chat`, against the scripted Messages API and a real sandbox.
A path that is no file to share is one sentence: for `ask` a bad argument (exit 2, no model call), for
`chat` a line, and the chat goes on."""

from __future__ import annotations

import os

import pytest

from core.file_intake import HEADER
from core.shared_files import over_total
from tests.fakes.anthropic_api import text, tool
from tests.fakes.cli import invoke, run

KEY = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456"}
SALES = b"region,amount\nnorth,10\nsouth,5\nnorth,7\neast,1\n"


def block_of(body: dict) -> str:
    (found,) = [b["text"] for b in body["messages"][-1]["content"] if b["text"].startswith(HEADER)]
    return found


def test_ask_with_files_by_spaced_tilde_and_undecodable_paths_answers_about_them(home, fake_model, tmp_path):
    folder = tmp_path / "my data"
    folder.mkdir()
    (folder / "q3 sales.csv").write_bytes(SALES)
    os.makedirs(tmp_path / "person" / "files")
    (tmp_path / "person" / "files" / "broken.parquet").write_bytes(b"no parquet here")
    with open(os.fsencode(folder) + b"/M\xfcnchen.csv", "wb") as f:  # a Latin-1 name: not UTF-8
        f.write(b"city,n\nMunich,3\n")
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT sum(amount) AS total FROM 'q3_sales.csv'"}),
        text("Total sales were 23."),
    )
    result = run(
        [
            "ask",
            "what were total sales?",
            "--file",
            str(folder / "q3 sales.csv"),
            "-f",
            str(folder / "M\udcfcnchen.csv"),  # argv's surrogate escape: the byte 0xFC
            "--file",
            "~/files/broken.parquet",  # quoted at a shell: ~ is the person's home all the same
        ],
        home,
        env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url, "HOME": str(tmp_path / "person")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Total sales were 23."
    block = block_of(fake_model.requests[0])
    assert (
        "- \"q3 sales.csv\" is in the workspace as 'q3_sales.csv' (46 bytes): query it by that name" in block
    )
    assert '  Rows: 4\n  Columns: "region" VARCHAR, "amount" BIGINT' in block
    assert "- \"München.csv\" is in the workspace as 'München.csv'" in block
    assert "as 'broken.parquet' (15 bytes), but it could not be read as PARQUET" in block
    assert not fake_model.last_tool_results(1)[0].get("is_error")
    assert "23" in fake_model.last_tool_results(1)[0]["content"]
    # the file not read is said to the person, on stderr with the receipt
    assert "I couldn't read `broken.parquet` as PARQUET: `" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        (None, b"", "error: There is no file {path}."),
        (
            "notes.pdf",
            b"%PDF",
            "error: notes.pdf: A .pdf file is not one I can read; I read csv, tsv, parquet, ",
        ),
        (
            "big.csv",
            b"a\n" + b"1\n" * 600_000,
            "error: big.csv: It is larger than the 1 MB I take from a shared file.",
        ),
        ("folder", None, "error: {path} is a folder: share the files in it one by one."),
    ],
)
def test_ask_with_a_path_that_is_no_file_to_share_is_a_bad_argument(
    name, content, said, home, fake_model, tmp_path
):
    path = tmp_path / (name or "missing.csv")
    if content is None:
        path.mkdir()
    elif name:
        path.write_bytes(content)
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url, "DATATHREAD_SHARED_FILE_MB": "1"}
    result = invoke(["ask", "what is in it?", "--file", str(path)], home, env=env)
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.strip().startswith(said.format(path=path)), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert fake_model.requests == []  # nothing was asked


def test_ask_with_only_a_file_and_no_words_asks_about_the_file(home, fake_model, tmp_path):
    (tmp_path / "sales.csv").write_bytes(SALES)
    fake_model.enqueue(text("Sales by region."))
    result = invoke(
        ["ask", "", "-f", str(tmp_path / "sales.csv")],
        home,
        env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url},
    )
    assert result.returncode == 0, result.stderr
    assert "'sales.csv'" in block_of(fake_model.requests[0])


def test_chat_shares_a_file_with_the_next_question_and_a_bad_path_is_one_line(home, fake_model, tmp_path):
    (tmp_path / "q3 sales.csv").write_bytes(SALES)
    (tmp_path / "bad.parquet").write_bytes(b"nope")
    fake_model.enqueue(text("North sold most."), text("No files this time."))
    lines = [
        f"/file {tmp_path / 'missing.csv'}",
        "/file",
        f"/file {tmp_path / 'q3 sales.csv'}",  # spaces as they are
        f"/file '{tmp_path / 'bad.parquet'}'",  # or quoted
        "who sold most?",
        "and now?",
    ]
    result = invoke(
        ["chat", "--session", "files"],
        home,
        env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url},
        stdin="\n".join(lines) + "\n",
    )
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())  # rich folds long lines
    assert f"There is no file {tmp_path / 'missing.csv'}." in out
    assert "Type /file PATH to share a CSV, TSV, Parquet, JSON or Excel file with your next question" in out
    assert "q3 sales.csv (46 bytes) goes with your next question." in out
    assert "bad.parquet (4 bytes) goes with your next question." in out
    assert "North sold most." in out and "No files this time." in out
    assert "I couldn't read `bad.parquet` as PARQUET" in out  # below the answer
    first, second = fake_model.requests
    block = block_of(first)
    assert "as 'q3_sales.csv' (46 bytes)" in block and "as 'bad.parquet' (4 bytes), but it could not" in block
    assert not [b for b in second["messages"][-1]["content"] if b["text"].startswith(HEADER)]


COLUMN = b"n\n" + b"1\n" * 300_000  # 600 KB
LIMITS = {"DATATHREAD_SHARED_FILE_MB": "1", "DATATHREAD_SHARED_FILES_MB": "1"}


def test_ask_with_files_past_the_total_together_is_a_bad_argument(home, fake_model, tmp_path):
    """Each file is under DATATHREAD_SHARED_FILE_MB, but not both together under _FILES_MB."""
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_bytes(COLUMN)
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url, **LIMITS}
    result = invoke(
        ["ask", "rows?", "-f", str(tmp_path / "a.csv"), "-f", str(tmp_path / "b.csv")], home, env=env
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == f"error: b.csv: {over_total('b.csv', 1).refusal}"
    assert fake_model.requests == []


def test_chat_holds_the_files_waiting_for_a_question_to_the_total(home, fake_model, tmp_path):
    """`/file` twice with 600 KB files under a 1 MB total: the second is one line and not taken, a
    small one still is; once the question is asked, the total starts again."""
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_bytes(COLUMN)
    (tmp_path / "sales.csv").write_bytes(SALES)
    fake_model.enqueue(text("The first has 300,000 rows."), text("The second too."))
    lines = [f"/file {tmp_path / 'a.csv'}", f"/file {tmp_path / 'b.csv'}", f"/file {tmp_path / 'sales.csv'}"]
    lines += ["rows?", f"/file {tmp_path / 'b.csv'}", "and this one?"]
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url, **LIMITS}
    result = invoke(["chat", "--session", "total"], home, env=env, stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())  # rich folds long lines
    assert f"b.csv: {over_total('b.csv', 1).refusal}" in out
    assert out.count("b.csv (600,002 bytes) goes with your next question.") == 1  # the second time
    first, second = (block_of(r) for r in fake_model.requests)
    assert "'a.csv'" in first and "'sales.csv'" in first and "b.csv" not in first
    assert "'b.csv'" in second
