"""Secrets hygiene: every secret the bot holds is replaced before text reaches logs, chat or records.

Known secret values (from settings) are replaced exactly; token-shaped strings (Slack, Anthropic,
AWS, Google keys, JWTs, private keys) and the logins of URLs are replaced by pattern, in case one
arrives from elsewhere.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

MASK = "[redacted]"
# Each token starts where a run of its characters starts (the look-behind), so a failed attempt is never
# retried from inside the same run: scanning stays linear however the text is built ("eyJeyJeyJ…" with no
# dot used to cost O(n²)). Private keys are cut out by `_mask_private_keys`, not by a lazy `.*?`.
_RUN = r"(?<![A-Za-z0-9_-])"
_TOKENS = re.compile(
    rf"{_RUN}(?:xox[abposr]-[A-Za-z0-9-]{{8,}}|xapp-[A-Za-z0-9-]{{8,}}|sk-ant-[A-Za-z0-9_-]{{8,}}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{5,})"
)
# The login part of a URL (`https://user:password@proxy/`, `https://token@host/`): a proxy's password in
# ANTHROPIC_BASE_URL reached stderr in httpx's request line, the SDK's debug records and doctor's table.
_URL_LOGIN = re.compile(r"(?<=://)[^\s/@]+@")
_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END [A-Z ]{0,40}PRIVATE KEY-----")
_KEY_BODY = re.compile(r"[A-Za-z0-9+/=\s:,-]*+")  # base64 lines and PEM headers of a cut-off key


def _mask_private_keys(text: str) -> str:
    """Replace every PEM private key; a key whose END marker is missing (clipped) loses its body too.

    One forward pass: each search starts where the previous one stopped, so the cost is linear.
    """
    if "PRIVATE KEY-----" not in text:
        return text
    parts: list[str] = []
    pos = 0
    while begin := _KEY_BEGIN.search(text, pos):
        parts.append(text[pos : begin.start()])
        parts.append(MASK)
        end = _KEY_END.search(text, begin.end())
        if end is None:  # cut off: the rest of the key is its body, whatever follows is kept
            pos = _KEY_BODY.match(text, begin.end()).end()
            parts.append(_mask_private_keys_without_end(text, pos))
            return "".join(parts)
        pos = end.end()
    parts.append(text[pos:])
    return "".join(parts)


def _mask_private_keys_without_end(text: str, pos: int) -> str:
    """The rest of a text known to hold no END marker: each BEGIN swallows the key body after it."""
    parts: list[str] = []
    while begin := _KEY_BEGIN.search(text, pos):
        parts += [text[pos : begin.start()], MASK]
        pos = _KEY_BODY.match(text, begin.end()).end()
    parts.append(text[pos:])
    return "".join(parts)


CLIP_NOTE = "\n… [clipped]"
MIN_CUT = 6  # a secret's beginning this long at a text's end is masked (shorter: ordinary endings)
_CUT_MARK = re.compile(r"\s*…")
SECRET_MARGIN = 4096  # longer than any secret or token we redact by value


def without_login(url: str) -> str:
    """`url` as it may be shown: its user name and password, if any, replaced."""
    return _URL_LOGIN.sub(MASK + "@", url)


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with a note when it was cut."""
    return text if len(text) <= limit else text[: max(0, limit - len(CLIP_NOTE))] + CLIP_NOTE


def redact_clipped(text: str, limit: int, redact: Callable[[str], str] | None) -> str:
    """``text`` clipped to ``limit`` characters and redacted, with work bounded by ``limit``.

    Clipped first with a margin; a secret straddling that cut is then either masked or still the
    unchanged tail of the window, which is dropped: no prefix of a secret survives the cut.
    """
    if redact is None:
        return clip(text, limit)
    if len(text) <= limit + SECRET_MARGIN:
        return clip(redact(text), limit)
    window = text[: limit + SECRET_MARGIN]
    kept = redact(window)
    same = 0  # the unchanged tail the redaction did not touch, up to the margin
    while same < SECRET_MARGIN and same < len(kept) and kept[-1 - same] == window[-1 - same]:
        same += 1
    kept = kept[: len(kept) - same]
    return clip(kept, limit) if len(kept) > limit else kept + CLIP_NOTE


class Redactor:
    """Replaces secrets in strings, nested data and events."""

    def __init__(self, secrets: list[str]):
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        value = self._mask_cut_secret(value)
        return _TOKENS.sub(MASK, _URL_LOGIN.sub(MASK + "@", _mask_private_keys(value)))

    def _mask_cut_secret(self, value: str) -> str:
        """A text cut inside a secret before it was redacted — a step's 100-character summary, a
        refusal's first sentence, output clipped with "… [output cut at N bytes]" after it — has the
        secret's beginning where it ends or where its cut mark starts, which the exact replacement
        cannot see (the audit kept 18 of a signing secret's 32 characters): masked too."""
        if not self.secrets:
            return value
        # Where a cut may be: the end, and every "…" (each of our cut marks has one), blank space before it.
        ends = [len(value)] + [m.start() for m in _CUT_MARK.finditer(value)]
        for end in sorted(set(ends), reverse=True):  # from the last, so earlier offsets stay right
            value = self._mask_before(value, end)
        return value

    def _mask_before(self, value: str, end: int) -> str:
        """`value` with a secret's beginning that runs up to `end` masked."""
        for secret in self.secrets:
            if len(secret) <= MIN_CUT:
                continue
            head = secret[:MIN_CUT]
            i = value.find(head, max(0, end - len(secret) + 1), end)
            while i != -1:
                if secret.startswith(value[i:end]):
                    return value[:i] + MASK + value[end:]
                i = value.find(head, i + 1, end)
        return value

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.data(v) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self.event(value)
        return value

    def event(self, event: Any) -> Any:
        """A copy of a frozen event dataclass with every string field redacted."""
        if not dataclasses.is_dataclass(event):
            return event
        changes = {}
        for f in dataclasses.fields(event):
            value = getattr(event, f.name)
            new = self.data(value)
            if new != value:
                changes[f.name] = new
        return dataclasses.replace(event, **changes) if changes else event


# A URL's query in a log line: pre-authenticated links carry their credential there (a Teams file's
# `downloadUrl` and OneDrive's upload URL `tempauth=`, S3 presigned `X-Amz-Signature=`, this bot's own
# signed `/files` links). httpx logs every request's whole URL at INFO, and `serve` logs at INFO: the
# query is cut from every logged URL (log lines only: an answer may hold a signed link on purpose).


_WORD = re.compile(r"[^\s\"'<>]+")  # a URL as a log line holds it: up to a space, a quote or a bracket


def without_queries(text: str) -> str:
    """`text` with the query of every URL in it replaced by `?[redacted]`. Linear: each word is
    searched once, for its `://` and the first `?` after it."""
    if "://" not in text or "?" not in text:
        return text
    return _WORD.sub(_query_cut, text)


def _query_cut(match: re.Match[str]) -> str:
    word = match.group(0)
    scheme_end = word.find("://")
    query = word.find("?", scheme_end) if scheme_end > 0 else -1
    return word if query < 0 else word[: query + 1] + MASK


class RedactingFilter(logging.Filter):
    """A logging filter that redacts messages and arguments of every record."""

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Format the message once (any argument type, mappings too), then redact the result."""
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep what we can, redacted
            message = f"{record.msg} {record.args!r}"
        record.msg, record.args = without_queries(self.redactor.text(message)), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self.redactor.text(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = self.redactor.text(record.stack_info)
        return True


def install_log_redaction(secrets: list[str]) -> None:
    """Redact every log record of every handler of the root logger."""
    filt = RedactingFilter(Redactor(secrets))
    for handler in logging.getLogger().handlers:
        handler.addFilter(filt)
