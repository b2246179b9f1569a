"""One Markdown parse for every surface: Claude's answer split into text, code and table blocks by
markdown-it-py (CommonMark plus GFM tables), so Slack, Teams and the terminal agree on what is a table
or a code block. Each surface then renders the blocks its own way (bot/slack_render.py,
bot/teams_render.py; the terminal hands the whole answer to rich, which uses the same parser).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token
from wcwidth import grapheme_boundary_before, iter_graphemes

from core.wording import cut_at_word

_PARSER = MarkdownIt("commonmark").enable("table")


@dataclass(frozen=True)
class Block:
    """One top-level piece of an answer. `text` is the Markdown source of a text block (paragraphs,
    headings, lists, quotes) or the body of a code block; tables carry their cells."""

    kind: Literal["text", "code", "table"]
    text: str = ""
    lang: str = ""
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    # A table's columns as its delimiter row set them: "left", "center", "right" or "" (unset).
    align: tuple[str, ...] = ()


def blocks(markdown: str) -> list[Block]:
    """The answer's top-level blocks in order; adjacent text blocks (no blank line between them) stay
    one block, as people wrote them."""
    source = markdown.replace("\r\n", "\n")
    lines = source.split("\n")
    tokens = _PARSER.parse(source)
    out: list[Block] = []
    last_end = -1
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.level != 0 or token.map is None:
            i += 1
            continue
        start, end = token.map
        if token.type == "fence":
            out.append(Block("code", token.content.removesuffix("\n"), lang=token.info.strip()))
        elif token.type == "table_open":
            close = _closing(tokens, i)
            out.append(_table(tokens[i:close]))
            i = close
        else:
            text = "\n".join(lines[start:end]).strip("\n")
            # A list's extent takes in the blank line after it: "- b\n\nSo overall" looked adjacent,
            # was joined with one newline, and the paragraph became part of the list's last item.
            blank_before = start > 0 and not lines[start - 1].strip()
            if out and out[-1].kind == "text" and start == last_end and not blank_before:
                out[-1] = Block("text", f"{out[-1].text}\n{text}")
            elif text.strip():
                out.append(Block("text", text))
            i = _closing(tokens, i) if token.nesting == 1 else i
        last_end = end
        i += 1
    return out


def _closing(tokens: list[Token], i: int) -> int:
    """Index of the token that closes the block opened at `i`."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def _table(tokens: list[Token]) -> Block:
    header: list[str] = []
    rows: list[list[str]] = []
    row: list[str] = []
    align: list[str] = []
    in_head = False
    for token in tokens:
        if token.type == "th_open":  # `|:-:|` → style="text-align:center"
            align.append(str(token.attrGet("style") or "").removeprefix("text-align:"))
        elif token.type == "thead_open":
            in_head = True
        elif token.type == "thead_close":
            in_head = False
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline":
            row.append(token.content.strip())
        elif token.type == "tr_close":
            if in_head:
                header = row
            else:
                rows.append(row)
    return Block("table", header=tuple(header), rows=tuple(tuple(r) for r in rows), align=tuple(align))


def pack(pieces: Iterable[str], limit: int, size: Callable[[str], int] = len) -> list[str]:
    """Pieces (each within `limit`) joined by blank lines into as few chunks of at most `limit` as go,
    breaking only between pieces: how every surface splits a long answer into messages. `size` is
    the surface's measure (Slack counts characters, Teams bytes)."""
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        candidate = f"{current}\n\n{piece}" if current else piece
        if size(candidate) <= limit:
            current = candidate
        else:
            if current:  # a first piece over the limit is its own chunk, never an empty one before it
                chunks.append(current)
            current = piece
    return [*chunks, current] if current else chunks


def plain_text(markdown: str, limit: int = 300) -> str:
    """The answer's words without Markdown, for notification previews (Slack's `text` beside blocks):
    "**F9** is worst" showed on phones as typed. Each paragraph, heading, list item and table cell is a
    line; code keeps its text; links keep their words. Cut at `limit` characters."""
    lines: list[str] = []
    for token in _PARSER.parse(markdown.replace("\r\n", "\n")):
        if token.type == "inline":
            lines.append("".join(_INLINE_WORDS.get(c.type, c.content) for c in token.children or ()).strip())
        elif token.type in ("fence", "code_block"):
            lines.append(token.content.rstrip("\n"))
    text = "\n".join(line for line in lines if line)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def lead_sentence(markdown: str, limit: int = 300) -> str:
    """The answer's opening words, plain, for a notification (a phone shows only a message's `text`):
    the first sentence of its first paragraph or list item, or of its first heading where no paragraph
    follows; never a table's cells or a code block's lines unless the answer is nothing else. A first
    sentence under `_LEAD_AT_LEAST` characters ("Yes.") takes the next ones with it. Cut at `limit`."""
    tokens = _PARSER.parse(markdown.replace("\r\n", "\n"))
    heading = ""
    for before, token in zip(tokens, tokens[1:], strict=False):
        if token.type != "inline":
            continue
        words = _inline_words(token)
        if words and before.type == "paragraph_open":
            return cut_at_word(_first_sentences(words), limit)
        if words and before.type == "heading_open":
            heading = heading or words
    return cut_at_word(heading or " ".join(plain_text(markdown, limit).split()), limit)


_LEAD_AT_LEAST = 20
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s)")


def _first_sentences(words: str) -> str:
    for end in _SENTENCE_END.finditer(words):
        if end.end() >= _LEAD_AT_LEAST:
            return words[: end.end()]
    return words


def _inline_words(token: Token) -> str:
    """An inline token's words on one line, markup left out."""
    return " ".join("".join(_INLINE_WORDS.get(c.type, c.content) for c in token.children or ()).split())


# What an inline token stands for in plain text where it is not its own content (markup, breaks).
_INLINE_WORDS = {"softbreak": " ", "hardbreak": " ", "image": ""} | {
    kind: "" for kind in ("strong_open", "strong_close", "em_open", "em_close", "link_open", "link_close",
                          "s_open", "s_close", "html_inline")
}  # fmt: skip


_LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)\)")
_NAMED_HOST = re.compile(r"(?i)(?:https?://)?((?:[a-z0-9-]+\.)+[a-z]{2,})")


def honest_label(label: str, target: str) -> str:
    """A link's words, with where it goes when they name another address: an answer's
    `[https://slack.com/signin](https://evil.example/…)` was a live link whose words were another site's
    (a model steered by a question, a file or a table's contents can write one). Every surface."""
    host = (urlsplit(target).hostname or "").lower()
    named = {name.lower() for name in _NAMED_HOST.findall(label)}
    if any(name != host and not host.endswith("." + name) for name in named):
        return f"{label} ({host or target})"
    return label


def honest_links(text: str) -> str:
    """Every Markdown `[label](target)` of `text` with an honest label (see `honest_label`)."""
    return _LINK.sub(lambda m: f"[{honest_label(m[1], m[2])}]({m[2]})", text)


def grapheme_start(text: str, index: int) -> int:
    """`index` moved back to the start of the character a person sees there (a grapheme cluster: an
    emoji family joined by U+200D, a letter and its combining accents, a flag's two letters), so that
    a message cut at it never ends or starts with half of one (a trial's long line showed "👨" and
    "‍👩‍👧‍👦" in two messages). Where one cluster is longer than `index`, it stays."""
    if index <= 0 or index >= len(text):
        return index
    return grapheme_boundary_before(text, index + 1) or index


def grapheme_end(text: str, index: int) -> int:
    """`index` moved forward to the start of the next character a person sees, where it falls inside
    one (the end of its grapheme cluster): a text's end kept from `index` on never starts with the back
    half of an emoji family (a joiner and "👦") or a lone combining accent. At a cluster's start it stays."""
    if index <= 0 or index >= len(text):
        return index
    start = grapheme_boundary_before(text, index + 1)
    if start == index:
        return index
    return start + len(next(iter_graphemes(text, start)))
