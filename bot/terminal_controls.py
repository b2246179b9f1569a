"""Text safe to print on a terminal. Control characters other than newline and tab: an escape sequence
in the model's or a step's text — or a question someone typed in Slack, shown later by an admin's
`datathread verified list` — would drive the terminal (clear it, retitle it, make a link, rewrite what
was printed); rich passes them through. So would the direction embeddings and overrides:
`report\u202egnp.csv` printed as `report…vsc.png` (the marks and isolates right-to-left text uses stay).
Light on purpose: every command imports it, the terminal renderer's stack only when it draws.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def printable(text: str) -> str:
    """Text from the model, a step or a person, safe to print: control characters shown as `?`."""
    return _CONTROLS.sub("?", text)
