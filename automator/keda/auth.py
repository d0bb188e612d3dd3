"""Authentication KEDA's `authModes` can use: bearer token, API key (header X-API-KEY or query api_key)
and basic; secrets come from files (pure: standard library only).

No mode configured: the endpoint is open (run it on a cluster-internal Service). Any configured mode
that matches admits the request. Comparisons are constant-time; nothing secret is ever logged or echoed.
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

    @property
    def enabled(self) -> bool:
        return bool(self.bearer_tokens or self.api_keys or self.basic)

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(
            m
            for m, on in (("bearer", self.bearer_tokens), ("apiKey", self.api_keys), ("basic", self.basic))
            if on
        )


def _lines(path: str | None, flag: str) -> tuple[str, ...]:
    if not path:
        return ()
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingError(f"{flag}: cannot read {path}: {e.strerror or e}") from None
    lines = tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    if not lines:
        raise SettingError(f"{flag}: {path} holds no secret (an empty file would lock everyone out)")
    return lines


def load(bearer_file: str | None, api_key_file: str | None, basic_file: str | None) -> AuthConfig:
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
    )


def _any_equal(given: str, accepted: tuple[str, ...]) -> bool:
    found = False
    for secret in accepted:  # every comparison runs: the time says nothing about which one matched
        found |= hmac.compare_digest(given.encode(), secret.encode())
    return found


def allowed(config: AuthConfig, header: Callable[[str], str | None], query: Mapping[str, str]) -> bool:
    """True when no mode is configured or the request satisfies one of the configured modes."""
    if not config.enabled:
        return True
    authorization = header("Authorization") or ""
    scheme, _, credentials = authorization.partition(" ")
    credentials = credentials.strip()
    if config.bearer_tokens and scheme.lower() == "bearer" and _any_equal(credentials, config.bearer_tokens):
        return True
    if config.basic and scheme.lower() == "basic":
        try:
            user, sep, password = base64.b64decode(credentials, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user, sep, password = "", "", ""
        if sep and _any_equal(f"{user}:{password}", tuple(f"{u}:{p}" for u, p in config.basic)):
            return True
    if config.api_keys:
        key = header(API_KEY_HEADER) or query.get(API_KEY_PARAM) or ""
        if key and _any_equal(key, config.api_keys):
            return True
    return False
