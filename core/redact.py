"""Secrets hygiene: every secret the bot holds is replaced before text reaches logs, chat or records.

Known secret values (from settings) are replaced exactly; token-shaped strings (Slack, Anthropic,
AWS, Google keys, JWTs, private keys) are replaced by pattern, in case one arrives from elsewhere.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

MASK = "[redacted]"
_PATTERNS = re.compile(
    r"(xox[abposr]-[A-Za-z0-9-]{8,}|xapp-[A-Za-z0-9-]{8,}|sk-ant-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{5,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)"
)


class Redactor:
    """Replaces secrets in strings, nested data and events."""

    def __init__(self, secrets: list[str]):
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return _PATTERNS.sub(MASK, value)

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
        record.msg, record.args = self.redactor.text(message), None
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
