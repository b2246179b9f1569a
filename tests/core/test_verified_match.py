"""Retrieval of a close verified query: table-driven, deterministic."""

from __future__ import annotations

import pytest

from core.verified_match import Candidate, closeness, closest, words

JFK = Candidate(id="jfk", question="How many flights left JFK in 2013?", tables=("flights",), verified_at=1)
DELAY = Candidate(
    id="delay",
    question="Average arrival delay per carrier",
    tables=("main.flights", "airlines"),
    verified_at=2,
)
WIND = Candidate(
    id="wind", question="Departure delays on windy days", tables=("flights", "weather"), verified_at=3
)


def test_words_drop_function_words_case_and_plurals():
    assert words("How many FLIGHTS left JFK, in 2013?") == {"flight", "left", "jfk", "2013"}
    assert words("the glass class") == {"glass", "class"}


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How many flights left JFK in 2013?", "jfk"),  # the same words
        ("how many flights left from JFK in 2013", "jfk"),  # other function words
        ("How many flights departed JFK in 2013?", "jfk"),  # one word differs
        ("average arrival delay by carrier?", "delay"),
        ("what were departure delays on windy days (weather)?", "wind"),
        ("Which manufacturer built the most planes?", None),  # nothing close
        ("", None),
    ],
)
def test_closest(question, expected):
    match = closest(question, [JFK, DELAY, WIND])
    assert (match.id if match else None) == expected


def test_naming_the_tables_counts():
    plain = Candidate(id="x", question="delays on windy days", tables=("weather",))
    assert closeness("delays on windy days with weather", plain) > closeness(
        "delays on windy days again", plain
    )


def test_ties_go_to_the_newer_entry():
    older = Candidate(id="a", question="flights per origin", tables=(), verified_at=1)
    newer = Candidate(id="b", question="flights per origin", tables=(), verified_at=2)
    assert closest("flights per origin", [older, newer]).id == "b"
    assert closest("flights per origin", [newer, older]).id == "b"
