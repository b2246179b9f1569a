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


async def test_unknown_tools_and_bad_inputs_are_errors_too():
    unknown = await call_tool("nope", {}, context())
    assert unknown.is_error and "Unknown tool 'nope'" in unknown.content
    bad = await call_tool("boom", {"extra": 1}, context())
    assert bad.is_error and "Invalid input for boom" in bad.content
