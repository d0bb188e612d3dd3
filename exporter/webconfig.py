"""`--web.config.file`: TLS and basic auth in the format of Prometheus' exporter-toolkit, so the file an
operator already wrote for node-exporter works here too.

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional (NoClientCert by default)
      client_ca_file: ca.crt         # needed to verify client certificates
      min_version: TLS12             # optional: TLS10..TLS13
      max_version: TLS13
    http_server_config:
      headers: {X-Frame-Options: deny}   # added to every response
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')

Read once at start: a bad file stops the exporter (exit 2) with the field named. Unknown keys are errors,
as in exporter-toolkit. Not supported (also errors): cipher_suites, curve_preferences, client_allowed_sans,
http2 settings.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from exporter import strict_yaml


class WebConfigError(ValueError):
    """The web config file is malformed; the message names the file and the field."""


CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_TLS_FIELDS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_AUTH_CACHE_SIZE = 256  # checked (user, password digest) pairs: bcrypt costs ~0.1 s per check
# bcrypt checks running at once: the other workers stay free for scrapes whose credentials are cached,
# whatever a flood of wrong passwords costs
MAX_CONCURRENT_CHECKS = 2


class AuthBusy(Exception):
    """Every bcrypt slot is taken: the request is answered 503 at once instead of waiting for one."""


# A bcrypt hash as htpasswd and the bcrypt library write it: version, cost (4-31), 22 salt and 31 hash chars.
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_BASIC = re.compile(rb"[Bb][Aa][Ss][Ii][Cc] +([A-Za-z0-9+/]+={0,2}) *")


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    # checked against when the user is unknown, so that a wrong name costs what a wrong password does
    # (None: made on first use, at the cost of the configured hashes)
    dummy_hash: bytes | None = None
    _checked: dict[tuple[bytes, bytes], bool] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(MAX_CONCURRENT_CHECKS)
    )

    def _hash_of(self, user: bytes) -> bytes | None:
        """The user's hash; every configured name is compared, in constant time, whichever matches."""
        found = None
        for name, hashed in self.users.items():
            if hmac.compare_digest(user, name.encode()):
                found = hashed
        return found

    def _dummy(self) -> bytes:
        if self.dummy_hash is None:
            cost = max((int(h[4:6]) for h in self.users.values()), default=10)
            self.dummy_hash = bcrypt.hashpw(b"", bcrypt.gensalt(rounds=cost))
        return self.dummy_hash

    def authorized(self, user: str | bytes, password: str | bytes) -> bool:
        """Whether the credentials match a user's bcrypt hash. An unknown user costs one bcrypt check too
        (against a dummy hash), so names cannot be told apart by timing; results are cached (a scrape
        every few seconds must not cost a bcrypt round each time), known and unknown names alike. AuthBusy
        when an uncached pair finds every bcrypt slot taken."""
        name = user.encode() if isinstance(user, str) else user
        secret = password.encode() if isinstance(password, str) else password
        digest = hashlib.sha256(secret).digest()
        with self._lock:
            known = self._checked.get((name, digest))
        if known is not None:
            return known
        hashed = self._hash_of(name)
        if not self._slots.acquire(blocking=False):
            raise AuthBusy
        try:
            ok = bcrypt.checkpw(secret, self._dummy() if hashed is None else hashed) and hashed is not None
        except ValueError:  # a hash bcrypt refuses (parse_web_config refuses them at start): no match
            ok = False
        finally:
            self._slots.release()
        with self._lock:
            if len(self._checked) >= _AUTH_CACHE_SIZE:
                self._checked.clear()
            self._checked[(name, digest)] = ok
        return ok

    def check_basic(self, header: str | None) -> bool:
        """True when no users are configured, or the Authorization header names one of them. Parsed on
        the header's bytes (latin-1, as HTTP carries them): any name or password bytes are a refusal at
        worst, never an error."""
        if not self.users:
            return True
        if not header:
            return False
        try:
            raw = header.encode("latin-1")
        except UnicodeEncodeError:
            return False
        match = _BASIC.fullmatch(raw)
        if match is None:
            return False
        try:
            decoded = base64.b64decode(match.group(1), validate=True)
        except binascii.Error:
            return False
        user, sep, password = decoded.partition(b":")
        return bool(sep) and self.authorized(user, password)


def _fail(where: str, message: str) -> WebConfigError:
    return WebConfigError(f"{where}: {message}")


def _mapping(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise _fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, f"expected a non-empty string, got {value!r}")
    return value


def _file(base: Path, value: Any, where: str) -> str:
    path = Path(_string(value, where))
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise _fail(where, f"no such file: {path}")
    return str(path)


def _tls(raw: dict[str, Any], base: Path, where: str) -> ssl.SSLContext:
    tls = _mapping(raw, where, _TLS_FIELDS)
    for required in ("cert_file", "key_file"):
        if required not in tls:
            raise _fail(f"{where}.{required}", "required field missing")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(
            _file(base, tls["cert_file"], f"{where}.cert_file"),
            _file(base, tls["key_file"], f"{where}.key_file"),
        )
    except ssl.SSLError as e:
        raise _fail(f"{where}.cert_file", f"cannot load the certificate and key: {e}") from e
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        raise _fail(f"{where}.client_auth_type", f"expected one of {', '.join(CLIENT_AUTH)}, got {auth!r}")
    context.verify_mode = CLIENT_AUTH[auth]
    if "client_ca_file" in tls:
        context.load_verify_locations(_file(base, tls["client_ca_file"], f"{where}.client_ca_file"))
    elif auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        raise _fail(f"{where}.client_ca_file", f"required with client_auth_type {auth}")
    for key, attr in (("min_version", "minimum_version"), ("max_version", "maximum_version")):
        if key in tls:
            if tls[key] not in TLS_VERSIONS:
                raise _fail(f"{where}.{key}", f"expected one of {', '.join(TLS_VERSIONS)}, got {tls[key]!r}")
            setattr(context, attr, TLS_VERSIONS[tls[key]])
    if "min_version" not in tls:
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # exporter-toolkit's default
    return context


def _check_salt(text: str, where: str) -> None:
    """bcrypt itself reads the hash's salt (at the lowest cost, not the hash's own: a check at start costs
    a millisecond): a salt the format allows but bcrypt refuses would make every request of the user fail."""
    try:
        bcrypt.hashpw(b"", f"{text[:4]}04${text[7:29]}".encode())
    except ValueError as e:
        raise _fail(where, f"bcrypt refuses the hash's salt ({e})") from None


def parse_web_config(data: Any, base: Path) -> WebConfig:
    raw = _mapping(data, "(document)", {"tls_server_config", "http_server_config", "basic_auth_users"})
    context = (
        _tls(raw["tls_server_config"], base, "tls_server_config") if raw.get("tls_server_config") else None
    )
    users: dict[str, bytes] = {}
    for user, hashed in _mapping(
        raw.get("basic_auth_users"), "basic_auth_users", set(raw.get("basic_auth_users") or {})
    ).items():
        where = f"basic_auth_users.{user}"
        text = _string(hashed, where)
        if not text.startswith(("$2a$", "$2b$", "$2y$")):
            raise _fail(where, "expected a bcrypt hash ($2y$...), not a plain password")
        if not _BCRYPT.fullmatch(text):
            raise _fail(where, "not a well-formed bcrypt hash ($2y$, a cost of 04 to 31, then 53 characters)")
        _check_salt(text, where)
        users[_string(user, where)] = text.encode()
    http = _mapping(raw.get("http_server_config"), "http_server_config", {"headers"})
    headers = _mapping(http.get("headers"), "http_server_config.headers", set(http.get("headers") or {}))
    for name, value in headers.items():
        _string(name, "http_server_config.headers")
        _string(value, f"http_server_config.headers.{name}")
    config = WebConfig(ssl_context=context, users=users, headers=tuple(headers.items()))
    if users:
        config._dummy()  # at start, so that the first unknown name costs no more than a known one
    return config


def load_web_config(path: Path) -> WebConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise WebConfigError(f"web config {path}: cannot read: {e}") from e
    try:
        data = strict_yaml.load(text)
    except (yaml.YAMLError, strict_yaml.DuplicateKeyError, strict_yaml.UnreadableError) as e:
        raise WebConfigError(f"web config {path}: not valid YAML: {e}") from e
    try:
        return parse_web_config(data, path.parent)
    except WebConfigError as e:
        raise WebConfigError(f"web config {path}: {e}") from e
