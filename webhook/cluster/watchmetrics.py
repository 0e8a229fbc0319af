"""Per source metrics of the cluster view: watch errors and the last successful sync.

A source is one collection a reflector lists and watches, named by its resource (``nodes``,
``namespaces``, ``resourceslices``, ``nodepools``, ...): a bounded set fixed by the code.
The pod's inventory watcher is a process of its own (``webhook.cluster.watcher``), started
by the gunicorn master with the master's environment, so with ``PROMETHEUS_MULTIPROC_DIR``
set it writes these series into the same multiprocess directory as the workers and the
master's ``/metrics`` shows them. Gauge modes fit a process that restarts: the newest
``active`` word wins, and the last sync is the latest any watcher reached.

prometheus_client picks its value class (multiprocess files or memory) when first
imported, and ``serve`` imports this package (for its kubeconfig checks) before it sets
that variable; so the client is imported, and the metrics made, at first use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge

        self.errors = Counter(
            "gpu_webhook_watch_errors_total",
            "Failed lists and watches of the cluster view, by source (each is retried)",
            ["source"],
        )
        self.last_sync = Gauge(
            "gpu_webhook_watch_last_sync_timestamp_seconds",
            "When the API server last answered for this source (a list, an accepted watch, "
            "an event or a bookmark), Unix time; 0 before it ever did",
            ["source"],
            multiprocess_mode="max",
        )
        self.active = Gauge(
            "gpu_webhook_watch_active",
            "1 while the source is listed and watched; 0 while not (not served by the "
            "API server, not readable, or not started yet)",
            ["source"],
            multiprocess_mode="mostrecent",
        )


@cache
def _metrics() -> _Metrics:
    return _Metrics()


def source_name(path: str) -> str:
    """``/apis/resource.k8s.io/v1/resourceslices`` -> ``resourceslices``."""
    return path.rstrip("/").rsplit("/", 1)[-1]


class SourceMetrics:
    """One source's series, created at 0 when the reflector is made: an ``increase()``
    alert then sees its first error, and a stale-view alert its first silence."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        metrics = _metrics()
        self.name = source_name(path)
        self._clock = clock
        self._errors = metrics.errors.labels(self.name)
        self._last_sync = metrics.last_sync.labels(self.name)
        self._active = metrics.active.labels(self.name)
        self._errors.inc(0)
        self._active.set(0)

    def running(self, active: bool) -> None:
        self._active.set(1 if active else 0)

    def synced(self) -> None:
        self._last_sync.set(self._clock())

    def failed(self) -> None:
        self._errors.inc()
