"""Prometheus metrics, shared by every gunicorn worker through multiprocess files.

Each worker writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR`` (``serve`` makes a
fresh temporary one); whoever serves ``/metrics`` reads them all, so a scrape sees the
whole server and not one worker picked at random. Without that variable (tests, a single
process) the default registry is used.
"""

from __future__ import annotations

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

from webhook.config import multiprocess_dir

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


def exposition() -> tuple[bytes, str]:
    """The text a scrape gets, and its content type."""
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
