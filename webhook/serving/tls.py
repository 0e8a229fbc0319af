"""The server's TLS context, reloaded when ``tls.crt`` or ``tls.key`` change on disk.

gunicorn asks its ``ssl_context`` hook for a context on every new connection and would
otherwise read the files only at worker start. We keep one context per process and build
a new one when either file's identity (inode, size, mtime, following symlinks, so a
Secret's ``..data`` swap counts) changes. A pair that does not load (a key half-rotated)
keeps the old context in use and is logged once, so no handshake ever fails because of a
rotation. Connections already open keep the context they started with.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

log = logging.getLogger("gpu_webhook.tls")
Stamp = tuple[tuple[int, int, int], ...]


# TLS 1.2 suites: forward secrecy and AEAD only (what Mozilla's "intermediate" profile
# keeps). OpenSSL's default list still offers two CBC suites. TLS 1.3 suites are all AEAD
# and not affected by this list.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """TLS 1.2 at least (1.3 preferred by OpenSSL's negotiation), HTTP/1.1 only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    context.set_alpn_protocols(["http/1.1"])
    # A client that shuts its write side after a request (a bare FIN, no close_notify) is
    # still owed its answer. OpenSSL 3 takes that EOF as fatal and answers with a
    # decode_error alert instead; HTTP's own framing (Content-Length, chunks) already tells
    # a cut request from a whole one, which is what close_notify would protect.
    context.options |= ssl.OP_IGNORE_UNEXPECTED_EOF
    # A client could otherwise renegotiate (TLS 1.2) in the middle of its answer: costly
    # handshakes on demand, and a write that must wait for a read.
    context.options |= ssl.OP_NO_RENEGOTIATION
    return context


def not_after(cert_file: Path) -> float | None:
    """When the first certificate of ``cert_file`` (the leaf) expires, as Unix time; None
    when it does not parse (the TLS context then refused it already)."""
    try:
        return x509.load_pem_x509_certificate(
            cert_file.read_bytes()
        ).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return None


class ReloadingContext:
    """``on_load`` hears the expiry (Unix time) of every certificate loaded: the server
    exports it as a gauge, so an alert sees the certificate in force, rotations included."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        on_load: Callable[[float], None] | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.on_load = on_load
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._stamp: Stamp | None = None
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        stamp = self._files_stamp()
        if stamp == self._stamp and self._context is not None:
            return self._context
        with self._lock:
            if stamp != self._stamp or self._context is None:
                self._reload(stamp)
            assert self._context is not None  # _reload raises when it has nothing to serve
            return self._context

    def _reload(self, stamp: Stamp) -> None:
        try:
            fresh = server_context(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            if self._context is None:
                raise
            log.error(
                "new TLS certificate not loaded; still serving the previous one",
                extra={"cert": str(self.cert_file), "error": str(exc)},
            )
        else:
            if self._context is not None:
                log.info("TLS certificate reloaded", extra={"cert": str(self.cert_file)})
            self._context = fresh
            self.reloads += 1
            expiry = not_after(self.cert_file)
            if self.on_load is not None and expiry is not None:
                self.on_load(expiry)
        self._stamp = stamp  # a broken pair is tried again only when the files change

    def _files_stamp(self) -> Stamp:
        return tuple(_stamp(path) for path in (self.cert_file, self.key_file))


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (info.st_ino, info.st_size, info.st_mtime_ns)
