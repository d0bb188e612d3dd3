"""Declared settings: each flag is declared once (name, converter with its range, default, help) and read
from the command line, else its `GPU_STEWARD_*` environment variable, else the default.

Both binaries build their settings module on this (automator/settings.py, exporter/settings.py), so there is
one parser, one boolean grammar and one error format: `<flag or variable>: expected ..., got '...'`.
Pure: argparse and the standard library only.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")
ENV_PREFIX = "GPU_STEWARD_"


class SettingError(ValueError):
    """A flag or environment variable has a bad value; the message starts with its name."""


def env_name(flag: str) -> str:
    """--prometheus-url -> GPU_STEWARD_PROMETHEUS_URL (--web.config.file -> GPU_STEWARD_WEB_CONFIG_FILE)."""
    return ENV_PREFIX + flag.removeprefix("--").replace("-", "_").replace(".", "_").upper()


@dataclass(frozen=True)
class Setting(Generic[T]):
    flag: str
    convert: Callable[[str], T]
    default: str | None  # as text, the way the environment would give it; None = unset
    help: str
    metavar: str | None = None
    # value: --flag VALUE; switch: --flag alone means "true"; append: repeatable, joined with commas;
    # toggle: --flag / --no-flag
    action: Literal["value", "switch", "append", "toggle"] = "value"
    env_var: str | None = None  # when the variable is not the flag's own name (a list flag's plural)

    @property
    def env(self) -> str:
        return self.env_var or env_name(self.flag)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_").replace(".", "_")


def add_arguments(parser: argparse.ArgumentParser | Any, settings: Iterable[Setting[Any]]) -> None:
    """Add each setting as a flag whose help names its variable and default (parser or argument group)."""
    for s in settings:
        shown = f"; default {s.default}" if s.default not in (None, "") else ""
        help_text = f"{s.help} (env {s.env}{shown})"
        if s.action == "switch":
            parser.add_argument(s.flag, dest=s.dest, action="store_const", const="true", help=help_text)
        elif s.action == "toggle":
            parser.add_argument(s.flag, dest=s.dest, action=argparse.BooleanOptionalAction, help=help_text)
        elif s.action == "append":
            parser.add_argument(s.flag, dest=s.dest, action="append", metavar=s.metavar, help=help_text)
        else:
            parser.add_argument(s.flag, dest=s.dest, metavar=s.metavar, help=help_text)


def resolve(
    args: argparse.Namespace, settings: Iterable[Setting[Any]], environ: Mapping[str, str]
) -> dict[str, Any]:
    """dest -> converted value (None for an unset setting without default); SettingError names the source."""
    values: dict[str, Any] = {}
    for s in settings:
        given = getattr(args, s.dest, None)
        if given is not None:
            where, text = s.flag, _as_text(given)
        elif s.env in environ:
            where, text = s.env, environ[s.env]
        elif s.default is not None:
            where, text = f"{s.flag} (default)", s.default
        else:
            values[s.dest] = None
            continue
        try:
            values[s.dest] = s.convert(text)
        except ValueError as exc:
            raise SettingError(f"{where}: {exc}") from None
    return values


def _as_text(given: Any) -> str:
    """A parsed flag as the environment would give it: lists joined with commas, booleans true/false."""
    if isinstance(given, list):
        return ",".join(given)
    if isinstance(given, bool):
        return "true" if given else "false"
    return str(given)


# --- converters: text -> value; ValueError says what was expected and what came -----------------------


# A whole number as flags, files and annotations give one: ASCII digits, a sign, no more than int64 holds
# (int() alone takes `1_000`, other scripts' digits, and thousands of digits).
_WHOLE = re.compile(r"[+-]?[0-9]{1,18}")
# Longer text is no number anyone writes; shown cut to this length.
MAX_NUMBER_LENGTH = 64


def shown(text: str) -> str:
    """repr of text, cut to MAX_NUMBER_LENGTH characters (an error message never echoes a whole file)."""
    return repr(text) if len(text) <= MAX_NUMBER_LENGTH else f"{text[:MAX_NUMBER_LENGTH]!r}..."


def whole_number(text: str) -> int:
    """int(text) for ASCII digits with an optional sign, surrounding whitespace allowed; ValueError else."""
    stripped = text.strip()
    if _WHOLE.fullmatch(stripped) is None:
        raise ValueError(f"not a whole number: {shown(text)}")
    return int(stripped)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_LENGTH:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def number(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite number in [low, high] ((low, high] with low_open)."""
    bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def convert(text: str) -> float:
        value = _float(text)
        if not (math.isfinite(value) and (value > low if low_open else value >= low) and value <= high):
            raise ValueError(f"expected a finite number in {bounds}, got {shown(text)}")
        return value

    return convert


def ratio(text: str) -> float:
    """A ratio in [0, 1] (0.05, not 5 %)."""
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a ratio in [0, 1] (e.g. 0.05 for 5 %), got {shown(text)}")
    return value


def integer(low: int, high: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = whole_number(text)
        except ValueError:
            raise ValueError(f"expected a whole number in [{low}, {high}], got {shown(text)}") from None
        if not low <= value <= high:
            raise ValueError(f"expected a whole number in [{low}, {high}], got {shown(text)}")
        return value

    return convert


port = integer(1, 65535)


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def choice(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return convert


def non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a value, got ''")
    return text


def csv(item: Callable[[str], str] = non_empty) -> Callable[[str], tuple[str, ...]]:
    """Comma-separated items, each checked by `item`; empty text is the empty tuple."""

    def convert(text: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(item(part.strip()) for part in text.split(",") if part.strip()))

    return convert


# A token or "user:password" line; anything larger is not a credential file.
MAX_SECRET_BYTES = 16384


def secret_file(flag: str, path: str) -> str:
    """A credential file's first line, stripped; SettingError names the flag, never the content."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise SettingError(f"{flag}: cannot read {path}: {e.strerror}") from e
    if len(raw) > MAX_SECRET_BYTES:
        raise SettingError(f"{flag}: {path} is larger than {MAX_SECRET_BYTES} bytes")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        raise SettingError(f"{flag}: cannot read {path}: not UTF-8 text") from e
    if not text or "\n" in text or not text.isprintable():
        raise SettingError(f"{flag}: {path} must hold one non-empty line of printable text")
    return text
