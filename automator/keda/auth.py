"""Authentication KEDA's `authModes` can use: bearer token, API key (header X-API-KEY or query api_key),
basic, and tls (a client certificate the HTTPS listener verified against --keda-tls-client-ca-file);
secrets come from files (pure: standard library only).

No mode configured: the endpoint is open (run it on a cluster-internal Service). Any configured mode
that matches admits the request. Comparisons are constant-time on bytes; nothing secret is ever logged
or echoed.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from steward_common.settingspec import SettingError

API_KEY_HEADER = "X-API-KEY"
API_KEY_PARAM = "api_key"


@dataclass(frozen=True)
class AuthConfig:
    bearer_tokens: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()
    basic: tuple[tuple[str, str], ...] = ()
    client_certificates: bool = False  # mutual TLS: a verified client certificate admits the request

    @property
    def enabled(self) -> bool:
        return bool(self.bearer_tokens or self.api_keys or self.basic or self.client_certificates)


def _lines(path: str | None, flag: str) -> tuple[str, ...]:
    if not path:
        return ()
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingError(f"{flag}: cannot read {path}: {e.strerror or e}") from None
    # Stripped before the comment test: an indented "# ..." line is a comment, never a secret.
    stripped = (line.strip() for line in text.splitlines())
    lines = tuple(line for line in stripped if line and not line.startswith("#"))
    if not lines:
        raise SettingError(f"{flag}: {path} holds no secret (an empty file would lock everyone out)")
    return lines


def load(
    bearer_file: str | None,
    api_key_file: str | None,
    basic_file: str | None,
    client_ca_file: str | None = None,
) -> AuthConfig:
    basic: list[tuple[str, str]] = []
    for i, line in enumerate(_lines(basic_file, "--keda-basic-auth-file")):
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise SettingError(f"--keda-basic-auth-file: line {i + 1}: expected USER:PASSWORD")
        basic.append((user, password))
    return AuthConfig(
        _lines(bearer_file, "--keda-bearer-token-file"),
        _lines(api_key_file, "--keda-api-key-file"),
        tuple(basic),
        bool(client_ca_file),
    )


def _any_equal(given: bytes, accepted: tuple[str, ...]) -> bool:
    found = False
    for secret in accepted:  # every comparison runs: the time says nothing about which one matched
        found |= hmac.compare_digest(given, secret.encode())
    return found


def _raw(value: str | None) -> bytes:
    """A header as the bytes it came in (WSGI gives latin-1 text): no decoding can fail or fold case."""
    return (value or "").encode("latin-1", "replace")


def allowed(
    config: AuthConfig,
    header: Callable[[str], str | None],
    query: Mapping[str, str],
    client_verified: bool = False,
) -> bool:
    """True when no mode is configured or the request satisfies one of the configured modes.

    `client_verified`: the connection presented a certificate the listener verified against the client CA.
    """
    if not config.enabled:
        return True
    if config.client_certificates and client_verified:
        return True
    authorization = _raw(header("Authorization"))
    # "Bearer <token>" and "Basic <credentials>" exactly: one space, the scheme's own case-insensitive name.
    scheme, sep, credentials = authorization.partition(b" ")
    if sep and credentials and b" " not in credentials:
        if config.bearer_tokens and scheme.lower() == b"bearer":
            if _any_equal(credentials, config.bearer_tokens):
                return True
        elif config.basic and scheme.lower() == b"basic":
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            if b":" in decoded and _any_equal(decoded, tuple(f"{u}:{p}" for u, p in config.basic)):
                return True
    if config.api_keys:
        key = _raw(header(API_KEY_HEADER)) or query.get(API_KEY_PARAM, "").encode("utf-8", "replace")
        if key and _any_equal(key, config.api_keys):
            return True
    return False
