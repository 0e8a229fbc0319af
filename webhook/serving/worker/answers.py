"""Writing an answer. A thread writes its answer only as far as the socket takes it without
waiting (``Outbox``); what is left goes to the main loop, which sends it as the client reads,
until ``ANSWER_SECONDS`` after the thread began answering, then closes the connection. The
API server reads an answer at once; sixteen clients that read a 6 MB answer 2 KB every 4 s
held every thread (each send waited up to its 10 s timeout, and the next one again) and no
review was answered for about 20 s. Kept answers are at most ``MAX_UNSENT_BYTES`` per
worker together: past that the oldest is cut (the API server's are gone in milliseconds).
Answers themselves are bounded (the patch in ``webhook.admission.response``, the message in
``webhook.engine.policy.decision``). A cut connection is reset, not closed: a close leaves
the kernel sending what it holds of the answer at the reader's pace. A TLS write that must
first read (renegotiation, which the TLS context refuses anyway) waits for the socket to be
readable, not writable, so that it cannot wake the loop again and again.

The head of a plain request's answer is written here too (``PlainAnswer``), as gunicorn's
``Response`` writes it."""

from __future__ import annotations

import re
import ssl
import time
from collections import deque
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from gunicorn import SERVER

IO_TIMEOUT_SECONDS = 10.0
SEND_BYTES = 256 * 1024


class Coalescing:
    """A socket for gunicorn's ``Response`` that sends the status line and headers in one
    write with the first part of the body: one TLS record and one system call per small
    answer instead of two, and one fewer time the serving thread lets go of the
    interpreter lock and must wait to take it back (behind another thread's review).
    Later writes go straight through."""

    __slots__ = ("_first", "_held", "_sock")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._first = True
        self._held = b""

    def sendall(self, data: bytes) -> None:
        if self._first:  # gunicorn writes the headers first, alone
            self._first = False
            self._held = bytes(data)
            return
        if self._held:
            data, self._held = self._held + bytes(data), b""
        self._sock.sendall(data)

    def flush(self) -> None:
        """Send what is held (an answer without a body has only its headers)."""
        held, self._held = self._held, b""
        if held:
            self._sock.sendall(held)

    def fileno(self) -> int:
        self.flush()  # sendfile writes to the descriptor itself: what is held goes first
        fd: int = self._sock.fileno()
        return fd

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class Outbox:
    """A socket for an answer whose ``sendall`` never waits: what the socket takes now is
    sent, the rest is kept (``unsent``) for the main loop's poller to send as the client
    reads it (see the module docstring).

    OpenSSL wants a write it could not finish retried with the same bytes: a write is
    a window of at most ``SEND_BYTES`` from the start of the first part kept, and parts
    are only ever added behind it, so a window retried is the window that failed."""

    __slots__ = ("_offset", "_parts", "_sock", "unsent", "wants_read")

    def __init__(self, sock: Any) -> None:
        self._sock = sock  # non-blocking (timeout 0) while the outbox is in use
        self._parts: deque[bytes] = deque()
        self._offset = 0
        self.unsent = 0
        self.wants_read = False  # TLS must read before it can write again

    def sendall(self, data: bytes) -> None:
        waiting = bool(self._parts)  # the socket was full: the main loop sends the rest
        if data:
            self._parts.append(bytes(data))
            self.unsent += len(data)
        if not waiting:
            self.send()

    def send(self) -> bool:
        """As much as the socket takes now; True once nothing is left. Raises the
        connection's ``OSError`` (a reset, a closed socket)."""
        while self._parts:
            first = self._parts[0]
            window = memoryview(first)[self._offset : self._offset + SEND_BYTES]
            try:
                sent = self._sock.send(window)
            except ssl.SSLWantReadError:
                self.wants_read = True
                return False
            except (ssl.SSLWantWriteError, BlockingIOError):
                self.wants_read = False
                return False
            self.wants_read = False
            self._offset += sent
            self.unsent -= sent
            if self._offset >= len(first):
                self._parts.popleft()
                self._offset = 0
        return True

    def fileno(self) -> int:
        """Someone writes to the descriptor itself (``sendfile``, which the app never
        asks for): what is kept goes first, waiting as gunicorn's own writes do."""
        if self._parts:
            self._sock.settimeout(IO_TIMEOUT_SECONDS)
            try:
                while self._parts:
                    self._sock.sendall(memoryview(self._parts.popleft())[self._offset :])
                    self._offset = 0
                self.unsent = 0
            finally:
                self._sock.settimeout(0.0)
        fd: int = self._sock.fileno()
        return fd

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class PlainAnswer:
    """``start_response`` for a plain request, and the answer's head as gunicorn's
    ``Response`` writes it (``default_headers``), with the body's length when the app
    gives none (the whole body is at hand: no chunked framing is needed)."""

    __slots__ = ("headers", "status", "written")

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.written: list[bytes] = []  # through the legacy ``write`` callable

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        if exc_info is not None and self.status:
            raise exc_info[1].with_traceback(exc_info[2])
        for name, value in headers:
            if _UNSAFE_HEADER.search(name) or _UNSAFE_HEADER.search(value):
                raise ValueError(f"the app gave an invalid header: {name!r}")
        self.status, self.headers = status, headers
        return self.written.append

    def encode(self, body: bytes, *, close: bool) -> bytes:
        lines = [
            f"HTTP/1.1 {self.status}\r\nServer: {SERVER}\r\nDate: {http_date()}\r\n"
            f"Connection: {'close' if close else 'keep-alive'}\r\n"
        ]
        lines += [f"{name}: {value}\r\n" for name, value in self.headers]
        if not any(name.lower() == "content-length" for name, _ in self.headers):
            size = len(body) + sum(len(part) for part in self.written)
            lines.append(f"Content-Length: {size}\r\n")
        lines.append("\r\n")
        return b"".join([("".join(lines)).encode("latin-1"), *self.written, body])


_UNSAFE_HEADER = re.compile(r"[\r\n\x00]")


class _DateHeader:
    """The ``Date`` header, formatted once a second rather than per answer."""

    def __init__(self) -> None:
        self._last: tuple[int, str] = (0, "")

    def __call__(self) -> str:
        now = int(time.time())
        last = self._last  # one read: another thread may replace it meanwhile
        if last[0] != now:
            last = self._last = (now, formatdate(now, usegmt=True))
        return last[1]


http_date = _DateHeader()
