"""Scripted replies that route by the question, for runs where turns interleave (eval, concurrency).

`by_question(script)` is one reply the scripted Messages API can serve to any request: it reads the
turn's question (the first user message) and whether a tool result came back yet, and answers with
that question's scripted query first and a short text answer after. Enqueue as many as calls expected.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.fakes.anthropic_api import error, text, tool

Step = str | dict | None  # SQL to run, a ready reply (e.g. an error), or None: answer without a query


def question_of(body: dict) -> str:
    first = body["messages"][0]["content"]
    return first if isinstance(first, str) else next(b["text"] for b in first if b.get("type") == "text")


def tool_results(body: dict) -> int:
    return sum(
        1
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )


def by_question(script: dict[str, Step | list[Step]]) -> Callable[[dict], dict]:
    """A reply: the n-th step of the question's script after n tool results, then a text answer."""

    def reply(body: dict) -> dict:
        question = question_of(body)
        steps = script.get(question, [])
        steps = steps if isinstance(steps, list) else [steps]
        done = tool_results(body)
        if done >= len(steps) or steps[done] is None:
            return text(f"Here is the answer to: {question}")
        step = steps[done]
        if isinstance(step, dict):
            return step
        return tool("query_warehouse", {"sql": step, "save_as": f"answer_{done}"})

    return reply


def model_error(message: str = "scripted refusal") -> dict:
    """A 400 the SDK does not retry: the turn fails at once."""
    return error(400, "invalid_request_error", message)
