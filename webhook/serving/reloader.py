"""The per-worker background loop: rule files reloaded on change, gauges kept current.

A mounted ConfigMap changes by swapping a symlink, with no inotify event on the files we
read, so we poll the rule set's fingerprint (names and bytes of every file). The swap of
``RuleStore.current`` is one assignment: requests in flight keep the set they started with
and the next one sees the new set. Serving never waits for a reload.
"""

from __future__ import annotations

import logging
import threading

from webhook.admission.service import AdmissionService
from webhook.serving import metrics

log = logging.getLogger("gpu_webhook.rules")


class Reloader:
    def __init__(self, service: AdmissionService, *, interval: float = 2.0) -> None:
        self.service = service
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        metrics.initialise(self.service.rules.current.policy)
        self.tick()
        self._thread = threading.Thread(target=self._run, name="rule-reloader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)
        metrics.REVIEWS.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the loop must survive anything; the log says what
                log.exception("rule reload check failed")

    def tick(self) -> bool | None:
        """Reload the rules if their files changed, then refresh the gauges and hand the
        reviews counted since the last tick to the metrics files."""
        metrics.REVIEWS.flush()
        store = self.service.rules
        result = store.reload_if_changed()
        if result is True:
            metrics.initialise(store.current.policy)
            metrics.RELOADS.labels("success").inc()
            log.info(
                "rules reloaded",
                extra={
                    "generation": store.current.generation,
                    "rules": list(store.current.policy.rule_names),
                },
            )
        elif result is False:
            metrics.RELOADS.labels("failure").inc()
            problems = str(store.last_error).splitlines() if store.last_error else []
            log.error(
                "new rule files rejected; the last good rules stay in force",
                extra={"generation": store.current.generation, "problems": problems},
            )
        self._gauges()
        return result

    def _gauges(self) -> None:
        metrics.RULES_GENERATION.set(self.service.rules.current.generation)
        metrics.RULES_REJECTED.set(1 if self.service.rules.last_error is not None else 0)
        verdicts = self.service.rules.merged.verdicts
        metrics.rule_objects_not_in_force(key for key, v in verdicts.items() if not v.ready)
        ready, _ = self.service.ready()
        metrics.READY.set(1 if ready else 0)
        unmeetable = {(u.rule, u.source) for u in self.service.unmet if u.blocking}
        metrics.rules_unmeetable(source for _, source in sorted(unmeetable))
        source = self.service.inventory
        if source is not None:
            status = source.status()
            if status.age_seconds is not None:
                metrics.INVENTORY_AGE.set(status.age_seconds)
            metrics.INVENTORY_NODES.set(status.node_count)
            metrics.INVENTORY_UNAVAILABLE.set(0 if status.synced and not status.stale else 1)
