"""What people typed, from Slack's encoding of it.

Slack sends message and slash-command text with `&`, `<` and `>` as HTML entities and with links,
channels, people and dates in angle brackets (https://docs.slack.dev/messaging/formatting-message-text).
Taken as it came, "flights with dep_delay > 60 & arr_delay < 0" reached the model as
`dep_delay &gt; 60 &amp; arr_delay &lt; 0`, and the stored question came back re-escaped
(`&amp;gt;`) wherever it was shown again. Decoded once, as people read it, the question is the same
text on every surface.
"""

from __future__ import annotations

import re

_ANGLED = re.compile(r"<([^<>]*)>")
_SPECIAL = {"here": "@here", "channel": "@channel", "everyone": "@everyone"}


def decoded(text: str) -> str:
    """`text` as people read it: entities unescaped, `<url|label>` as "label (url)", `<#C|name>` as
    #name, `<@U|name>` as @name (without a name: @U), `<!here>` as @here, a user group or date as the
    words Slack gives for it."""
    return _unescape(_ANGLED.sub(_readable, text))


def _readable(match: re.Match[str]) -> str:
    inside = match.group(1)
    target, _, label = inside.partition("|")
    label = _unescape(label)
    if target.startswith("#"):
        return f"#{label or target[1:]}"
    if target.startswith("@"):
        return f"@{label or target[1:]}"
    if target.startswith("!"):
        name = target[1:].split("^", 1)[0]
        if name in _SPECIAL:
            return _SPECIAL[name]
        return label or f"@{name}"  # a user group's label is "@team"; a date's is its fallback text
    url = _unescape(target)
    if url.startswith("mailto:"):
        return label or url.removeprefix("mailto:")
    return f"{label} ({url})" if label and label != url else url


def _unescape(text: str) -> str:
    """Slack escapes exactly these three; `&amp;` last, so a typed "&amp;lt;" stays "&lt;"."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
