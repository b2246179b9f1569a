"""What of a half-written answer Slack's stream may show (bot/slack_stream.py): streamed one character
at a time, every piece sent is the start of the finished answer's rendering — nothing ever needs
taking back — and the pieces join to exactly that rendering."""

from __future__ import annotations

import pytest

from bot.slack_stream import StreamedText, render

TRICKY = [
    "intro line\n| a | b |\n|-|-:|\n| 1 | 2 |\n\nafter",  # a table interrupting a paragraph
    "text ```\ncode <!here>\n```\nmore",
    "```python\nx = 1\n\ny = 2\n```\n\nDone.",  # a blank line inside a fence
    "- a\n- b\n\n  continued\n- c [link](https://e.com/x) and `co<de>`\n\n> quote <@U1>\n> more\n\nend",
    "# Title\n\nPara with [bad](javascript:alert) and [ok](mailto:a@b.c) & stuff <b>\n\n***\n\n1. one\n2. two",
    "Setext\n===\n\nSub\n---\nword [brackets] only [1] and [x]( y) [a](b c)",
    "a `unclosed code and [unclosed link(",
    "    indented code\n    more\n\ntext\n\n\n\ntriple blank",
    "<div>\nhtml <!channel>\n</div>\n\nx",
    "A paragraph\n```\nfence right after\n```\ntrailing",
    "word\n~~~\ntilde fence\n\n~~~\nend",
    "Sure <!here> and <@U0BOSS> see [the docs](!channel) or [this](slack://open) & <https://x.io|y>",
    'See [1] and [2].\n\n[1]: https://example.com/a\n[2]: <https://example.com/b> "title"\n\nAfter.',
    "Index with `a[0] & b<c>` then [a link](https://x.io) and `x[` more words here",
]


@pytest.mark.parametrize("answer", TRICKY)
def test_character_by_character_every_piece_is_final(answer):
    final = render(answer)
    stream = StreamedText()
    for char in answer:
        stream.add(1, char)
        stream.take()
        assert final.startswith(stream.sent), (answer, stream.sent)
    assert stream.rest(answer) == final[len(stream.sent) :]


def test_plain_words_show_as_they_come_and_a_table_only_once_it_is_whole():
    stream = StreamedText()
    stream.add(1, "**EV** had ")
    assert stream.take() == "**EV** had "
    stream.add(1, "the most.\n\n| carrier | n |\n|---|--:|\n| EV ")
    assert stream.take() == "the most."  # the table may still grow: not yet
    stream.add(1, "| 1 |\n\nDone")
    assert stream.take() == "\n\n```\ncarrier  n\n-------  -\nEV       1\n```"
    stream.close()
    assert stream.take() == "\n\nDone"


def test_calls_are_paragraphs_and_an_answer_the_loop_replaced_follows_in_full():
    stream = StreamedText()
    stream.add(1, "Let me check.")
    stream.close()  # a step started
    stream.add(2, "It is 42")
    assert stream.take() == "Let me check.\n\nIt is "
    assert stream.rest("It is 42") == "42"
    assert stream.rest("I can't help with that request.") == "\n\nI can't help with that request."


def test_the_stream_never_repeats_the_answer_for_footnote_links():
    answer = "See [1].\n\n[1]: https://example.com/source\n\nThat is all."
    stream = StreamedText()
    for char in answer:
        stream.add(1, char)
        stream.take()
    stream.close()
    assert stream.sent + stream.rest(answer) == render(answer)  # continued, not the answer again
