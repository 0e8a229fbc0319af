"""The object's stages, after every template was judged. ``workload_totals``: what all pods
of an object ask together (replicas times GPUs per pod, against the cluster's capacity and
``maxGPUsPerWorkload``; on an UPDATE only the totals it raises). ``after_admission``: what
admission cannot see pod by pod: gangs that cannot all run at once, and GPU quota (issue 26).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.enforcement.checks import (
    _cannot_know,
    min_values_only,
)
from webhook.engine.enforcement.quotas import pod_quota_notices, workload_quota_findings
from webhook.engine.evaluation.request import (
    NO_INVENTORY_NOTICE,
    InventoryView,
    Request,
    Review,
    request_as_created,
    template_asks,
)
from webhook.engine.evaluation.scale import most_words
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.policy.ruleset import Policy, Settings
from webhook.engine.resources.inventory import FitAnswer, Inventory
from webhook.engine.resources.quotas import Quotas
from webhook.engine.scheduling.dra import PodClaims
from webhook.engine.scheduling.gangdevices import pod_devices
from webhook.engine.scheduling.gangs import gang_findings, may_be_gang
from webhook.engine.scheduling.wholepod import (
    cluster_capacity_finding,
    served_total,
)


def _gang_unsure(
    fits: list[tuple[PodTemplate, FitAnswer]], snapshot: Inventory, settings: Settings
) -> str:
    """What may bring nodes a gang's count cannot see: a proof then warns, never a guess."""
    if snapshot.unbounded:
        return "a node pool of unknown size may bring the nodes it needs"
    if not settings.min_values_policy and any(min_values_only(fit) for _, fit in fits):
        return (
            "a pool's minValues keeps its nodes out of the count, and Karpenter launches them "
            "under --min-values-policy BestEffort, a flag the webhook cannot see (declare "
            "GPUSettings.minValuesPolicy to have this judged)"
        )
    return ""


# One judged template: what it asks (resources, claims) and where it fits, if that was asked.
Judged = tuple[PodTemplate, PodGPUs, PodClaims, FitAnswer | None]


def workload_totals(
    review: Review,
    judged: list[Judged],
    counted: list[Judged],
    *,
    floor: Totals | None,
    workload: bool,
) -> None:
    """The object's first stage after its templates: what the judged templates' claims could
    not be checked against, and what all pods of a workload ask together. ``counted``: on a
    workload UPDATE (``floor``, the old object's totals), every template's ask, unchanged
    ones too, for the totals that replicas and parallelism change; ``workload``: the object
    is no Pod."""
    view, policy, findings = review.view, review.policy, review.findings
    snapshot, request = review.snapshot, review.request
    if not view.problem:
        for _, _, claims, _ in judged:
            devices = view.devices
            if claims.claims and (devices is None or not devices.complete):
                review.notices.append(
                    "DRA claims not checked: no DRA inventory (classes and slices)"
                )
    if not workload and snapshot is not None and not view.problem:
        return  # a Pod judged on an inventory: no totals (the most common review)
    if _asks_anything(judged):
        if view.problem:
            _inventory_unavailable(view.problem, policy, findings, review.warnings)
        elif snapshot is None:
            review.notices.append(NO_INVENTORY_NOTICE)
        elif workload and floor is None:
            per_pod = [(t, pod) for t, pod, _, _ in judged]
            asked = [claims for _, _, claims, _ in judged]
            findings.extend(workload_findings(per_pod, asked, snapshot, policy, view))
    if floor is not None:
        # An UPDATE is judged on the totals it raises: a Deployment scaled from 1 to 100
        # replicas, a Job's parallelism; a total it leaves or lowers was judged before.
        pods = [(t, pod) for t, pod, _, _ in counted]
        asks = [claims for _, _, claims, _ in counted]
        if snapshot is not None and any(p.total for _, p in pods):
            findings.extend(workload_findings(pods, asks, snapshot, policy, view, floor=floor))
        findings.extend(workload_rule_findings(request, pods, policy, asks, floor=floor))
    elif workload:
        per_pod = [(t, pod) for t, pod, _, _ in judged]
        asked = [claims for _, _, claims, _ in judged]
        findings.extend(workload_rule_findings(request, per_pod, policy, asked))


def _asks_anything(judged: list[Judged]) -> bool:
    """Some template asks for GPUs or has a quantity problem (a loop: runs every review)."""
    for _, pod, _, _ in judged:  # noqa: SIM110 - a generator costs more
        if pod.total or pod.problems:
            return True
    return False


def _inventory_unavailable(
    problem: str, policy: Policy, findings: list[Finding], warnings: list[str]
) -> None:
    if policy.settings.inventory_failure_mode == "deny":
        findings.append(
            Finding(
                "builtin",
                "capacity",
                "deny",
                f"GPU capacity cannot be checked: {problem}. Retry when the webhook's node "
                "inventory is back, or ask an admin to set inventoryFailureMode: allow.",
                f"GPU capacity not checked: {problem}",
            )
        )
    else:
        warnings.append(f"GPU capacity not checked: {problem}")


def after_admission(review: Review, judged: list[Judged]) -> None:
    """The object's last stage, on a create whose every template was judged: gangs that
    cannot run at once, and GPU quota (issue 26)."""
    request, policy, snapshot = review.request, review.policy, review.snapshot
    findings = review.findings
    devices = review.devices
    fits = [(t, fit) for t, _, _, fit in judged if fit is not None]
    if fits and snapshot is not None and may_be_gang(request.object, fits):
        # Templates whose GPUs come from DRA claims: their gang is counted from the devices.
        by_devices = {
            id(t): found
            for t, _, claims, fit in judged
            if fit is not None and (found := pod_devices(claims, devices)) is not None
        }
        action = policy.settings.actions.get("gangFit", "deny")
        unsure = _gang_unsure(fits, snapshot, policy.settings)
        findings.extend(
            gang_findings(request.object, fits, action=action, devices=by_devices, unsure=unsure)
        )
    quotas = review.view.quotas
    if quotas is not None:
        asked = [(t, pod, claims) for t, pod, claims, _ in judged]
        workload = bool(asked) and bool(asked[0][0].path)
        _quota(
            request,
            asked,
            quotas,
            policy=policy,
            findings=findings,
            notices=review.notices,
            workload=workload,
        )


def _quota(
    request: Request,
    asked: list[tuple[PodTemplate, PodGPUs, PodClaims]],
    quotas: Quotas,
    *,
    policy: Policy,
    findings: list[Finding],
    notices: list[str],
    workload: bool,
) -> None:
    namespace = request.effective_namespace
    if workload:
        counted = [a for a in asked if a[0].replicas is not None]
        action = policy.settings.actions.get("gpuQuota", "warn")
        findings.extend(workload_quota_findings(namespace, counted, quotas, action=action))
    elif request.operation == "CREATE" and not _admitted(request.object):
        notices.extend(pod_quota_notices(namespace, asked, quotas))


def _admitted(obj: Any) -> bool:
    """A pod that is bound or has a status was admitted already: its GPUs are in the
    quota's ``used`` (an audit of live pods must not call them refused)."""
    spec, status = obj.get("spec"), obj.get("status")
    return (isinstance(spec, dict) and bool(spec.get("nodeName"))) or bool(status)


@dataclass(frozen=True, slots=True)
class Totals:
    """What all pods of a workload ask for: per resource, and GPUs in all."""

    needed: Mapping[str, int]
    total: int


def _totals(per_pod: Sequence[tuple[PodTemplate, PodGPUs]], claims: Sequence[PodClaims]) -> Totals:
    """Per resource and in all; with the resources a device class serves (``claims``,
    taken out of ``effective`` to be judged as claims), which are GPUs the pods ask for."""
    needed: dict[str, int] = {}
    total = 0
    for (template, pod), asked in zip(per_pod, claims, strict=True):
        if template.replicas is None or not template.path:
            continue
        served = [(c.name, c.gpu_count) for c in asked.claims if not c.counted]
        for resource, count in (*pod.effective.items(), *served):
            needed[resource] = needed.get(resource, 0) + count * template.replicas
        # The GPU limit counts what an autoscaler may make (``PodTemplate.counted``).
        total += pod.total * (template.counted or 0)
    return Totals(needed, total)


def old_totals(request: Request, policy: Policy, view: InventoryView) -> Totals | None:
    """On a workload UPDATE, the old object's totals; ``None`` on CREATE."""
    old = request.old_object
    if request.operation != "UPDATE" or not isinstance(old, dict):
        return None
    templates = policy.kinds.templates(old) or []
    asked = request_as_created(request, old)
    asks = [(t, *template_asks(asked, t, settings=policy.settings, view=view)) for t in templates]
    return _totals([(t, pod) for t, pod, _ in asks], [claims for _, _, claims in asks])


def workload_findings(
    per_pod: list[tuple[PodTemplate, PodGPUs]],
    claims: list[PodClaims],
    snapshot: Inventory,
    policy: Policy,
    view: InventoryView,
    *,
    floor: Totals | None = None,
) -> list[Finding]:
    """Replicas times GPUs per pod against every GPU in the cluster: a warning by default,
    since nodes may be added, but a job that can never start all its workers hangs. With
    a ``floor`` (an UPDATE), only resources whose total the update raises. A resource a
    DRA device class serves counts its devices too (``wholepod.served_total``); where the
    cluster's total cannot be known (a pool of unknown size, a selector the webhook cannot
    evaluate) the finding is a warning that says so, never a denial."""
    needed = _totals(per_pod, claims).needed
    findings = []
    action = policy.settings.actions.get("clusterCapacity", "warn")
    devices = view.usable_devices
    for resource, need in needed.items():
        if floor is not None and need <= floor.needed.get(resource, 0):
            continue
        served = (
            None if devices is None else served_total(resource, devices=devices, nodes=snapshot)
        )
        if served is not None:
            finding = cluster_capacity_finding(served, need=need, action=action)
            if finding is not None:
                findings.append(finding)
            continue
        have = snapshot.total(resource)
        if need > have and resource in snapshot.resource_names:
            message = (
                f"all pods of this workload together request {need} {resource}, but the "
                f"whole cluster has {have}; not every pod can run at once. Lower replicas "
                "or GPUs per pod, or add nodes."
            )
            summary = f"workload needs {need} {resource}, cluster has {have}"
            finding = Finding("builtin", "clusterCapacity", action_of(action), message, summary)
            # A pool of unknown size may bring the rest: never a denial on a guess.
            findings.append(
                _cannot_know(finding, snapshot.unbounded) if snapshot.unbounded else finding
            )
    return findings


def workload_rule_findings(
    request: Request,
    per_pod: list[tuple[PodTemplate, PodGPUs]],
    policy: Policy,
    claims: list[PodClaims],
    *,
    floor: Totals | None = None,
) -> list[Finding]:
    """``maxGPUsPerWorkload``; with a ``floor`` (an UPDATE), only when the update raises
    the workload's total."""
    findings: list[Finding] = []
    workload = [
        (t, p, c)
        for (t, p), c in zip(per_pod, (c.gpu_classes for c in claims), strict=True)
        if t.replicas is not None and t.path
    ]
    if not workload:
        return findings
    # An elastic job counts the most workers its autoscaler may make (issue 41).
    total = sum(p.total * (t.counted or 0) for t, p, _ in workload)
    if floor is not None and total <= floor.total:
        return findings
    counting = most_words([(t, p.total) for t, p, _ in workload])
    for rule in policy.rules:
        for check in rule.checks:
            if check.kind != "maxGPUsPerWorkload" or total <= check.value:
                continue
            if not any(
                rule.match.matches(
                    namespace=request.effective_namespace,
                    namespace_labels=request.namespace_labels,
                    pod_labels=t.labels,
                    resources=p.resources,
                    gpu_count=p.total,
                    device_classes=c,
                )
                for t, p, c in workload
            ):
                continue
            message = (
                f"all pods of this workload together request {total} GPUs"
                + (f", counting {counting}" if counting else "")
                + f"; at most {check.value} are allowed per workload here. Lower replicas"
                + (", the declared maximum" if counting else "")
                + " or GPUs per pod."
            )
            if check.message:
                message += " " + check.message
            findings.append(
                Finding(
                    rule.name,
                    check.kind,
                    check.action,
                    message,
                    f"workload requests {total} GPUs, at most {check.value}",
                )
            )
    return findings
