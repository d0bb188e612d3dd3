"""The KEDA listeners' certificates: checked at start (a bad file is a SettingError naming its flag, so the
service exits 2 before any pass) and reloaded when the files change (pure: standard library only).

Secret volumes are updated by a symlink swap (`..data` points to a new directory): a file's identity is
the (device, inode, size, mtime) of what its path resolves to now, read at most every `check_seconds`,
on the next handshake. A change loads the new files into a new context; connections in flight keep the
one they started with. Files caught halfway through a rotation (a new certificate, the old key) do not
load: the last good ones stay in use and the next check tries again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from steward_common.settingspec import SettingError

log = logging.getLogger(__name__)

CERT_FLAG, KEY_FLAG, CA_FLAG = "--keda-tls-cert-file", "--keda-tls-key-file", "--keda-tls-client-ca-file"
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    key: str
    ca: str | None = None  # the client CA: mutual TLS


@dataclass(frozen=True)
class Loaded:
    cert: bytes
    key: bytes
    ca: bytes | None
    context: ssl.SSLContext  # TLS 1.2+ server context; with a CA, a client certificate it signed required
    stamp: tuple[tuple[int, int, int, int], ...]  # the files' identities when read


def _stamp(files: TlsFiles) -> tuple[tuple[int, int, int, int], ...]:
    stamps = []
    for path in (files.cert, files.key, files.ca):
        if path:
            st = os.stat(path)  # follows the symlinks: a swapped Secret volume is a new identity
            stamps.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


def _read(flag: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SettingError(f"{flag}: cannot read {path}: {e.strerror or e}") from None


def load(files: TlsFiles) -> Loaded:
    """The files, checked; SettingError naming the flag of the first bad one."""
    stamp = _stamp_or_error(files)
    cert, key = _read(CERT_FLAG, files.cert), _read(KEY_FLAG, files.key)
    ca = _read(CA_FLAG, files.ca) if files.ca else None
    if PEM_CERTIFICATE not in cert:
        raise SettingError(f"{CERT_FLAG}: {files.cert} holds no PEM certificate")
    if ca is not None and PEM_CERTIFICATE not in ca:
        raise SettingError(f"{CA_FLAG}: {files.ca} holds no PEM certificate")
    try:  # parsed on a context of its own: the serving certificate is never a trusted client CA
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as e:
        raise SettingError(f"{CERT_FLAG}: {files.cert} is not a usable certificate: {e}") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert, files.key)
    except (ssl.SSLError, OSError) as e:
        raise SettingError(
            f"{KEY_FLAG}: {files.key} is not the private key of {files.cert} (or not a usable key): {e}"
        ) from None
    if files.ca:
        try:
            context.load_verify_locations(cafile=files.ca)
        except (ssl.SSLError, OSError) as e:
            raise SettingError(f"{CA_FLAG}: {files.ca} is not a usable CA certificate: {e}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return Loaded(cert, key, ca, context, stamp)


def _stamp_or_error(files: TlsFiles) -> tuple[tuple[int, int, int, int], ...]:
    for flag, path in ((CERT_FLAG, files.cert), (KEY_FLAG, files.key), (CA_FLAG, files.ca)):
        if path and not os.path.isfile(path):
            raise SettingError(f"{flag}: {path} is not a readable file")
    return _stamp(files)


class ReloadingTLS:
    """The current certificates of a listener; `current()` reloads them when the files changed."""

    def __init__(
        self, files: TlsFiles, check_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.files = files
        self.check_seconds = check_seconds
        self.clock = clock
        self.loaded = load(files)  # SettingError at start
        self.version = 0  # +1 per reload
        self._checked = clock()
        self._failed: tuple[tuple[int, int, int, int], ...] | None = None  # files that did not load
        self._lock = threading.Lock()

    def current(self) -> Loaded:
        now = self.clock()
        if now - self._checked < self.check_seconds or not self._lock.acquire(blocking=False):
            return self.loaded  # checked recently, or another handshake is checking now
        try:
            self._checked = now
            try:
                stamp = _stamp(self.files)
            except OSError:
                return self.loaded  # a file missing for a moment during a swap: keep the last good ones
            if stamp != self.loaded.stamp:
                try:
                    self.loaded = load(self.files)
                    self.version += 1
                    self._failed = None
                    log.info("KEDA TLS: reloaded %s (version %d)", self.files.cert, self.version)
                except SettingError as e:
                    if stamp != self._failed:  # once per new state of the files, not per handshake
                        log.warning("KEDA TLS: the changed files do not load, keeping the last good: %s", e)
                    self._failed = stamp
            return self.loaded
        finally:
            self._lock.release()
