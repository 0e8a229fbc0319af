"""The threads that serve a worker's buffered requests, and the queue through which they
hand connections back to the main loop."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from gunicorn.workers.gthread import PollableMethodQueue, TConn


class ServingThreads:
    """The threads that serve a worker's buffered requests, in place of gthread's
    ``ThreadPoolExecutor``: a connection goes in through one queue, and the thread hands
    it back with its keep-alive verdict through ``done``. The executor built a ``Future``
    (a ``Condition`` and its lock), a work item, took two locks and a semaphore per request,
    and handed the result back through a callback, a lambda and the future's lock again:
    ``submit`` alone was about a tenth of a worker's time on unique pods."""

    def __init__(
        self, count: int, *, serve: Callable[[TConn], bool], done: Callable[[TConn, bool], None]
    ) -> None:
        self._serve = serve
        self._done = done
        self._jobs: queue.SimpleQueue[TConn | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"serving-{number}") for number in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, conn: TConn) -> None:
        self._jobs.put(conn)

    def shutdown(self, wait: bool = True) -> None:
        """What ``ThreadPoolExecutor.shutdown`` does: requests queued are still served
        (gthread's loop waits for them), then each thread ends."""
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _run(self) -> None:
        while (conn := self._jobs.get()) is not None:
            try:
                keep = self._serve(conn)
            except BaseException:  # the executor kept it in the future: the connection closes
                keep = False
            self._done(conn, keep)


class WakingQueue(PollableMethodQueue):  # type: ignore[misc]
    """gthread's method queue (callbacks a thread leaves for the main loop, which a byte
    on a pipe wakes), with one byte per wake-up instead of one per callback.

    gthread writes a byte for every callback and reads them back on the main loop: a
    system call in the serving thread per review (which lets go of the interpreter lock
    and must take it back, behind another thread's review) and one more on the main loop.
    Here a thread writes only when no wake-up is pending, and the main loop takes every
    callback queued when it wakes. A callback is never left behind: the main loop takes
    the bytes, then marks the wake-up taken, then reads the queue (``run_callbacks``)."""

    MAX_CALLBACKS = 256  # per wake-up, so that the loop still polls its sockets

    def __init__(self) -> None:
        super().__init__()
        self._pending = False  # a byte is on the pipe, or about to be

    def defer(self, callback: Callable[..., Any], *args: Any) -> None:
        self._queue.put(partial(callback, *args))
        if not self._pending:
            self._wake()

    def _wake(self) -> None:
        self._pending = True
        with contextlib.suppress(OSError):  # full: a byte is there already
            os.write(self._write_fd, b"\x00")

    def run_callbacks(self, _fileobj: Any = None, max_callbacks: int = MAX_CALLBACKS) -> None:
        with contextlib.suppress(OSError):
            os.read(self._read_fd, 4096)
        # After the bytes are taken and before the queue is read: a thread that found a
        # wake-up pending queued its callback before this line, so the loop below takes
        # it; one that comes later writes a byte of its own, which the read above left.
        self._pending = False
        for _ in range(max_callbacks):
            try:
                callback = self._queue.get_nowait()
            except queue.Empty:
                return
            callback()
        self._wake()  # more than one turn's worth: the loop comes back for the rest
