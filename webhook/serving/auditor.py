"""The server's background audit (opt-in: ``serve --audit``): one replica per deployment,
chosen by a Lease, audits the cluster every period and after each rule change, writes the
results as PolicyReports, and exports ``gpu_webhook_audit_findings``.

It runs in its own process (``python -m webhook.serving.auditor``), started and restarted
by the gunicorn master like the inventory watcher: listing 100,000 pods must not hold a
worker's interpreter lock, and a thread in the master would be copied into every fork.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from webhook import jsonlog
from webhook.cluster.apiclient import (
    ApiClient,
    ApiEndpoint,
    ApiError,
    KubeconfigError,
    api_endpoint_from_kubeconfig,
)
from webhook.cluster.clusteraudit import audit_cluster
from webhook.cluster.clusterobjects import ClusterObjects
from webhook.cluster.lease import Lease
from webhook.cluster.reportwriter import CrdMissing, ReportWriter
from webhook.cluster.sources.rulesource import list_rule_objects
from webhook.cluster.watcherprocess import WatcherProcess
from webhook.engine.policy.ruleset import PolicyError
from webhook.files.rulefiles import RuleStore
from webhook.files.ruleobjects import RuleObject
from webhook.reports.policyreport import policy_reports

log = logging.getLogger("webhook.audit")
LEASE_NAME = "gpu-webhook-audit"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_PERIOD_SECONDS = 3600.0
LEASE_SECONDS = 300
FindingsGauge = Callable[[Mapping[tuple[str, str], int]], None]


class LeaseLost(Exception):
    """The Lease went to another replica while this one audited."""


def findings_by_rule(reports: Sequence[Mapping[str, Any]]) -> Counter[tuple[str, str]]:
    """Results per (policy/rule, result) over every report: what the gauge exports."""
    counts: Counter[tuple[str, str]] = Counter()
    for report in reports:
        for result in report.get("results") or []:
            counts[(f"{result['policy']}/{result['rule']}", str(result["result"]))] += 1
    return counts


class BackgroundAudit:
    """The loop: hold the Lease, audit when due or when the rules changed, write, export."""

    def __init__(
        self,
        *,
        endpoint: ApiEndpoint,
        rules: RuleStore,
        lease: Lease,
        period_seconds: float = DEFAULT_PERIOD_SECONDS,
        export: FindingsGauge | None = None,
        tick_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        request_timeout_seconds: float = 30.0,
    ) -> None:
        self.endpoint = endpoint
        self.rules = rules
        self.lease = lease
        self.period_seconds = period_seconds
        self.export = export
        self.tick_seconds = tick_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._timeout = request_timeout_seconds
        self._due = 0.0
        self._audited_generation = 0
        self._renew_at = 0.0
        self._holding = False
        self.runs = 0
        self.last_error = ""
        self.rule_objects: tuple[RuleObject, ...] = ()
        rules.objects = lambda: self.rule_objects

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(self.tick_seconds)
        if self._holding:
            self.lease.release()

    def step(self) -> None:
        """One turn of the loop: reload rules, renew the Lease when due, audit when due."""
        if self.rules.reload_if_changed() is False and self.rules.last_error is not None:
            log.warning("rule files are broken; auditing with the last good rules")
        now = self._clock()
        if now >= self._renew_at or not self._holding:
            self._renew(now)
        if not self._holding:
            return
        changed = self.rules.current.generation != self._audited_generation
        if now >= self._due or changed:
            self.audit_once()
            self._due = self._clock() + self.period_seconds

    def _renew(self, now: float) -> None:
        held = self._holding
        self._holding = self.lease.try_hold()
        self._renew_at = now + self.lease.duration_seconds / 3
        if held and not self._holding and self.export is not None:
            # Another replica audits now: this one's figures would go stale on its
            # /metrics, so they read 0 (sum or max over replicas stays right).
            self.export({})

    def _keep_lease(self, _kind: str, _count: int) -> None:
        """Called after every page of a list: a long audit renews the Lease as it goes,
        and stops, writing nothing, if another replica took it meanwhile."""
        now = self._clock()
        if now >= self._renew_at:
            self._renew(now)
            if not self._holding:
                raise LeaseLost("another replica took the audit Lease during the audit")

    def audit_once(self) -> bool:
        started = self._clock()
        try:
            with ClusterObjects(self.endpoint, request_timeout_seconds=self._timeout) as cluster:
                # The rule objects as they are now (issue 33), merged as the server does.
                self.rule_objects = list_rule_objects(cluster.client)
                self.rules.reload_if_changed()
                ruleset = self.rules.current
                self._audited_generation = ruleset.generation
                # Claims and claim templates too, as the audit command judges them
                # (issue 31: one answer from every command).
                audit, _, notices = audit_cluster(
                    cluster, ruleset.policy, progress=self._keep_lease, claims=True
                )
                for notice in notices:
                    log.warning("background audit: %s", notice)
                reports = policy_reports(
                    audit.entries(),
                    policy=ruleset.policy,
                    now=self._wall_clock(),
                    errors=audit.errors,
                )
                if self.export is not None:
                    self.export(findings_by_rule(reports))
                written = ReportWriter(cluster.client).write(reports)
        except CrdMissing as exc:
            self.last_error = str(exc)
            log.error("background audit: %s", exc)
            return False
        except LeaseLost as exc:
            self.last_error = str(exc)
            log.info("background audit stopped: %s", exc)
            return False
        except (ApiError, KubeconfigError) as exc:
            self.last_error = str(exc)
            log.warning("background audit failed; next try in one period: %s", exc)
            return False
        self.runs += 1
        self.last_error = ""
        summary = audit.summary()
        log.info(
            "background audit done",
            extra={
                "seconds": round(self._clock() - started, 3),
                "objects": summary.objects,
                "deny": summary.verdicts.get("deny", 0),
                "warn": summary.verdicts.get("warn", 0),
                "audit": summary.verdicts.get("audit", 0),
                "reports_created": len(written.created),
                "reports_updated": len(written.updated),
                "reports_unchanged": len(written.unchanged),
                "reports_deleted": len(written.deleted),
                "reports_failed": len(written.failed),
                "rules_generation": ruleset.generation,
            },
        )
        return not written.failed


class AuditorProcess(WatcherProcess):
    """The master's side: one auditor process, restarted with backoff until stopped."""

    label = "background auditor"

    def __init__(
        self,
        *,
        kubeconfig: str | None,
        rules: str,
        period_seconds: float,
        lease_namespace: str,
        log_level: str = "info",
        context: str | None = None,
    ) -> None:
        super().__init__(kubeconfig=kubeconfig, context=context, log_level=log_level)
        self.rules = rules
        self.period_seconds = period_seconds
        self.lease_namespace = lease_namespace

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "webhook.serving.auditor"]
        command += ["--rules", self.rules, "--period", str(self.period_seconds)]
        command += ["--lease-namespace", self.lease_namespace, "--log-level", self.log_level]
        command += ["--parent", str(os.getpid())]
        if self.kubeconfig:
            command += ["--kubeconfig", self.kubeconfig]
        if self.context:
            command += ["--context", self.context]
        return command


def lease_namespace(configured: str | None) -> str:
    """The namespace for the Lease: as configured, else the pod's own (its service
    account's namespace file), else ``gpu-webhook``."""
    if configured:
        return configured
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "gpu-webhook"
    except OSError:
        return "gpu-webhook"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m webhook.serving.auditor")
    parser.add_argument("--kubeconfig", help="none: in-cluster configuration")
    parser.add_argument("--context", help="none: the kubeconfig's current-context")
    parser.add_argument("--rules", required=True)
    parser.add_argument("--period", type=float, default=DEFAULT_PERIOD_SECONDS)
    parser.add_argument("--lease-namespace", default="")
    parser.add_argument("--identity", default="", help="default: the pod's host name")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--parent", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT, or until the parent (the gunicorn master) is gone.
    Exit codes avoid 3 and 4, which gunicorn reads as a worker's boot failure."""
    args = _arguments(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(jsonlog.JsonFormatter())
    logging.getLogger().handlers = [handler]
    logging.getLogger().setLevel(args.log_level.upper())
    try:
        endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
        rules = RuleStore(args.rules)
    except KubeconfigError as exc:
        log.error("the cluster configuration is not usable: %s", exc)
        return 1
    except PolicyError as exc:
        log.error("the rules in %s are not usable: %s", args.rules, exc)
        return 1
    from webhook.serving import metrics

    identity = args.identity or f"{os.environ.get('HOSTNAME') or os.uname().nodename}"
    client = ApiClient(endpoint)
    lease = Lease(
        client,
        namespace=lease_namespace(args.lease_namespace),
        name=LEASE_NAME,
        identity=identity,
        duration_seconds=LEASE_SECONDS,
    )
    auditor = BackgroundAudit(
        endpoint=endpoint,
        rules=rules,
        lease=lease,
        period_seconds=args.period,
        export=metrics.audit_findings,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    thread = threading.Thread(target=auditor.run, args=(stop,), name="auditor", daemon=True)
    thread.start()
    log.info("background auditor started", extra={"identity": identity, "period": args.period})
    while not stop.wait(1.0):
        if args.parent and os.getppid() != args.parent:
            log.warning("the server that started the background auditor is gone; stopping")
            stop.set()
    thread.join(30.0)  # the loop ends its audit's current request, then gives up the Lease
    client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
