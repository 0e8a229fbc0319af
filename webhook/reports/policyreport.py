"""Audit results as ``wgpolicyk8s.io/v1alpha2`` PolicyReports, the format Kyverno, Kubewarden
and Falco write and Policy Reporter and other UIs read.

Fields follow the CRD in kubernetes-sigs/wg-policy-prototypes
(``policy-report/crd/v1alpha2/wgpolicyk8s.io_policyreports.yaml``): each result names the
``policy`` (the rule file document: a GPUPolicy's name, or ``builtin`` for the checks
configured in GPUSettings), the ``rule`` (the check), ``result`` (pass, fail, warn, error,
skip), ``severity``, ``message``, ``resources`` (the subject) and a ``timestamp``.

One PolicyReport per namespace (split in parts of ``MAX_RESULTS`` results, since an object
in etcd stays under 1.5 MiB), and one ClusterPolicyReport for what concerns no namespace:
kinds that could not be listed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.policy.decision import Finding, Waiver
from webhook.engine.policy.ruleset import Policy
from webhook.reports.audit import AuditEntry

API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "gpu-webhook-audit"
SOURCE = "gpu-webhook"
CATEGORY = "GPU"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-webhook"}
MAX_RESULTS = 1000
MAX_MESSAGE = 1000
RESULT_KINDS = ("pass", "fail", "warn", "error", "skip")
# deny is what the admission would refuse; audit is what it would record but let through.
_RESULT = {"deny": "fail", "audit": "fail", "warn": "warn"}
_SEVERITY = {"deny": "high", "warn": "medium", "audit": "low"}
CAPACITY_SKIPPED = "capacity checks skipped"


def policy_reports(
    entries: Iterable[AuditEntry],
    *,
    policy: Policy,
    now: float,
    errors: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every report an audit leaves: the namespaces' PolicyReports (in name order), then
    the ClusterPolicyReport. ``now`` is seconds since the epoch."""
    stamp = {"seconds": int(now), "nanos": int((now % 1) * 1e9)}
    documents = {r.name: r.document for r in policy.rules}
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_namespace.setdefault(entry.ref.namespace, []).extend(
            _results(entry, stamp=stamp, documents=documents)
        )
    reports = []
    for namespace in sorted(by_namespace):
        results = by_namespace[namespace]
        for part, start in enumerate(range(0, len(results), MAX_RESULTS), 1):
            reports.append(
                _report(
                    "PolicyReport",
                    report_name(part),
                    results[start : start + MAX_RESULTS],
                    namespace=namespace,
                )
            )
    cluster = [
        {
            "source": SOURCE,
            "policy": SOURCE,
            "rule": "list",
            "category": CATEGORY,
            "result": "error",
            "severity": "medium",
            "message": _short(error),
            "timestamp": stamp,
        }
        for error in errors
    ]
    reports.append(_report("ClusterPolicyReport", REPORT_NAME, cluster))
    return reports


def report_name(part: int) -> str:
    return REPORT_NAME if part == 1 else f"{REPORT_NAME}-{part}"


def _report(
    kind: str, name: str, results: list[dict[str, Any]], *, namespace: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        metadata["namespace"] = namespace
    counts = Counter(r["result"] for r in results)
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "summary": {k: counts.get(k, 0) for k in RESULT_KINDS},
        "results": results,
    }


def _results(
    entry: AuditEntry, *, stamp: Mapping[str, int], documents: Mapping[str, Any]
) -> list[dict[str, Any]]:
    subject = entry.ref.to_json()
    folded = ", ".join(f"{n} {kind}" for kind, n in sorted(entry.folded.items()))
    base: dict[str, Any] = {
        "source": SOURCE,
        "category": CATEGORY,
        "resources": [subject],
        "timestamp": stamp,
        "scored": True,
    }

    def properties(extra: Mapping[str, str]) -> dict[str, str]:
        out = dict(extra)
        if folded:
            out["folded"] = folded
        return out

    def result(policy: str, rule: str, outcome: str, severity: str, message: str) -> dict[str, Any]:
        return {
            **base,
            "policy": policy,
            "rule": rule,
            "result": outcome,
            "severity": severity,
            "message": _short(message),
            "properties": properties({}),
        }

    results = [_finding(f, base, documents, properties) for f in entry.findings]
    results += [_waived(w, base, documents, properties) for w in entry.waivers]
    results += [result("builtin", "warning", "warn", "medium", w) for w in entry.warnings]
    results += [
        result("builtin", "capacity", "skip", "info", notice)
        for notice in entry.notices
        if notice.startswith(CAPACITY_SKIPPED)
    ]
    if not results:
        results.append(
            result(SOURCE, "admission", "pass", "info", "admitted by the current rules as it is")
        )
    return results


def _finding(
    finding: Finding,
    base: Mapping[str, Any],
    documents: Mapping[str, Any],
    properties: Any,
) -> dict[str, Any]:
    extra: dict[str, str] = {"action": finding.action}
    if finding.path:
        extra["path"] = finding.path
    document = documents.get(finding.rule)
    if document is not None:
        extra["document"] = f"{document.source}#{document.index}"
    return {
        **base,
        "policy": finding.rule,
        "rule": finding.check,
        "result": _RESULT[finding.action],
        "severity": _SEVERITY[finding.action],
        "message": _short(finding.message),
        "properties": properties(extra),
    }


def _waived(
    waiver: Waiver, base: Mapping[str, Any], documents: Mapping[str, Any], properties: Any
) -> dict[str, Any]:
    """A finding a GPUPolicyException waived: a skip that names the exception, so that an
    admin reading the report sees who waived what."""
    result = _finding(waiver.finding, base, documents, properties)
    result["properties"] = {**result["properties"], "exception": waiver.exception}
    message = f"waived by GPUPolicyException {waiver.exception}: {waiver.finding.message}"
    return {**result, "result": "skip", "severity": "info", "message": _short(message)}


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
