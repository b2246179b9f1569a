"""What a result file the bot saves is called: the model's `save_as` made a plain file stem, or a
unique default. Its own module because the rule is subtle (any script's letters, nothing invisible,
nothing Python would read as another name, a file name's byte limit) and five modules use it: the SQL
and warehouse steps, S3 copies, the tool batch's footprints and the exported notebook.
"""

from __future__ import annotations

import os
import re
import time
import unicodedata

# Letters, digits and their marks in any script stay ("Verspätung 東京" was "Versp_tung"; all-Japanese
# names fell back to `sql_<time>`; the vowel signs of "बिक्री" are marks); separators, spaces,
# emoji, variation selectors, direction overrides and invisible characters go. NFKC first: a
# fullwidth "ｐｄ" is the name `pd` to Python (the exported notebook's pandas), so it is "pd" here too.
_KEPT_CATEGORIES = ("L", "N", "Mn", "Mc")
STEM_BYTES = 200  # well under a file name's 255 bytes, with `.parquet` after it


def safe_file_stem(name: str | None, default: str) -> str:
    """A `save_as` from the model becomes a plain file stem: no directories, no odd characters."""
    text = unicodedata.normalize("NFKC", (name or "").strip())
    kept = "".join(c if c in "_.-" or _kept(c) else "/" for c in text if not _invisible(c))
    stem = re.sub(r"/+", "_", kept).strip("._")
    for ext in (".parquet", ".csv"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
    stem = stem[:80]
    while len(stem.encode()) > STEM_BYTES:  # 80 characters of four bytes each would not fit
        stem = stem[:-1]
    return stem.rstrip("._") or default


# Letters and marks that show nothing (Unicode's default-ignorables among them): "a\u034fb" looks like
# "ab" and names another file; a Hangul filler alone is an invisible name.
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0")


def _kept(c: str) -> bool:
    return unicodedata.category(c).startswith(_KEPT_CATEGORIES)


def _invisible(c: str) -> bool:
    """Shows nothing, so dropped rather than made a "_": "a\u034fb" is "ab"."""
    return c in _INVISIBLE or "\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef"


def default_stem(prefix: str) -> str:
    """A result's file name when the model gave none: unique, so two queries in the same second (or
    run at once) never overwrite each other's results (`sql_1764000000_3fa9`)."""
    return f"{prefix}_{int(time.time())}_{os.urandom(2).hex()}"
