"""How the main loop finishes a connection a thread has served, without blocking: the
rest of an answer the socket did not take sent as the client reads it (the "Writing" of
``webhook.serving.worker.answers``), and closes that wait for the client's end.

Closing. ``gthread`` closes a ``Connection: close`` answer gracefully on its main loop,
waiting up to 2 s for the client to close first; forty clients that never do block the loop
past the worker timeout and gunicorn kills the worker. Here the write side is shut and the
socket waits in the poller (at most ``CLOSE_LINGER_SECONDS``) for the client's end.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import time
from functools import partial
from typing import Any

from gunicorn.workers.gthread import TConn

from webhook.serving.worker.answers import Outbox

CLOSE_LINGER_SECONDS = 2.0
MAX_UNSENT_BYTES = 32 * 1024 * 1024  # per worker, answers kept for slow readers together
_DRAIN_BYTES = 64 * 1024
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection


class Finishing:
    """The part of ``ReadingWorker`` (its base) that finishes connections on the main loop."""

    poller: Any
    _writing: dict[TConn, tuple[float, bool]]  # -> (deadline, keep alive)
    _writing_bytes: int
    _lingering: dict[TConn, float]

    def _closed(self, conn: TConn) -> None:
        raise NotImplementedError  # ReadingWorker's

    def _answered(self, conn: TConn, *, keep: bool) -> None:
        raise NotImplementedError  # ReadingWorker's

    def _drop(self, conn: TConn) -> None:
        raise NotImplementedError  # ReadingWorker's

    # --- writing the rest of an answer on the main loop --------------------------------

    def _write_later(self, conn: TConn, outbox: Outbox, *, keep: bool) -> None:
        """The rest of an answer goes out as the client reads it, until its deadline;
        the oldest of these answers are cut when together they would hold more than
        ``MAX_UNSENT_BYTES``."""
        conn.unsent_box = outbox
        nonblocking(conn.sock)
        self._writing[conn] = (conn.answer_deadline, keep)
        self._writing_bytes += outbox.unsent
        conn.awaits = selectors.EVENT_READ if outbox.wants_read else selectors.EVENT_WRITE
        self.poller.register(conn.sock, conn.awaits, partial(self._writable, conn))
        while self._writing_bytes > MAX_UNSENT_BYTES and len(self._writing) > 1:
            self._cut(next(iter(self._writing)))

    def _writable(self, conn: TConn, _fileobj: Any = None) -> None:
        outbox: Outbox = conn.unsent_box
        before = outbox.unsent
        try:
            done = outbox.send()
        except (OSError, ValueError):
            self._cut(conn)
            return
        finally:
            self._writing_bytes -= before - outbox.unsent
        if not done:
            awaits = selectors.EVENT_READ if outbox.wants_read else selectors.EVENT_WRITE
            if awaits != conn.awaits:  # else a writable socket would wake the loop forever
                conn.awaits = awaits
                self.poller.modify(conn.sock, awaits, partial(self._writable, conn))
            return
        _, keep = self._writing.pop(conn)
        conn.unsent_box = None
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        try:
            self._answered(conn, keep=keep)
        except (OSError, ValueError):
            self._drop(conn)

    def _cut(self, conn: TConn) -> None:
        """An answer not read in time (or a client gone): the connection is reset, so
        that the kernel drops what it still holds of the answer too (a plain close would
        go on sending it, at the reader's pace)."""
        if conn in self._writing:
            del self._writing[conn]
            self._writing_bytes -= conn.unsent_box.unsent
            conn.unsent_box = None
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        with contextlib.suppress(OSError, ValueError):
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self._closed(conn)
        conn.close()

    # --- closing without blocking the loop ---------------------------------------------

    def _linger(self, conn: TConn) -> None:
        """Shut the write side and wait in the poller for the client to close (RFC 9112
        9.6), so the last answer is not cut off by a reset."""
        self._closed(conn)
        try:
            conn.sock.shutdown(socket.SHUT_WR)  # on TLS this also drops the TLS layer
            nonblocking(conn.sock)
        except OSError:
            conn.close()
            return
        conn.drained = 0
        self._lingering[conn] = time.monotonic() + CLOSE_LINGER_SECONDS
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn))

    def _drain(self, conn: TConn, _fileobj: Any = None) -> None:
        try:
            while conn.drained < _DRAIN_BYTES:
                data = conn.sock.recv(65536)
                if not data:
                    break
                conn.drained += len(data)
        except (BlockingIOError, InterruptedError):
            if conn.drained < _DRAIN_BYTES:
                return
        except OSError:
            pass
        self._end_linger(conn)

    def _end_linger(self, conn: TConn) -> None:
        self._lingering.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        conn.close()


def nonblocking(sock: Any) -> None:
    """``setblocking(False)``, without its two ``fcntl`` calls when the socket is already
    non-blocking (a plain request's always is: see ``ReadingWorker._dispatch``)."""
    if sock.gettimeout() != 0.0:
        sock.setblocking(False)
