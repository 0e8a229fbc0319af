"""The threads that serve a worker's buffered requests."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from gunicorn.workers.gthread import TConn


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
