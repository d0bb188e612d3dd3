"""Text from objects shown safely (pure): object fields (names, annotation values, messages, a snapshot's
anything) may hold control characters, ANSI escape sequences or newlines, which would rewrite a
terminal, forge a log line or an Event's text. Each such character is shown as its Python escape
(`\\n`, `\\x1b`, `\\u200b`); printable text, non-ASCII letters included, is left exactly as it is."""

from __future__ import annotations

import logging


def _escape(char: str) -> str:
    return repr(char)[1:-1]  # only called for characters that are not printable, so never a quote


def printable(text: str) -> str:
    """`text` with every character str.isprintable refuses escaped; unchanged (the same object) when none."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(lines: list[str]) -> str:
    """Lines joined by newlines, each escaped first: a newline inside a field cannot start a line."""
    return "\n".join([printable(line) for line in lines])


class PrintableFormatter(logging.Formatter):
    """One log record, one line: the message is escaped (a traceback, added after it, is not)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


def log_handler(fmt: str) -> logging.Handler:
    """A stderr handler whose lines are escaped, for logging.basicConfig(handlers=[...])."""
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter(fmt))
    return handler
