"""The server's TLS context, reloaded when ``tls.crt`` or ``tls.key`` change on disk.

gunicorn asks its ``ssl_context`` hook for a context on every new connection and would
otherwise read the files only at worker start. We keep one context per process and build
a new one when either file's identity (inode, size, mtime, following symlinks, so a
Secret's ``..data`` swap counts) changes. A pair that does not load (a key half-rotated)
keeps the old context in use and is logged once, so no handshake ever fails because of a
rotation. Connections already open keep the context they started with.

A rotation is also refused when it would serve worse than the pair in force: a leaf that
has expired, is not valid yet, or expires before the one in force (issue 41: a rotation to
a pair of the same CA that had expired a week before was put in force, and no verifying
client could connect again). The old pair keeps serving, the refusal is logged and counted
(``on_refusal``), and a pair that is only not valid yet is tried again once it is. The
first load takes any pair that loads: there is nothing else to serve, and the expiry gauge
tells the alerts. Restarting the pod is how to shorten a certificate's life on purpose.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

log = logging.getLogger("gpu_webhook.tls")
Stamp = tuple[tuple[int, int, int], ...]

# Why a pair on disk was not put in force (the label of the refusals counter).
UNLOADABLE = "unloadable"
EXPIRED = "expired"
NOT_YET_VALID = "not-yet-valid"
EXPIRES_EARLIER = "expires-earlier"
REFUSALS = (UNLOADABLE, EXPIRED, NOT_YET_VALID, EXPIRES_EARLIER)


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


@dataclass(frozen=True, slots=True)
class Validity:
    """The leaf's window (the first certificate of ``tls.crt``), in Unix time."""

    not_before: float
    not_after: float


def validity(data: bytes) -> Validity | None:
    """None when the bytes hold no certificate (the TLS context refuses them anyway)."""
    try:
        leaf = x509.load_pem_x509_certificate(data)
    except ValueError:
        return None
    return Validity(
        not_before=leaf.not_valid_before_utc.timestamp(),
        not_after=leaf.not_valid_after_utc.timestamp(),
    )


def refusal(new: Validity, *, in_force: Validity | None, now: float) -> str | None:
    """Why a rotation to ``new`` would serve worse than ``in_force``, or None. Equal
    expiries are taken (the same certificate written again)."""
    if now >= new.not_after:
        return EXPIRED
    if now < new.not_before:
        return NOT_YET_VALID
    if in_force is not None and new.not_after < in_force.not_after:
        return EXPIRES_EARLIER
    return None


def not_after(cert_file: Path) -> float | None:
    """When the first certificate of ``cert_file`` (the leaf) expires, as Unix time; None
    when it does not parse (the TLS context then refused it already)."""
    try:
        found = validity(cert_file.read_bytes())
    except OSError:
        return None
    return None if found is None else found.not_after


class ReloadingContext:
    """``on_load`` hears the expiry (Unix time) of every certificate loaded: the server
    exports it as a gauge, so an alert sees the certificate in force, rotations included.
    ``on_refusal`` hears why a pair on disk was not put in force (one of ``REFUSALS``),
    once per change of the files (and once per retry of a pair not valid yet)."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        on_load: Callable[[float], None] | None = None,
        on_refusal: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.on_load = on_load
        self.on_refusal = on_refusal
        self.clock = clock
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._in_force: Validity | None = None
        self._stamp: Stamp | None = None
        self._retry_at: float | None = None  # when a pair not valid yet becomes valid
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        stamp = self._files_stamp()
        if stamp == self._stamp and self._context is not None and not self._retry_due():
            return self._context
        with self._lock:
            if stamp != self._stamp or self._context is None or self._retry_due():
                self._reload(stamp)
            assert self._context is not None  # _reload raises when it has nothing to serve
            return self._context

    def _retry_due(self) -> bool:
        return self._retry_at is not None and self.clock() >= self._retry_at

    def _reload(self, stamp: Stamp) -> None:
        self._retry_at = None
        try:
            before = self.cert_file.read_bytes()
            fresh = server_context(self.cert_file, self.key_file)
            changed = self.cert_file.read_bytes() != before
        except (OSError, ssl.SSLError) as exc:
            if self._context is None:
                raise
            self._refuse(UNLOADABLE, error=str(exc))
        else:
            if changed and self._context is not None:
                return  # rewritten while loading: judged at the next call, stamp unchanged
            self._judge(fresh, validity(before))
        self._stamp = stamp  # a broken pair is tried again only when the files change

    def _judge(self, fresh: ssl.SSLContext, found: Validity | None) -> None:
        now = self.clock()
        if self._context is not None and found is not None:
            reason = refusal(found, in_force=self._in_force, now=now)
            if reason is not None:
                if reason == NOT_YET_VALID:
                    self._retry_at = found.not_before
                self._refuse(reason, found=found)
                return
            log.info("TLS certificate reloaded", extra={"cert": str(self.cert_file)})
        elif found is not None and refusal(found, in_force=None, now=now) is not None:
            log.error(
                "the only TLS certificate there is is not valid now; serving it",
                extra={"cert": str(self.cert_file), **_window(found)},
            )
        self._context, self._in_force = fresh, found
        self.reloads += 1
        if self.on_load is not None and found is not None:
            self.on_load(found.not_after)

    def _refuse(self, reason: str, *, found: Validity | None = None, error: str = "") -> None:
        extra: dict[str, object] = {"cert": str(self.cert_file), "reason": reason}
        if error:
            extra["error"] = error
        if found is not None:
            extra.update(_window(found))
        if self._in_force is not None:
            extra["in_force_not_after"] = _iso(self._in_force.not_after)
        log.error(
            "new TLS certificate not put in force; still serving the previous one", extra=extra
        )
        if self.on_refusal is not None:
            self.on_refusal(reason)

    def _files_stamp(self) -> Stamp:
        return tuple(_stamp(path) for path in (self.cert_file, self.key_file))


def _window(found: Validity) -> dict[str, object]:
    return {"not_before": _iso(found.not_before), "not_after": _iso(found.not_after)}


def _iso(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment, dt.UTC).isoformat()


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (info.st_ino, info.st_size, info.st_mtime_ns)
