"""Which verified query is close to a new question: deterministic, explainable, no embeddings.

A question becomes a set of normalised words (lower case, punctuation and common function words
dropped, a plural `s` trimmed). Closeness is 0.75 × the word-set overlap (Jaccard) + 0.25 × the share
of the verified query's tables the question names ("flights", "weather"). The same question in other
words scores high; a question about other things scores low. Ties go to the newer entry, then the id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MATCH_THRESHOLD = 0.5
TEXT_WEIGHT, TABLE_WEIGHT = 0.75, 0.25

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "by",
        "from",
        "with",
        "and",
        "or",
        "vs",
        "versus",
        "per",
        "each",
        "every",
        "all",
        "any",
        "what",
        "which",
        "who",
        "whom",
        "how",
        "many",
        "much",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "give",
        "show",
        "list",
        "tell",
        "me",
        "us",
        "i",
        "we",
        "you",
        "please",
        "there",
        "their",
        "them",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
        "into",
        "over",
        "than",
        "then",
        "so",
        "can",
        "could",
        "would",
        "should",
        "will",
        "just",
        "about",
    ]
)
_WORD = re.compile(r"[a-z0-9_]+")


def words(text: str) -> frozenset[str]:
    """The question's content words, normalised (see the module docstring)."""
    out = set()
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.add(word)
    return frozenset(out)


def bare_table(name: str) -> str:
    """`project.dataset.flights` → `flight` (the word a person would use)."""
    return next(iter(words(name.split(".")[-1].strip("`\"'"))), "")


@dataclass(frozen=True)
class Candidate:
    """What retrieval needs to know about one verified query."""

    id: str
    question: str
    tables: tuple[str, ...]
    verified_at: float = 0.0


@dataclass(frozen=True)
class Match:
    id: str
    score: float


def closeness(question: str, candidate: Candidate) -> float:
    asked, known = words(question), words(candidate.question)
    if not asked or not known:
        return 0.0
    if asked == known:
        return 1.0
    text = len(asked & known) / len(asked | known)
    tables = [t for t in (bare_table(name) for name in candidate.tables) if t]
    named = sum(1 for t in tables if t in asked) / len(tables) if tables else 0.0
    return round(TEXT_WEIGHT * text + TABLE_WEIGHT * named, 4)


def closest(
    question: str, candidates: Iterable[Candidate], *, threshold: float = MATCH_THRESHOLD
) -> Match | None:
    """The best candidate at or above the threshold, or None."""
    scored = [(closeness(question, c), c.verified_at, c.id) for c in candidates]
    scored = [s for s in scored if s[0] >= threshold]
    if not scored:
        return None
    score, _, best = max(scored, key=lambda s: (s[0], s[1], s[2]))
    return Match(id=best, score=score)
