"""The guides name the code and tests they describe by path; a path that moved leaves the reader at a
file that is not there (docs/BENCHMARKS.md cited tests/core/test_hostile.py after it became a folder)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A path in backticks under one of the project's folders: a file with its extension, or a folder/.
CITED = re.compile(r"`((?:bot|core|bench|deploy|tests|docs|slack|teams)/[\w./-]*(?:\.\w+|/))`")


def test_every_path_the_docs_cite_exists():
    missing = [
        f"{doc.name}: {path}"
        for doc in DOCS
        for path in CITED.findall(doc.read_text(encoding="utf-8"))
        if not (ROOT / path).exists()
    ]
    assert missing == []
