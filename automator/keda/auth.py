"""Authentication KEDA's `authModes` can use: bearer token, API key (header X-API-KEY or query api_key),
basic, and tls (a client certificate the HTTPS listener verified against --keda-tls-client-ca-file);
secrets come from files (pure: standard library only).

No mode configured: the endpoint is open (run it on a cluster-internal Service). Any configured mode
that matches admits the request. Comparisons are constant-time on bytes; nothing secret is ever logged
or echoed. A line of a token, API-key or basic file may end with `namespaces=a,b`: that credential then
reads those namespaces only (403 for another); without it, every namespace.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from steward_common.settingspec import SettingError

API_KEY_HEADER = "X-API-KEY"
API_KEY_PARAM = "api_key"
SCOPE = "namespaces="
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# (mode, secret) -> the namespaces that credential may read; modes: bearer, apiKey, basic ("user:password").
Scopes = Mapping[tuple[str, str], frozenset[str]]


@dataclass(frozen=True)
class Grant:
    """What an admitted request may read: `namespaces` None is every namespace."""

    namespaces: frozenset[str] | None = None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


EVERYTHING = Grant()


@dataclass(frozen=True)
class AuthConfig:
    bearer_tokens: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()
    basic: tuple[tuple[str, str], ...] = ()
    client_certificates: bool = False  # mutual TLS: a verified client certificate admits the request
    scopes: Scopes = field(default_factory=dict)  # credentials limited to namespaces

    @property
    def enabled(self) -> bool:
        return bool(self.bearer_tokens or self.api_keys or self.basic or self.client_certificates)


def _scoped(line: str, flag: str, i: int) -> tuple[str, frozenset[str] | None]:
    """A credential line's secret and, when it ends with ` namespaces=a,b`, its namespaces."""
    secret, sep, scope = line.rpartition(" " + SCOPE)
    if not sep:
        if line.startswith(SCOPE):  # a scope with no secret before it: never a secret itself
            raise SettingError(f"{flag}: line {i + 1}: expected SECRET namespaces=NS[,NS...]")
        return line, None
    names = frozenset(n.strip() for n in scope.split(",") if n.strip())
    bad = [n for n in names if len(n) > 63 or not _NAMESPACE.fullmatch(n)]
    if not names or bad or not secret.strip():
        raise SettingError(f"{flag}: line {i + 1}: expected SECRET namespaces=NS[,NS...] (namespace names)")
    return secret.strip(), names


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
    scopes: dict[tuple[str, str], frozenset[str]] = {}

    def secrets(mode: str, path: str | None, flag: str) -> list[str]:
        found = []
        for i, line in enumerate(_lines(path, flag)):
            secret, names = _scoped(line, flag, i)
            if names is not None:
                scopes[(mode, secret)] = names
            found.append(secret)
        return found

    basic: list[tuple[str, str]] = []
    for i, line in enumerate(secrets("basic", basic_file, "--keda-basic-auth-file")):
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise SettingError(f"--keda-basic-auth-file: line {i + 1}: expected USER:PASSWORD")
        basic.append((user, password))
    return AuthConfig(
        tuple(secrets("bearer", bearer_file, "--keda-bearer-token-file")),
        tuple(secrets("apiKey", api_key_file, "--keda-api-key-file")),
        tuple(basic),
        bool(client_ca_file),
        scopes,
    )


def _matching(given: bytes, accepted: tuple[str, ...]) -> str | None:
    found = None
    for secret in accepted:  # every comparison runs: the time says nothing about which one matched
        if hmac.compare_digest(given, secret.encode()):
            found = secret
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
    """True when no mode is configured or the request satisfies one of the configured modes."""
    return grant(config, header, query, client_verified) is not None


def grant(
    config: AuthConfig,
    header: Callable[[str], str | None],
    query: Mapping[str, str],
    client_verified: bool = False,
) -> Grant | None:
    """What the request may read: EVERYTHING when no mode is configured, the matching credential's
    namespaces, or None (401) when it satisfies no configured mode.

    `client_verified`: the connection presented a certificate the listener verified against the client CA.
    """
    if not config.enabled:
        return EVERYTHING
    if config.client_certificates and client_verified:
        return EVERYTHING
    authorization = _raw(header("Authorization"))
    # "Bearer <token>" and "Basic <credentials>" exactly: one space, the scheme's own case-insensitive name.
    scheme, sep, credentials = authorization.partition(b" ")
    if sep and credentials and b" " not in credentials:
        if config.bearer_tokens and scheme.lower() == b"bearer":
            if (token := _matching(credentials, config.bearer_tokens)) is not None:
                return Grant(config.scopes.get(("bearer", token)))
        elif config.basic and scheme.lower() == b"basic":
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            pairs = tuple(f"{u}:{p}" for u, p in config.basic)
            if b":" in decoded and (pair := _matching(decoded, pairs)) is not None:
                return Grant(config.scopes.get(("basic", pair)))
    if config.api_keys:
        key = _raw(header(API_KEY_HEADER)) or query.get(API_KEY_PARAM, "").encode("utf-8", "replace")
        if key and (found := _matching(key, config.api_keys)) is not None:
            return Grant(config.scopes.get(("apiKey", found)))
    return None
