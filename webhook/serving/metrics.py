"""Prometheus metrics, shared by every gunicorn worker through multiprocess files.

Each worker writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR`` (``serve`` makes a
fresh temporary one); whoever serves ``/metrics`` reads them all, so a scrape sees the
whole server and not one worker picked at random. Without that variable (tests, a single
process) the default registry is used.
"""

from __future__ import annotations

import bisect
import glob
import os
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

from webhook.engine.policy.ruleset import Policy
from webhook.engine.policy.schema import DOCUMENT_KINDS
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
    # Up to the webhooks' timeoutSeconds (deploy/base/webhooks.yaml: 5 s) and past it, so
    # that a p99 near the timeout is measured, not clipped to the last bucket.
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 4.0, 5.0),
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
RULES_REJECTED = Gauge(
    "gpu_webhook_rule_files_rejected",
    "1 while the rule files on disk are rejected and the last good rules stay in force",
    multiprocess_mode="livemax",
)
RULE_OBJECTS_NOT_IN_FORCE = Gauge(
    "gpu_webhook_rule_objects_not_in_force",
    "1 while a rule object (GPUPolicy, GPUSettings, ...) is not in force (its Ready is "
    "False), by kind and name; past 100 names, a kind's further objects are counted under "
    "name _other",
    ["kind", "name"],
    multiprocess_mode="livemax",
)
# Names come from the cluster, not from requests, but a cluster may hold many objects: a
# worker labels at most this many, for its whole life (an object put right stays at 0).
NAMED_RULE_OBJECTS = 100
OTHER_RULE_OBJECTS = "_other"
_object_labels: set[tuple[str, str]] = set()
INVENTORY_UNAVAILABLE = Gauge(
    "gpu_webhook_inventory_unavailable",
    "1 while a live inventory has not synced or is stale (the failure mode decides capacity)",
    multiprocess_mode="livemax",
)
CERTIFICATE_EXPIRY = Gauge(
    "gpu_webhook_certificate_expiry_timestamp_seconds",
    "When the serving certificate last loaded expires (Unix time); set at every reload",
    multiprocess_mode="mostrecent",
)
CERTIFICATE_REJECTED = Gauge(
    "gpu_webhook_certificate_rejected",
    "1 while the certificate files on disk are refused and the pair in force keeps serving",
    multiprocess_mode="mostrecent",
)
CERTIFICATE_REJECTIONS = Counter(
    "gpu_webhook_certificate_rejections_total",
    "Certificate pairs on disk not put in force, by reason (unloadable, expired, "
    "not-yet-valid, expires-earlier), counted by each process that read them",
    ["reason"],
)


def certificate_loaded(expiry: float) -> None:
    CERTIFICATE_EXPIRY.set(expiry)
    CERTIFICATE_REJECTED.set(0)


def certificate_refused(reason: str) -> None:
    CERTIFICATE_REJECTIONS.labels(reason).inc()
    CERTIFICATE_REJECTED.set(1)


WORKER_RESTARTS = Counter(
    "gpu_webhook_worker_restarts_total",
    "gunicorn workers that exited (timeout, crash, out of memory, signal) and were replaced",
)
PROCESS_RESTARTS = Counter(
    "gpu_webhook_process_restarts_total",
    "The pod's helper processes started again after they exited, by process "
    "(inventory-watcher, auditor)",
    ["process"],
)
HELPER_PROCESSES = ("inventory-watcher", "auditor")
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
# Sources are rule files and policy objects, which admins make: capped, so that a
# directory of a thousand files cannot grow every scrape.
MAX_UNMEETABLE_SOURCES = 20
OTHER_SOURCES = "other"  # the sources past the cap; at 0 from the start, so the series exists
RULES_UNMEETABLE = Gauge(
    "gpu_webhook_rules_unmeetable",
    "Rules that cannot be met on this cluster (a value no node, pool or device has: every "
    "GPU pod they match is denied), by source (rule file or policy object; past "
    f"{MAX_UNMEETABLE_SOURCES} sources, other)",
    ["source"],
    multiprocess_mode="livemax",
)
_unmeetable_labels: set[str] = set()


def rules_unmeetable(sources: Iterable[str]) -> None:
    """Set the gauge to the rules per source that cannot be met (one entry per rule); a
    source that has none any more goes to 0."""
    counts: Tally[str] = Tally()
    for source in sources:
        known = source in counts or len(counts) < MAX_UNMEETABLE_SOURCES
        counts[source if known else OTHER_SOURCES] += 1
    for label in _unmeetable_labels - counts.keys():
        RULES_UNMEETABLE.labels(label).set(0)
    for label, count in counts.items():
        RULES_UNMEETABLE.labels(label).set(count)
    _unmeetable_labels.update(counts)


def audit_findings(counts: Mapping[tuple[str, str], int]) -> None:
    """Set the gauge to the last audit's counts; a rule that no longer fires goes to 0."""
    for labels in _audit_labels - counts.keys():
        AUDIT_FINDINGS.labels(*labels).set(0)
    for labels, count in counts.items():
        AUDIT_FINDINGS.labels(*labels).set(count)
    _audit_labels.update(counts)


def rule_objects_not_in_force(broken: Iterable[tuple[str, str]]) -> None:
    """Set the gauge to the (kind, name) of the objects not in force now; one that was and
    is now in force, or deleted, goes to 0 (so that its alert resolves). Each kind's
    ``_other`` series exists from the first call, at 0 while no object overflows: the
    panel and the alert read a series that is there from the first scrape."""
    counts: Tally[tuple[str, str]] = Tally()
    _object_labels.update((kind, OTHER_RULE_OBJECTS) for kind in DOCUMENT_KINDS)
    named = {labels for labels in _object_labels if labels[1] != OTHER_RULE_OBJECTS}
    for kind, name in broken:
        if (kind, name) in named or len(named) < NAMED_RULE_OBJECTS:
            named.add((kind, name))
            counts[(kind, name)] += 1
        else:
            counts[(kind, OTHER_RULE_OBJECTS)] += 1
    _object_labels.update(counts)
    for labels in _object_labels - counts.keys():
        RULE_OBJECTS_NOT_IN_FORCE.labels(*labels).set(0)
    for labels, count in counts.items():
        RULE_OBJECTS_NOT_IN_FORCE.labels(*labels).set(count)


ENDPOINT_NAMES = ("mutate", "validate")
OPERATIONS = ("CREATE", "UPDATE")
VERDICTS = ("allowed", "denied", "error")
REFUSALS = ("400", "413", "415")


def initialise(policy: Policy) -> None:
    """Create, at 0, the series that alerts and dashboards read, so that each exists from
    the first scrape: ``increase()`` sees the first error, denial or failed reload only if
    the series was there before it (a series born at 1 has no increase). Called at start
    and after each reload (a reload may add kinds and rules). The label sets stay bounded:
    the kinds and rules come from the rule files, never from a request."""
    for result in ("success", "failure"):
        RELOADS.labels(result)
    RULES_UNMEETABLE.labels(OTHER_SOURCES)
    kinds = sorted({kind.kind for kind in policy.kinds} | {"other"})
    for endpoint in ENDPOINT_NAMES:
        for code in REFUSALS:
            MALFORMED.labels(endpoint, code)
        for kind in kinds:
            for operation in OPERATIONS:
                for verdict in VERDICTS:
                    REQUESTS.labels(endpoint, kind, operation, verdict)
        for rule, action in finding_labels(policy):
            FINDINGS.labels(endpoint, rule, action)
        LATENCY.labels(endpoint)


def finding_labels(policy: Policy) -> set[tuple[str, str]]:
    """(rule, action) of every finding the policy can make as configured: each built-in
    check and rule check at its action, and at deny and warn (a check that cannot know,
    such as capacity without an inventory, warns instead of denying)."""
    configured = [(f"builtin/{check}", action) for check, action in policy.settings.actions.items()]
    configured += [
        (f"{rule.name}/{check.kind}", check.action)
        for rule in policy.rules
        for check in rule.checks
    ]
    labels: set[tuple[str, str]] = set()
    for rule, action in configured:
        if action in ("deny", "warn", "audit"):
            labels.update({(rule, action), (rule, "deny"), (rule, "warn")})
    return labels


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
    # Only the files of livemin gauges: a probe then costs the same however many counter
    # series the workers keep (reading every file took 2.5 ms with the label sets that
    # ``initialise`` creates, against 0.1 ms).
    files = glob.glob(os.path.join(directory, "gauge_livemin_*.db"))
    merged = multiprocess.MultiProcessCollector.merge(files, accumulate=False)  # type: ignore[no-untyped-call]
    values = [s.value for m in merged for s in m.samples if s.name == "gpu_webhook_ready"]
    return None if not values else values[0] >= 1


def worker_exited(pid: int) -> None:
    """Drop the live gauges of a process that does not serve (a dead worker, the master),
    so its values do not linger in what a scrape or a readiness probe sees."""
    directory = multiprocess_dir()
    if directory is not None:
        multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
