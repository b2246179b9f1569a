"""Local replies (core/help.py): `help` and empty messages are answered without the model, with the
tables this conversation may see and example questions."""

from __future__ import annotations

import threading
import time

import pytest
import responses

from core import help as help_module
from core.config import load_settings
from core.events import IncomingMessage
from core.help import LISTED_TABLES, help_text, is_local, local_answer
from core.policy import TableAllowlist
from core.sandbox_local import LocalSandbox
from core.warehouse_bigquery import BigQueryWarehouse
from tests.fakes.bigquery_api import API, FakeBigQuery, FakeTable


@pytest.mark.parametrize(
    ("text", "local"),
    [
        ("", True),
        ("   \n", True),
        ("help", True),
        (" HELP ", True),
        ("/help", True),
        ("?", True),
        ("help me find delays", False),
        ("how many flights?", False),
        ("helpful carriers", False),
    ],
)
def test_which_messages_are_answered_locally(text, local):
    assert is_local(text) is local


def test_help_lists_at_most_some_tables_and_generic_examples_for_other_warehouses():
    tables = [f"proj.sales.t{i:02d}" for i in range(LISTED_TABLES + 5)]
    body = help_text("slack", tables)
    assert "`proj.sales.t00`" in body and f"`proj.sales.t{LISTED_TABLES:02d}`" not in body
    assert "and 5 more" in body and "Summarize `proj.sales.t00` by month" in body
    assert "/ask" in body and "Ctrl-C" not in body


def test_the_terminal_tip_fits_both_chat_and_ask():
    """`ask help` ended with chat's keys alone ("Ctrl-D quits"), meaningless to a one-shot command."""
    body = help_text("terminal", ["t"])
    assert "In `datathread chat`, Ctrl-C stops an answer" in body
    assert "`datathread ask --session ID …` follows up" in body
    assert "`/file PATH` in chat (or `ask --file PATH`) shares a CSV" in body  # how to share a file


def test_help_says_when_the_tables_could_not_be_listed():
    body = help_text("teams", None)
    assert "could not list the tables" in body
    assert "flights" not in body and "What tables are there, and what is in them?" in body  # no demo


def test_help_where_no_table_is_allowed_offers_no_questions_about_tables():
    """It said "I can't see any tables from here", then suggested "What tables are there?" and
    "Which table is the biggest?": questions the channel's allowlist would refuse."""
    body = help_text("slack", [])
    assert "can't see any tables from here (an admin may need to allow some" in body
    assert "Try:" not in body and "What tables are there" not in body and "biggest" not in body


async def test_the_analyst_answers_help_and_empty_messages_without_the_model(analyst, fake_model, recorder):
    for text, first in (("help", "I answer questions"), ("", "You didn't ask anything.")):
        message = IncomingMessage(text=text, surface="terminal", thread_key=("h",), user_id="u1")
        outcome = await analyst.handle(message, recorder)
        assert outcome.ok and outcome.answer.startswith(first)
        assert all(
            f"`{t}`" in outcome.answer for t in ("airlines", "airports", "flights", "planes", "weather")
        )
    assert fake_model.requests == []
    assert [e.kind for e in recorder.events].count("answer") == 2
    assert await analyst.store.load_history(outcome.session_id) == []  # help is not part of the thread


async def test_help_respects_the_channel_allowlist(settings, fake_model, recorder):
    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"channel_datasets": "C1=main.fl*"}))
    try:
        message = IncomingMessage(text="help", surface="slack", thread_key=("T", "C1", "1"), channel_id="C1")
        outcome = await analyst.handle(message, recorder)
    finally:
        await analyst.close()
    assert "`flights`" in outcome.answer and "`weather`" not in outcome.answer


async def slack_help_over(fake: FakeBigQuery, tmp_path) -> str:
    """`help` in Slack, the warehouse BigQuery's REST API as `fake` answers it."""
    settings = load_settings(
        _env_file=None, warehouse="bigquery", gcp_project="bill", bigquery_api_url=API, home=tmp_path / "h"
    )
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        fake.register(mock)
        warehouse = BigQueryWarehouse.from_settings(
            settings, LocalSandbox(workspaces=settings.workspaces_dir)
        )
        try:
            return await local_answer("help", "slack", warehouse, TableAllowlist())
        finally:  # the listing goes on in its thread: it must end while the fake API is there
            for thread in [t for t in threading.enumerate() if t.name == "bigquery"]:
                thread.join(10)
            await warehouse.close()


async def test_help_over_a_listing_slower_than_it_waits_says_so_not_that_bigquery_is_out_of_reach(
    tmp_path, monkeypatch
):
    """BigQuery answering every call, but the listing (a call per table) longer than help waits: help
    says it took too long, and that asking waits longer — not that BigQuery could not be reached. (The
    tables.get calls run a few at once now: each is slower than help waits.)"""
    fake = FakeBigQuery(API)
    for i in range(4):
        fake.add_table(FakeTable("bill", "shop", f"t{i}", [{"name": "id", "type": "INTEGER"}], [[1]]))
    answer_table = fake._get_table

    def slow_table(*args, **kwargs):
        time.sleep(1.5)
        return answer_table(*args, **kwargs)

    monkeypatch.setattr(fake, "_get_table", slow_table)
    monkeypatch.setattr(help_module, "TABLES_TIMEOUT_S", 1.0)
    answer = await slack_help_over(fake, tmp_path)
    assert not fake.bugs
    assert (
        "I could not list the tables just now. Listing them took over 1 s; ask me “what tables are there?”, "
        "which waits longer." in answer
    ), answer
    assert "Could not reach" not in answer


async def test_help_where_bigquery_refuses_the_listing_names_no_project_and_gives_no_tool_advice(
    tmp_path, monkeypatch
):
    """BigQuery's refusal is worded for the model ("… list_tables …") and names projects, datasets and
    the service account: help showed it word for word to everyone in the channel."""
    fake = FakeBigQuery(API)
    message = "Access Denied: Project secret-billing-42: User bot@secret-billing-42.iam lacks permission"
    monkeypatch.setattr(fake, "_list_datasets", lambda *a, **k: fake._error(403, "accessDenied", message))
    answer = await slack_help_over(fake, tmp_path)
    assert "The warehouse refused to list them; an admin can run `datathread doctor` to see why." in answer
    assert "secret-billing-42" not in answer and "list_tables" not in answer, answer
