"""Prometheus metrics, shared by every gunicorn worker through multiprocess files.

Each worker writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR`` (``serve`` makes a
fresh temporary one); whoever serves ``/metrics`` reads them all, so a scrape sees the
whole server and not one worker picked at random. Without that variable (tests, a single
process) the default registry is used.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter as Tally
from collections.abc import Iterable, Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from webhook.serving.config import multiprocess_dir

REQUESTS = Counter(
    "gpu_webhook_requests_total",
    "Admission reviews answered, by endpoint, kind, operation and decision",
    ["endpoint", "kind", "operation", "decision"],
)
MALFORMED = Counter(
    "gpu_webhook_malformed_requests_total",
    "Calls refused without a review answer (bad body, type or size), by endpoint and code",
    ["endpoint", "code"],
)
LATENCY = Histogram(
    "gpu_webhook_request_duration_seconds",
    "Time to answer one admission review, by endpoint",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
FINDINGS = Counter(
    "gpu_webhook_findings_total",
    "Denials, warnings and audit findings, by endpoint, rule and action",
    ["endpoint", "rule", "action"],
)
RELOADS = Counter(
    "gpu_webhook_rule_reloads_total",
    "Rule file reloads per worker, by result (success, failure)",
    ["result"],
)
RULES_GENERATION = Gauge(
    "gpu_webhook_rules_generation",
    "Rule set generation in force (1 at start, +1 per reload)",
    multiprocess_mode="livemin",
)
INVENTORY_AGE = Gauge(
    "gpu_webhook_inventory_age_seconds",
    "Seconds since the node inventory last synced (the stalest worker)",
    multiprocess_mode="livemax",
)
INVENTORY_NODES = Gauge(
    "gpu_webhook_inventory_nodes",
    "Nodes in the inventory snapshot",
    multiprocess_mode="livemax",
)
READY = Gauge(
    "gpu_webhook_ready",
    "1 when the worker's rules are loaded and its inventory (if live) synced",
    multiprocess_mode="livemin",
)
AUDIT_FINDINGS = Gauge(
    "gpu_webhook_audit_findings",
    "Results of the last background audit, by rule (policy/check) and result "
    "(pass, fail, warn, error, skip)",
    ["rule", "result"],
    multiprocess_mode="mostrecent",
)
_audit_labels: set[tuple[str, str]] = set()


def audit_findings(counts: Mapping[tuple[str, str], int]) -> None:
    """Set the gauge to the last audit's counts; a rule that no longer fires goes to 0."""
    for labels in _audit_labels - counts.keys():
        AUDIT_FINDINGS.labels(*labels).set(0)
    for labels, count in counts.items():
        AUDIT_FINDINGS.labels(*labels).set(count)
    _audit_labels.update(counts)


class ReviewTally:
    """Per-review metrics, added up in the worker and handed to prometheus in batches.

    Every prometheus update takes a lock and, in multiprocess mode, writes a file page; a
    review made three or four of them. Now it makes a few dictionary increments, and a flush
    makes one update per label set and histogram bucket. A scrape may miss the last ``batch``
    reviews or the last reload tick (2 s), which Prometheus' scrape interval dwarfs.
    """

    def __init__(self, *, batch: int = 64) -> None:
        self._lock = threading.Lock()
        self._batch = batch
        self._pending = 0
        self._requests: Tally[tuple[str, str, str, str]] = Tally()
        self._findings: Tally[tuple[str, str, str]] = Tally()
        self._latency: dict[str, list[float]] = {}

    def add(
        self,
        *,
        endpoint: str,
        kind: str,
        operation: str,
        verdict: str,
        seconds: float,
        findings: Iterable[tuple[str, str]] = (),
    ) -> None:
        with self._lock:
            self._requests[(endpoint, kind, operation, verdict)] += 1
            for rule, action in findings:
                self._findings[(endpoint, rule, action)] += 1
            self._latency.setdefault(endpoint, []).append(seconds)
            self._pending += 1
            full = self._pending >= self._batch
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            requests, findings, latency = self._requests, self._findings, self._latency
            self._requests, self._findings, self._latency = Tally(), Tally(), {}
            self._pending = 0
        for labels, count in requests.items():
            REQUESTS.labels(*labels).inc(count)
        for found, count in findings.items():
            FINDINGS.labels(*found).inc(count)
        for endpoint, values in latency.items():
            _observe_all(LATENCY.labels(endpoint), values)


def _observe_all(child: Histogram, values: list[float]) -> None:
    """One update per bucket, not per value; falls back to ``observe`` should the client
    library's histogram internals change."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None:
        for value in values:
            child.observe(value)
        return
    counts = Tally(bisect.bisect_left(bounds, value) for value in values)
    for index, count in counts.items():
        buckets[index].inc(count)
    total.inc(sum(values))


REVIEWS = ReviewTally()


def exposition() -> tuple[bytes, str]:
    """The text a scrape gets, and its content type."""
    REVIEWS.flush()
    directory = multiprocess_dir()
    if directory is None:
        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def all_workers_ready() -> bool | None:
    """From the multiprocess files: True when every live worker reported ready, None when
    no worker has reported yet (still starting), False otherwise."""
    directory = multiprocess_dir()
    if directory is None:
        return None
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    value = registry.get_sample_value("gpu_webhook_ready")
    return None if value is None else value >= 1


def worker_exited(pid: int) -> None:
    """Drop the live gauges of a process that does not serve (a dead worker, the master),
    so its values do not linger in what a scrape or a readiness probe sees."""
    directory = multiprocess_dir()
    if directory is not None:
        multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
