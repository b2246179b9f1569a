"""A chart's alt text and a file's title (core/attachment_words.py): what a screen reader says for an
image, from the model's `alt_text` or, without one, from the title and the file's name; model-written,
so one plain bounded line. Through `attach_file` with the real sandbox, and the helpers table-driven."""

from __future__ import annotations

import pytest

from core.attachment_words import MAX_ALT_TEXT_CHARS, alt_text, attachment_title, one_line
from core.wording import cut_at_word

ALT = "Bar chart of average departure delay by carrier: F9 highest at 20.2 minutes, HA lowest at 4.9."
HOSTILE = "<!channel> see\x1b[2J\nthis\u202e now\u200b " + "word " * 400


@pytest.mark.parametrize(
    ("given", "title", "name", "mime", "expected"),
    [
        (ALT, "Delays", "delays.png", "image/png", (ALT, True)),
        (None, "Delays by carrier", "delays.png", "image/png", ("Chart: Delays by carrier", False)),
        ("", "delays_by-carrier.2013.png", "delays_by-carrier.2013.png", "image/png",
         ("Chart: delays by carrier 2013", False)),  # the name as words, not "underscore"
        ("  \n\t ", "Delays", "d.jpg", "image/jpeg", ("Chart: Delays", False)),  # blank is none
        ("\u200b\u202e", "_.png", "_.png", "image/png", ("Chart", False)),  # nothing left to say
        (ALT, "Delays", "delays.csv", "text/csv", ("", False)),  # only images have alt text
    ],
)  # fmt: skip
def test_alt_text_is_the_models_or_made_from_the_title_and_name(given, title, name, mime, expected):
    assert alt_text(given, title=title, name=name, mime=mime) == expected


def test_hostile_alt_text_is_one_plain_line_within_the_limit():
    text, described = alt_text(HOSTILE, title="t", name="c.png", mime="image/png")
    assert described and len(text) <= MAX_ALT_TEXT_CHARS and text.endswith("word…")
    assert text.startswith("<!channel> see[2J this now word")  # markup is each surface's to escape
    assert not any(c in text for c in "\x1b\n\u202e\u200b")


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("one two three four five", 16, "one two three…"),  # at a word, within the limit
        ("x" * 30, 10, "x" * 9 + "…"),  # one long run: cut where it is
        ("a\r\nb\x00c\u2028d", 20, "a bc d"),
    ],
)
def test_one_line_and_clipped(text, limit, expected):
    assert one_line(text, limit) == expected and len(expected) <= limit
    assert cut_at_word(expected, limit) == expected


def test_a_title_is_one_plain_line_or_the_file_name():
    assert attachment_title("Delays\n\x1b]0;PWNED\x07 by carrier", "d.png") == "Delays ]0;PWNED by carrier"
    assert attachment_title(None, "d.png") == attachment_title(" \n", "d.png") == "d.png"
    assert len(attachment_title("t" * 500, "d.png")) == 200


async def test_attach_file_carries_the_alt_text_on_its_artifact(analyst, fake_model, recorder):
    """The model's description goes with the chart it attaches; a chart without one gets words made from
    its title; a CSV none. The tool tells the model to give it."""
    from core.events import IncomingMessage
    from core.tools import TOOLS_BY_NAME
    from tests.fakes.anthropic_api import text, tool

    spec = TOOLS_BY_NAME["attach_file"].spec()
    assert "alt_text" in spec["input_schema"]["properties"] and "alt_text" in spec["description"]
    make = (
        "for n in ('a.png', 'b.png'): open(n, 'wb').write(b'\\x89PNG')\nopen('c.csv', 'w').write('x\\n1\\n')"
    )
    fake_model.enqueue(
        tool("run_python", {"code": make}),
        tool(
            "attach_file",
            {"path": "a.png", "title": "Delays", "alt_text": HOSTILE},
            more=[("attach_file", {"path": "b.png", "title": "Flights"}), ("attach_file", {"path": "c.csv"})],
        ),
        text("Attached."),
    )
    message = IncomingMessage(text="charts", surface="api", thread_key=("alt",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    a, b, c = recorder.of("artifact")
    assert a.described and a.alt_text == one_line(HOSTILE, MAX_ALT_TEXT_CHARS)
    assert (b.alt_text, b.described) == ("Chart: Flights", False)
    assert (c.alt_text, c.described) == ("", False)
