"""Tool dispatch: every call ends as an outcome the model can read, with secrets redacted."""

from __future__ import annotations

from core.redact import Redactor
from core.tools import ListTablesInput, Tool, ToolContext, call_tool
from core.warehouse import QueryContext

SECRET = "sk-ant-very-secret-000111"


async def crash(args, ctx):
    raise RuntimeError(f"connection string had {SECRET} in it")


def context() -> ToolContext:
    return ToolContext(
        session_id="s1",
        turn_id="t1",
        sandbox=None,
        warehouse=None,
        query=QueryContext(session_id="s1"),
        tools={"boom": Tool("boom", ListTablesInput, crash, "Crashing")},
        redact=Redactor([SECRET]).text,
    )


async def test_a_crashing_tool_is_an_error_result_with_secrets_redacted():
    outcome = await call_tool("boom", {}, context())
    assert outcome.is_error and outcome.content.startswith("The tool failed: RuntimeError")
    assert SECRET not in outcome.content and "[redacted]" in outcome.content


async def test_a_secret_a_step_printed_in_latin_1_bytes_is_redacted_as_it_reads():
    """Text is made readable before it is redacted: a secret holding "ü" printed as Latin-1 bytes is a
    lone surrogate until read, and redacted after that it passed as "ü"."""
    secret = "pässwörd-0042-very-secret"
    escaped = secret.encode("latin-1").decode("utf-8", "surrogateescape")

    async def prints(args, ctx):
        raise RuntimeError(f"the step printed {escaped}")

    ctx = context()
    ctx.tools["prints"] = Tool("prints", ListTablesInput, prints, "Prints")
    ctx.redact = Redactor([secret]).text
    outcome = await call_tool("prints", {}, ctx)
    assert secret not in outcome.content and "[redacted]" in outcome.content, outcome.content


async def test_unknown_tools_and_bad_inputs_are_errors_too():
    unknown = await call_tool("nope", {}, context())
    assert unknown.is_error and "Unknown tool 'nope'" in unknown.content
    bad = await call_tool("boom", {"extra": 1}, context())
    assert bad.is_error and "Invalid input for boom" in bad.content


async def test_attached_csv_of_a_result_has_no_live_formulas(analyst, fake_model, recorder, settings):
    """Result rows are untrusted: the CSV the bot converts from parquet for attach_file is spreadsheet-safe."""
    import csv

    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    sql = (
        "SELECT '=HYPERLINK(\"https://evil.example/\",\"x\")' AS link, '@cmd' AS at, -3 AS n, 'ok' AS plain "
        "FROM flights LIMIT 2"
    )
    fake_model.enqueue(
        tool("query_warehouse", {"sql": sql, "save_as": "rows"}),
        tool("attach_file", {"path": "rows.parquet"}),
        text("attached"),
    )
    message = IncomingMessage(text="rows as csv", surface="api", thread_key=("csv",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    assert [a.path for a in recorder.of("artifact")] == ["rows.csv"]
    path = settings.workspaces_dir / outcome.session_id / "rows.csv"
    rows = list(csv.DictReader(path.open(newline="")))
    assert rows[0] == {"link": "'=HYPERLINK(\"https://evil.example/\",\"x\")", "at": "'@cmd", "n": "-3",
                       "plain": "ok"}  # fmt: skip


async def test_a_refused_attachment_names_a_bounded_list_of_files(analyst, fake_model, recorder):
    """A wrong path is answered with the workspace's files — at most LISTED_FILES of them: a workspace
    may hold 100,000 names, and every one would go to the model."""
    from core.events import IncomingMessage
    from core.tools import LISTED_FILES
    from tests.fakes.anthropic_api import text, tool

    make = "import pathlib\nfor n in range(100):\n    pathlib.Path(f'part_{n:03d}.txt').write_text('x')"
    fake_model.enqueue(
        tool("run_python", {"code": make}), tool("attach_file", {"path": "missing.csv"}), text("ok")
    )
    message = IncomingMessage(text="attach it", surface="api", thread_key=("many-files",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    refusal = fake_model.last_tool_results()[0]
    body = refusal["content"] if isinstance(refusal["content"], str) else refusal["content"][0]["text"]
    assert "No file 'missing.csv'" in body and "part_000.txt" in body
    assert body.count("part_") == LISTED_FILES and f"(and {100 - LISTED_FILES} more" in body


async def test_a_one_row_result_is_one_row_in_its_summary_and_to_the_model(analyst, fake_model, recorder):
    """The audit's step summary said "query, 1 rows" (a newcomer trial): counted like every other count."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights", "save_as": "total"}), text("ok")
    )
    message = IncomingMessage(text="how many flights?", surface="api", thread_key=("one-row",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    (finished,) = recorder.of("step_finished")
    assert ", 1 row, " in finished.record.summary, finished.record.summary
    sent = fake_model.requests[-1]["messages"][-1]["content"][0]["content"]
    assert "Saved 1 row to 'total.parquet'" in str(sent), sent


async def test_a_workbook_or_a_name_with_control_characters_is_not_attached(analyst, fake_model, recorder):
    """A red-team trial: a step's .xlsx kept its live formula cells (only CSVs are neutralised), and a
    file named with an escape sequence and newlines was printed as given by `ask` (a cleared screen, a
    retitled window, fake path lines)."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    odd = "r\x1b]0;PWNED\x07\x1b[2J\nFAKE-LINE\nx.csv"
    turned = "naive_\u202egnp.csv"  # a right-to-left override: shown as "naive_vsc.png"
    from core.attachment_words import CONTROL_CHARS

    for hidden in (
        "\u00ad",
        "\u200d",
        "\u2028",
        "\u2029",
        "\u180e",
    ):  # invisible, or a line break to splitlines
        assert CONTROL_CHARS.search(f"a{hidden}b.csv"), repr(hidden)
    make = (
        f"import pandas as pd\npd.DataFrame({{'a': [1]}}).to_excel('report.xlsx')\nopen({odd!r}, 'w').write('a\\n1\\n')"
        f"\nopen({turned!r}, 'w').write('a\\n1\\n')"
    )
    fake_model.enqueue(
        tool("run_python", {"code": make}),
        tool("attach_file", {"path": "report.xlsx"}),
        tool("attach_file", {"path": odd}),
        tool("attach_file", {"path": turned}),
        text("ok"),
    )
    message = IncomingMessage(text="attach them", surface="api", thread_key=("odd-files",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    assert not recorder.of("artifact")
    bodies = [str(request["messages"][-1]["content"][0]["content"]) for request in fake_model.requests[-3:]]
    assert "Files of type .xlsx are not attached" in bodies[0]
    assert "has control characters in its name" in bodies[1] and "\x1b" not in bodies[1]
    assert "has control characters in its name" in bodies[2]


async def test_attaching_a_parquet_never_overwrites_the_models_own_csv_of_that_name(
    analyst, fake_model, recorder, settings
):
    """The model wrote carriers.csv (rounded, with a total row) and attached it, then attached
    carriers.parquet: its conversion replaced carriers.csv, and both attachments were the raw file."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    summary = "open('carriers.csv', 'w').write('carrier,n\\nUA,58665\\nALL,58665\\n')"
    fake_model.enqueue(
        tool(
            "query_warehouse",
            {"sql": "SELECT carrier, count(*) AS n FROM flights GROUP BY 1", "save_as": "carriers"},
        ),
        tool("run_python", {"code": summary}),
        tool("attach_file", {"path": "carriers.csv", "title": "summary"}),
        tool("attach_file", {"path": "carriers.parquet", "title": "raw"}),
        text("attached"),
    )
    message = IncomingMessage(text="carriers as csv", surface="api", thread_key=("csv-twice",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    artifacts = recorder.of("artifact")
    assert [(a.path, a.name, a.title) for a in artifacts] == [
        ("carriers.csv", "carriers.csv", "summary"),
        ("attachments/carriers.csv", "carriers.csv", "raw"),
    ]
    workspace = settings.workspaces_dir / outcome.session_id
    assert (workspace / "carriers.csv").read_text() == "carrier,n\nUA,58665\nALL,58665\n"  # untouched
    raw = (workspace / "attachments" / "carriers.csv").read_text().splitlines()
    assert raw[0] == '"carrier","n"' and len(raw) == 17  # 16 carriers


async def test_a_result_with_duplicate_column_names_is_saved_with_unique_ones(
    analyst, fake_model, recorder, settings
):
    """`SELECT 1 AS a, 2 AS a` saved a file that pandas and the CSV conversion then refused ("Multiple
    matches for FieldRef"), while the preview showed `a a`."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    fake_model.enqueue(
        tool(
            "query_warehouse", {"sql": "SELECT 1 AS a, 2 AS a, 3 AS A FROM flights LIMIT 1", "save_as": "dup"}
        ),
        tool(
            "run_python", {"code": "import pandas as pd\nprint(list(pd.read_parquet('dup.parquet').columns))"}
        ),
        tool("attach_file", {"path": "dup.parquet"}),
        text("attached"),
    )
    message = IncomingMessage(text="dup columns", surface="api", thread_key=("dup",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    assert "Columns: a int32, a_1 int32, A_2 int32." in fake_model.last_tool_results(1)[0]["content"]
    assert "['a', 'a_1', 'A_2']" in fake_model.last_tool_results(2)[0]["content"]
    csv_text = (settings.workspaces_dir / outcome.session_id / "dup.csv").read_text()
    assert csv_text.splitlines() == ['"a","a_1","A_2"', "1,2,3"]


async def test_a_wide_result_says_how_many_columns_it_did_not_name(analyst, fake_model, recorder):
    """A 70-column result listed 60 and never said there were more."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    sql = "SELECT " + ", ".join(f"{i} AS c{i}" for i in range(70))
    fake_model.enqueue(tool("run_sql", {"sql": sql, "save_as": "wide"}), text("ok"))
    outcome = await analyst.handle(
        IncomingMessage(text="wide", surface="api", thread_key=("wide",)), recorder
    )
    assert outcome.ok, outcome.error
    content = fake_model.last_tool_results(1)[0]["content"]
    assert "c59 int32 and 10 more (read the file for all)." in content


async def test_an_interval_result_is_saved_as_text(analyst, fake_model, recorder, settings):
    """`ts1 - ts2` (an INTERVAL) failed the whole step: parquet has no month-day-nano interval."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    sql = "SELECT TIMESTAMP '2026-01-02 03:04:05' - TIMESTAMP '2026-01-01' AS gap, INTERVAL 14 MONTH AS span"
    fake_model.enqueue(
        tool("run_sql", {"sql": sql, "save_as": "gaps"}),
        tool(
            "run_python",
            {"code": "import pandas as pd\nprint(pd.read_parquet('gaps.parquet').iloc[0].tolist())"},
        ),
        text("ok"),
    )
    outcome = await analyst.handle(IncomingMessage(text="gap", surface="api", thread_key=("gap",)), recorder)
    assert outcome.ok, outcome.error
    saved = fake_model.last_tool_results(1)[0]
    assert not saved.get("is_error") and "Columns: gap string, span string." in saved["content"]
    assert "['1 day 03:04:05', '1 year 2 months']" in fake_model.last_tool_results(2)[0]["content"]


async def test_durations_periods_and_infinity_reach_people_as_written(
    analyst, fake_model, recorder, settings
):
    """A pandas timedelta and Period column reached the CSV as 93784500000 and 648 (µs, and months since
    1970); DuckDB's `DATE 'infinity'` as `<value out of range: 2147483647>`. The file keeps the DATE
    (SQL compares it), which `pd.read_parquet` fails on ("year 5881580 is out of range"): the model is
    told so, and how to cap it in SQL for pandas."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    code = (
        "import pandas as pd\n"
        "pd.DataFrame({'td': pd.to_timedelta(['1 days 02:03:04.5', '-1 s']),\n"
        "              'per': pd.period_range('2024-01', periods=2, freq='M')}).to_parquet('pd.parquet')"
    )
    sql = "SELECT * FROM (VALUES (DATE 'infinity'), (DATE '2024-05-06')) v(until)"
    fake_model.enqueue(
        tool("run_python", {"code": code}),
        tool("run_sql", {"sql": sql, "save_as": "inf"}),
        tool(
            "run_python",
            {
                "code": "import duckdb\nsql = \"SELECT LEAST(until, DATE '9999-12-31') AS until FROM 'inf.parquet'\"\n"
                "print(duckdb.sql(sql).df()['until'].astype(str).tolist())"
            },
        ),
        tool("attach_file", {"path": "pd.parquet"}, more=[("attach_file", {"path": "inf.parquet"})]),
        text("attached"),
    )
    message = IncomingMessage(text="types", surface="api", thread_key=("types",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    preview = fake_model.last_tool_results(2)[0]["content"]
    assert "Columns: until date32[day]." in preview and "\ninfinity\n" in preview
    assert "until (date32[day]: infinity)" in preview and "LEAST(col, DATE '9999-12-31')" in preview
    assert "['9999-12-31', '2024-05-06']" in fake_model.last_tool_results(3)[0]["content"]
    workspace = settings.workspaces_dir / outcome.session_id
    assert (workspace / "pd.csv").read_text().splitlines() == [
        '"td","per"',
        '"1 day 02:03:04.5","2024-01"',
        '"\'-00:00:01","2024-02"',  # a spreadsheet reads `-00:00:01` as a formula over rows: quoted
    ]
    assert (workspace / "inf.csv").read_text().splitlines() == ['"until"', '"infinity"', '"2024-05-06"']


def test_a_steps_detail_is_its_sql_or_code_else_its_inputs_in_words():
    """A create_schedule card showed `{"cron": "0 9 * * mon", "question": "…"}` as its detail."""
    from core.tools import step_detail

    assert step_detail("run_sql", {"sql": "SELECT 1", "save_as": "x"}) == "SELECT 1"
    assert step_detail("describe_table", {"table": "flights"}) == "flights"
    detail = step_detail(
        "create_schedule", {"cron": "0 9 * * mon", "question": "delays by carrier", "tz": ""}
    )
    assert detail == "cron: 0 9 * * mon · question: delays by carrier"
    assert step_detail("list_tables", {}) == ""


async def test_a_file_named_in_bytes_that_are_not_utf8_is_told_and_attached_by_its_readable_name(
    analyst, fake_model, recorder
):
    """A step's `open(b'M\\xfcnchen.csv', 'w')` came back as "M\\udcfcnchen.csv" in the tool result: the next
    model request could not be encoded ("Something went wrong"). Every result is readable (call_tool),
    and the workspace finds the file by the name the model was told."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    fake_model.enqueue(
        tool("run_python", {"code": "open(b'M\\xfcnchen.csv', 'w').write('a\\n1\\n')"}),
        tool("attach_file", {"path": "München.csv"}),
        text("attached"),
    )
    message = IncomingMessage(text="write it", surface="api", thread_key=("byte-names",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    told = [str(r["messages"][-1]["content"][0]["content"]).encode() for r in fake_model.requests[1:]]
    assert "New or changed files: München.csv (4 bytes)".encode() in told[0]
    assert "Attached München.csv".encode() in told[1]
    (artifact,) = recorder.of("artifact")
    assert (artifact.path, artifact.name, artifact.title) == ("München.csv", "München.csv", "München.csv")
    assert await analyst.threads.read_artifact(artifact) == b"a\n1\n"
    assert outcome.steps[0].files == ("München.csv",)


async def test_a_result_saved_under_a_name_in_any_script_is_described(analyst, fake_model, recorder):
    """`save_as` keeps letters of any script (core/file_stems.py), but a step's reported name was taken
    only in ASCII: `Verspätung.parquet` was written and the model got no rows, columns or preview."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    sql = "SELECT 'UA' AS carrier, 12.5 AS delay"
    fake_model.enqueue(tool("run_sql", {"sql": sql, "save_as": "Verspätung 東京"}), text("ok"))
    outcome = await analyst.handle(
        IncomingMessage(text="delays", surface="api", thread_key=("names",)), recorder
    )
    assert outcome.ok, outcome.error
    content = fake_model.last_tool_results(1)[0]["content"]
    assert "Saved 1 row to 'Verspätung_東京.parquet'. Columns: carrier" in content, ascii(content)
