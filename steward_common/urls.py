"""Service URLs given on the command line (pure): checked to be http(s) with a host, and shown without their
userinfo. The redaction does not rely on `//`: `admin:hunter2@prom:9090` (no scheme) is refused as a URL,
and the refusal itself must not print the password, so everything before the last `@` of the authority is
replaced, whatever precedes it."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

SCHEMES = ("http", "https")
HIDDEN = "***"


def _authority_start(text: str) -> int:
    """Where the authority begins: after `scheme://`, else at the start (a URL written without a scheme)."""
    marker = text.find("//")
    return marker + 2 if marker >= 0 else 0


def redact_url(text: str) -> str:
    """`text` with any userinfo replaced by `***` (up to its last `@`: a password may hold `/` or `@`).

    Over-redacting an `@` in a path or query is harmless; showing a password is not."""
    start = _authority_start(text)
    at = text.rfind("@", start)
    if at < 0:
        return text
    return text[:start] + HIDDEN + text[at:]


def http_url(text: str) -> str:
    """A base URL whose scheme is http or https and which names a host; ValueError (never showing the
    userinfo) otherwise."""
    stripped = text.strip()
    try:
        parts = urlsplit(stripped)
        port = parts.port  # ValueError for a port that is not a number in [0, 65535]
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme.lower() not in SCHEMES or not parts.hostname or port == 0:
        raise ValueError(f"expected an http:// or https:// URL with a host, got {redact_url(stripped)!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"expected a base URL without query or fragment, got {redact_url(stripped)!r}")
    return stripped


def userinfo(url: str) -> tuple[str, str] | None:
    """(user, password) of an http(s) URL's userinfo, percent-decoded; None when it has none."""
    parts = urlsplit(url)
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")
