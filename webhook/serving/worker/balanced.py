"""Connections balanced across a server's workers. The API server keeps its connections to a
webhook open for minutes, and a kept-alive connection stays with the worker that accepted
it. Workers race for each new connection, and the race goes to whichever wakes first, not
to the least busy: on two cores, twelve connections opened together often split 9-3 or
11-1, and the worker holding most of them (one interpreter lock, so one core) becomes the
bottleneck while its sibling idles. The admission benchmark showed it as rounds at half
the usual throughput.

Each worker publishes how many connections it holds in a table shared with its siblings
(anonymous shared memory that the master maps before it forks; the master gives each
worker a slot). When a connection is waiting, a worker that holds more than the
least-loaded sibling that is serving steps back for ``RECHECK_SECONDS`` so that the sibling
can take it. A connection nobody took within ``MAX_DEFER_SECONDS`` is accepted anyway, so a
busy or stuck sibling never strands a client.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Iterable
from typing import Any

from webhook.serving.worker.reading import ReadingWorker

RECHECK_SECONDS = 0.002
MAX_DEFER_SECONDS = 0.05
FREE = -1
BOOTING = -2  # claimed, but not accepting yet: loading the app takes a second or so


class ConnectionTable:
    """Connections held per worker slot, in memory shared by the master and its workers."""

    def __init__(self, slots: int = 128) -> None:
        self._memory = mmap.mmap(-1, slots * 4)  # anonymous and shared: forks see writes
        self._counts = memoryview(self._memory).cast("i")
        for slot in range(slots):
            self._counts[slot] = FREE

    def claim(self, taken: Iterable[int]) -> int:
        """A free slot for a worker about to be forked (in the master)."""
        used = set(taken)
        for slot in range(len(self._counts)):
            if slot not in used:
                self._counts[slot] = BOOTING
                return slot
        return FREE  # more workers than slots: the extra ones do not balance

    def release(self, slot: int) -> None:
        if 0 <= slot < len(self._counts):
            self._counts[slot] = FREE

    def publish(self, slot: int, held: int) -> None:
        """A count never reads as FREE or BOOTING: a serving worker stays a sibling."""
        if 0 <= slot < len(self._counts):
            self._counts[slot] = max(held, 0)

    def fewest_elsewhere(self, slot: int) -> int | None:
        """The fewest connections a serving sibling of ``slot`` holds; None without one."""
        counts = self._counts.tolist()
        others = [held for other, held in enumerate(counts) if other != slot and held >= 0]
        return min(others) if others else None


class BalancedThreadWorker(ReadingWorker):
    """``gthread`` with connections balanced across workers (see the module docstring).

    ``table`` and ``slot`` are set on the worker object by the master before the fork."""

    table: ConnectionTable | None = None
    slot: int = FREE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._held = 0
        self._serving = False
        super().__init__(*args, **kwargs)
        self._paused_until = 0.0
        self._deferring_since: float | None = None
        self._last_deferral = 0.0

    # gthread counts its connections in ``nr_conns`` wherever it opens or closes one.
    @property
    def nr_conns(self) -> int:
        return self._held

    @nr_conns.setter
    def nr_conns(self, held: int) -> None:
        self._held = held
        if self._serving:
            self._publish()

    def _publish(self) -> None:
        if self.table is not None:
            self.table.publish(self.slot, self._held)

    def run(self) -> None:
        """The app is loaded: siblings may now leave connections to this worker."""
        self._serving = True
        self._publish()
        self.log.info("worker %s is accepting connections", self.pid)
        super().run()

    def accept(self, listener: Any) -> None:
        now = time.monotonic()
        if self._should_defer(now):
            self._paused_until = now + RECHECK_SECONDS
            self.set_accept_enabled(False)
            return
        self._deferring_since = None
        super().accept(listener)

    def _should_defer(self, now: float) -> bool:
        fewest = None if self.table is None else self.table.fewest_elsewhere(self.slot)
        if fewest is None or self._held <= fewest:
            return False
        if self._deferring_since is None or now - self._last_deferral > 2 * RECHECK_SECONDS:
            self._deferring_since = now  # a new wait: the last one ended long ago
        self._last_deferral = now
        return now - self._deferring_since < MAX_DEFER_SECONDS

    def set_accept_enabled(self, enabled: bool) -> None:
        if enabled and time.monotonic() < self._paused_until:
            return  # stepping back: the run loop asks again after its next wake-up
        super().set_accept_enabled(enabled)

    def _out_of_descriptors(self) -> None:
        self._paused_until = time.monotonic() + 0.1
        self.set_accept_enabled(False)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        pause = self._paused_until - time.monotonic()
        if pause > 0:
            timeout = min(timeout, pause)
        super().wait_for_and_dispatch_events(timeout)
