"""Whether a chat message asks for the thread as a notebook ("export this as a notebook", "send me
the .ipynb"), so the surface exports it instead of spending a turn of the model on it.

Kept apart from core/notebook.py, which builds the notebook: this reads people's words (the core's
turn handling asks it before any budget or model call), that one reads turn records.
"""

from __future__ import annotations

import re

_NEGATION = re.compile(r"\b(don'?t|do not|never|no need|without)\b", re.I)
# "notebook" as the thing asked for, not as a word of the data ("notebook sales by brand")
_TARGET = re.compile(
    r"\bjupyter\b|\bipynb\b|\bnotebook\b(?!\s+(?!(?:of|for|please|version|file|now|too|with|from|so|"
    r"that|and|i|we|pls|thanks)\b)\w)",
    re.I,
)
_VERB = re.compile(
    r"\b(export|download|give|send|share|make|create|generate|build|get|save|turn|convert|want|need|"
    r"produce|write|dump|attach|package)\b",
    re.I,
)
_MENTION = re.compile(r"<[@!#][^>]*>|@\w+")


def is_export_request(text: str) -> bool:
    """True when a message asks for the thread as a notebook, so the surface exports instead of asking
    the model (cheap, predictable, and it never spends a turn). Short requests only: a data question
    that merely mentions notebooks ("laptops vs notebooks sold?") must still reach the model."""
    clean = _MENTION.sub(" ", text or "").strip()
    words = re.findall(r"[\w.']+", clean)
    if not words or len(words) > 14 or _NEGATION.search(clean):
        return False
    if not _TARGET.search(clean):
        return False
    return bool(_VERB.search(clean) or re.match(r"\W*(jupyter\s+)?(notebook|ipynb)\b", clean, re.I))
