"""Runtime sync of the webhooks' ``matchConditions`` (issue 43): the replica holding the
Lease writes the conditions of the rules in force, and of the nodes as they are, into its
own two webhook configurations, by name, and nothing else.

The nodes matter: the conditions that skip pods asking for no GPU hold only while every
GPU node is tainted (``engine.evaluation.matchconditions.gpu_nodes_tainted``); the holder
writes them while the inventory keeps that promise and writes ``true`` (call everything)
as soon as it does not. Each write is a JSON Patch whose ``test`` operations pin the
``resourceVersion`` read and the webhook's name at its index: a configuration changed
meanwhile (a Helm upgrade, Argo CD's self-heal) makes the write fail with 409 or 422, and
the next turn reads it again. RBAC: ``get`` and ``patch`` on
``mutatingwebhookconfigurations`` and ``validatingwebhookconfigurations`` with
``resourceNames: [gpu-webhook]`` (docs/deploy.md, "Match conditions").

``ConditionKeeper`` is the loop the pod's inventory watcher runs with ``serve
--sync-match-conditions``: it holds a Lease of its own (``gpu-webhook-match-conditions``),
derives the conditions from the rules in force (files and rule objects, merged as the
workers merge them) and the nodes as the watcher sees them, and syncs them when either
changed and at least every ``PERIOD_SECONDS`` (a Helm upgrade may have reset them). It runs
beside the reviews, never in them: no review waits for it, and nothing it meets (API
errors, broken rule files) leaves the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiError
from webhook.cluster.lease import Lease
from webhook.engine.evaluation.matchconditions import gpu_nodes_tainted, match_conditions
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.policy.ruleset import Policy, PolicyError
from webhook.files.rulefiles import RuleStore

log = logging.getLogger("gpu_webhook.conditionsync")
GROUP_PATH = "/apis/admissionregistration.k8s.io/v1"
# (resource, the webhook of ours it holds that gets conditions)
CONFIGURATIONS = (
    ("mutatingwebhookconfigurations", "mutate.gpu-webhook.io"),
    ("validatingwebhookconfigurations", "validate.gpu-webhook.io"),
)
Conditions = Mapping[str, Sequence[Mapping[str, str]]]
LEASE_NAME = "gpu-webhook-match-conditions"
# Short, as the status writer's: a holder that dies leaves the conditions unsynced for half
# a minute at most.
LEASE_SECONDS = 30
# A turn at least this often (the Lease's renewal, and a configuration reset by a deploy
# tool is written again), and at most once per ``GAP_SECONDS`` however often the rules or
# the nodes change.
PERIOD_SECONDS = 10.0
GAP_SECONDS = 2.0
# What a configuration's turn came to (the ``result`` of the syncs counter): written; as
# wanted already; changed since it was read (409, 422: read again next turn); failed (any
# other API error, or no webhook of ours in it).
RESULTS = ("written", "unchanged", "conflict", "failed")
Result = Callable[[str], None]


def _ignore(_result: str) -> None:
    """No counter."""


class ConditionSync:
    """``sync(conditions)``: while holding the Lease, make each configuration's webhook
    carry ``conditions[webhook name]`` (absent or empty: none)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        lease: Lease,
        name: str = "gpu-webhook",
        on_result: Result = _ignore,
    ) -> None:
        self.client = client
        self.lease = lease
        self.name = name
        self.on_result = on_result

    def sync(self, conditions: Conditions) -> list[str]:
        """The configurations patched this turn (none when another replica holds the
        Lease, or all are as wanted). API errors are logged: the next turn tries again."""
        if not self.lease.try_hold():
            return []
        patched = []
        for resource, webhook in CONFIGURATIONS:
            path = f"{GROUP_PATH}/{resource}/{quote(self.name, safe='')}"
            try:
                result = self._sync_one(path, webhook, list(conditions.get(webhook) or ()))
            except ApiError as exc:
                # 409: the resourceVersion moved between read and write; 422: a ``test``
                # failed (the API server answers a failed JSON Patch test with 422).
                result = "conflict" if exc.code in (409, 422) else "failed"
                log.warning("match conditions of %s not written: %s", path, exc)
            self.on_result(result)
            if result == "written":
                patched.append(resource)
        return patched

    def _sync_one(self, path: str, webhook: str, wanted: list[Mapping[str, str]]) -> str:
        current = self.client.get(path)
        hooks = current.get("webhooks") or []
        index = next(
            (i for i, w in enumerate(hooks) if isinstance(w, dict) and w.get("name") == webhook),
            None,
        )
        if index is None:
            log.warning("%s has no webhook %s: its match conditions not written", path, webhook)
            return "failed"
        have = hooks[index].get("matchConditions") or []
        if list(have) == wanted:
            return "unchanged"
        version = (current.get("metadata") or {}).get("resourceVersion")
        ops: list[Mapping[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "test", "path": f"/webhooks/{index}/name", "value": webhook},
        ]
        at = f"/webhooks/{index}/matchConditions"
        if wanted:
            ops.append({"op": "add", "path": at, "value": wanted})
        else:
            ops.append({"op": "remove", "path": at})
        self.client.patch(path, ops)
        log.info("match conditions of %s written (%d)", path, len(wanted))
        return "written"


def wanted_conditions(
    policy: Policy, view: InventoryView | None
) -> dict[str, list[dict[str, str]]]:
    """The conditions for the rules in force and the nodes as seen: those that skip pods
    asking for no GPU only while every GPU node is seen tainted; ``true`` (call everything)
    while the nodes are not seen, or one GPU node is not tainted. Never skip on doubt."""
    tainted = view is not None and gpu_nodes_tainted(policy, view)
    found = match_conditions(policy, tainted_gpu_nodes=tainted)
    return {name: [c.as_dict() for c in listed] for name, listed in found.items()}


class ConditionKeeper:
    """The loop: a turn when the rules or the nodes changed (``wake``), else every
    ``period_seconds``; at most one per ``gap_seconds``. A turn that finds the same inputs
    as the last one that synced, within the period, costs nothing.

    ``rules``: makes the store of the rules in force (files and objects), at the first turn
    (broken files must not stop the watcher: the conditions wait for them, as the
    statuses do); ``ready``: the rule objects were listed (before, the rules in force are
    not known); ``view``: the nodes (and pools, node classes) as settled, or None."""

    def __init__(
        self,
        *,
        sync: ConditionSync,
        rules: Callable[[], RuleStore],
        view: Callable[[], InventoryView | None],
        ready: Callable[[], bool] = lambda: True,
        period_seconds: float = PERIOD_SECONDS,
        gap_seconds: float = GAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sync = sync
        self._make_store = rules
        self._view = view
        self._ready = ready
        self.period_seconds = period_seconds
        self.gap_seconds = gap_seconds
        self._clock = clock
        self.store: RuleStore | None = None
        self.wake = threading.Event()
        self._unusable = ""
        self._synced: tuple[object, ...] | None = None  # the inputs of the last sync turn
        self._synced_at = 0.0

    def thread(self, stop: threading.Event) -> threading.Thread:
        return threading.Thread(
            target=self._run, args=(stop,), name="match-conditions", daemon=True
        )

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # a bug here must not end the loop, nor the watcher
                log.exception("match conditions not synced this turn")
            if stop.wait(self.gap_seconds):
                break
            self.wake.wait(max(0.0, self.period_seconds - self.gap_seconds))
            self.wake.clear()
        self.sync.lease.release()

    def step(self) -> bool:
        """One turn; True when it synced (the Lease was asked for and the configurations
        read), False when there was nothing to do or nothing known yet."""
        if not self._ready():
            return False
        store = self._rules()
        if store is None:
            return False
        store.reload_if_changed()  # broken files keep the last good rules in force
        view = self._view()
        policy = store.current.policy
        conditions = wanted_conditions(policy, view)
        inputs = (store.current.generation, tuple(sorted(map(str, conditions.items()))))
        now = self._clock()
        if inputs == self._synced and now - self._synced_at < self.period_seconds:
            return False
        self.sync.sync(conditions)
        self._synced, self._synced_at = inputs, now
        return True

    def _rules(self) -> RuleStore | None:
        if self.store is None:
            try:
                self.store = self._make_store()
            except PolicyError as exc:
                if str(exc) != self._unusable:
                    log.error("rule files unusable; match conditions wait for them: %s", exc)
                self._unusable = str(exc)
        return self.store


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter

        self.syncs = Counter(
            "gpu_webhook_match_condition_syncs_total",
            "Turns of the match conditions' runtime sync by the Lease holder, per webhook "
            "configuration, by result (written, unchanged, conflict: changed since read and "
            "read again next turn, failed: any other API error)",
            ["result"],
        )


@cache
def _metrics() -> _Metrics:
    """Made at first use, in the watcher process (``webhook.cluster.watchmetrics`` says
    why: the multiprocess directory is set before prometheus_client is imported)."""
    return _Metrics()


def count_result(result: str) -> None:
    _metrics().syncs.labels(result).inc()


def zero_results() -> None:
    """Every result at 0 from the first scrape: an ``increase()`` alert sees the first."""
    for result in RESULTS:
        _metrics().syncs.labels(result).inc(0)
