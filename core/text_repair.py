"""Text that UTF-8 can encode, from text that may hold lone surrogates.

Python turns bytes it cannot decode into lone surrogates instead of failing: argv and stdin are
decoded with `surrogateescape`, so `datathread ask "$(cat q.txt)"` with a Latin-1 "M\\xfcnchen" arrives
as "M\\udcfcnchen", and under `LC_ALL=C` (with UTF-8 mode off) every non-ASCII byte does. JSON may
carry lone `\\udcfc` escapes too (Slack's and Teams' payloads are JSON). Such a string is a valid `str`
until something encodes it: the Messages API request, the notebook, the log file. Stored in a session's
history it broke every later question of that session, for good.

So text is repaired where it enters (`IncomingMessage`) and where stored text is loaded (the history's
`repair`, the stores' turn records), and nothing after has to think about it.

How a surrogate-escaped byte reads: the escapes are turned back into the bytes they stand for, and the
bytes decode as UTF-8 wherever they are valid UTF-8 (under `LC_ALL=C` that is all of a UTF-8 terminal's
text). A byte that is not valid UTF-8 reads as Windows-1252: text that is not UTF-8 is in practice a
Windows or Latin-1 file or paste, for whose letters (ü, é, ß) Latin-1 and Windows-1252 agree, and for
0x80–0x9F Windows-1252 has the characters such text means (€, curly quotes, dashes) where Latin-1 has
invisible control codes. The five bytes Windows-1252 leaves undefined read as U+FFFD. A lone `\\udc80`–
`\\udcff` from JSON is read as such a byte too: it is what a Python client's own `surrogateescape` sends.
A high surrogate followed by a low one is one character split in two (UTF-16); any other lone surrogate
reads as U+FFFD.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

_FALLBACK = "datathread.cp1252"
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_NOT_A_BYTE = re.compile("[\ud800-\udc7f\udd00-\udfff]")  # surrogates surrogateescape never makes


def _as_cp1252(exc: UnicodeError) -> tuple[str, int]:
    """The bytes UTF-8 refused, read as Windows-1252 (U+FFFD for its five undefined bytes)."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return exc.object[exc.start : exc.end].decode("cp1252", errors="replace"), exc.end


codecs.register_error(_FALLBACK, _as_cp1252)


def readable(text: str) -> str:
    """`text` with every lone surrogate resolved (see the module's docstring); unchanged when it has none."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    text = _PAIR.sub(lambda m: m[0].encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text)
    text = _NOT_A_BYTE.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", _FALLBACK)


def readable_data(value: Any) -> Any:
    """`value` (JSON-shaped: dicts, lists, strings, numbers) with `readable` applied to every string, keys
    included; what it does not know is returned as it is."""
    if isinstance(value, str):
        return readable(value)
    if isinstance(value, dict):
        return {readable_data(k): readable_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [readable_data(v) for v in value]
    if type(value) is tuple:
        return tuple(readable_data(v) for v in value)
    return value
