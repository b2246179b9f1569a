"""The words that go with an attached file — its title and, for an image, its alt text — clean and
bounded, the same for every surface.

Alt text is what a screen reader says in place of a chart: Slack's `alt_txt` on the upload, an
Adaptive Card image's `altText` in Teams, a line under the file's path in a terminal that cannot draw
it. Without it a chart was "delays.png" or nothing to anyone who cannot see it. The model writes it
(`attach_file`'s `alt_text`); when it gives none, one is made from what the bot knows without looking
at the image — the title and the file's name. The image's bytes are not parsed in the bot process to
find more (they are the sandbox's output, untrusted like every file a step writes).

Both are model-written from untrusted data (a column name, a shared file's header), so they are made
plain here: one line, no control or invisible characters (an escape sequence in a terminal, a direction
override that reverses what a reader sees), clipped. Each surface still escapes them for its own markup.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from core.text_repair import readable
from core.wording import cut_at_word

# Slack refuses longer alt text (files.getUploadURLExternal: `alt_txt_too_large`, "longer than the
# limit of 1000 character"), and a screen reader's listener wants far less.
MAX_ALT_TEXT_CHARS = 1000
MAX_TITLE_CHARS = 200
# A newline or an escape sequence in a file's name: `ask` printed it as given (a cleared screen, a
# retitled window, a second "path" line for the scripts that read ask's output); no surface wants one.
# Nor a direction override or an invisible character: `report\u202egnp.csv` reads as `report…vsc.png`.
CONTROL_CHARS = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]"
)  # (and the line separators Python's splitlines breaks at, soft hyphens and joiners: a review)
_NAME_SEPARATORS = re.compile(r"[\s_.\-]+")


def one_line(text: str, limit: int) -> str:
    """`text` as one plain line of at most `limit` characters: whitespace runs (newlines too) as one
    space, control and invisible characters gone, cut at a word with "…" when it is longer."""
    visible = CONTROL_CHARS.sub("", " ".join(readable(text).split()))
    return cut_at_word(" ".join(visible.split()), limit)


def attachment_title(given: str | None, name: str) -> str:
    """The title shown with a file: the model's, made plain, or the file's name."""
    return one_line(given or "", MAX_TITLE_CHARS) or name


def alt_text(given: str | None, *, title: str, name: str, mime: str) -> tuple[str, bool]:
    """An image's alt text and whether the model described it (False: made from its title and name);
    ("", False) for a file that is not an image."""
    if not mime.startswith("image/"):
        return "", False
    described = one_line(given or "", MAX_ALT_TEXT_CHARS)
    return (described, True) if described else (fallback_alt_text(title, name), False)


def fallback_alt_text(title: str, name: str) -> str:
    """ "Chart: Delays by carrier" from what the bot knows: the title, or the file's name as words
    (a screen reader spells "delays_by_carrier.png" out as "delays underscore by underscore…")."""
    words = title if title and title != name else _NAME_SEPARATORS.sub(" ", PurePosixPath(name).stem)
    return cut_at_word(f"Chart: {words.strip()}", MAX_ALT_TEXT_CHARS) if words.strip() else "Chart"
