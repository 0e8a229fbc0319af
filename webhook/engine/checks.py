"""Checks: each returns findings, worded as what is wrong and what to change."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.engine.decision import Finding, action_of
from webhook.engine.gpus import Container, PodGPUs, QuantityProblem
from webhook.engine.inventory import Fit, Inventory, Placement, Taint
from webhook.engine.policy import Rule, RuleCheck, Settings, glob_matcher
from webhook.engine.quantity import format_quantity

PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True, slots=True)
class Scope:
    """One pod template under evaluation, after our mutations."""

    where: str  # dotted path of the pod spec in the object, e.g. "spec.template.spec"
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    pod: PodGPUs
    placement: Placement
    settings: Settings
    kind: str = ""  # the object's kind: a Pod, or the workload holding the template

    def at(self, container: Container) -> str:
        return f"{self.where}.{container.section}[{container.index}]"


def _q(value: Fraction | None, spelled: str = "") -> str:
    """The quantity as the user wrote it when known, else in Kubernetes' canonical form."""
    if spelled:
        return spelled
    return format_quantity(value) if value is not None else "?"


def _whole(value: Fraction | None) -> int:
    """The whole number of GPUs to ask for instead: a part of one rounds up to one."""
    if value is None:
        return 1
    return max(1, -(-value.numerator // value.denominator))


def _quantity_text(container: Container, problem: QuantityProblem) -> tuple[str, str]:
    c, r = f'container "{container.name}"', problem.resource
    if problem.check == "requestsWithoutLimits":
        q = _q(problem.request, problem.request_text)
        fix = (
            f'Set resources.limits["{r}"] to {q}.'
            if problem.request is not None and problem.request.denominator == 1
            else f'Set resources.requests["{r}"] and resources.limits["{r}"] to '
            f"{_whole(problem.request)}."
        )
        return (
            f"{c} requests {r}: {q} but sets no limit for it; GPUs are allocated by limit. {fix}",
            f"{c}: {r} is in requests but not in limits",
        )
    if problem.check == "requestsNotEqualLimits":
        q = _q(problem.request, problem.request_text)
        lim = _q(problem.limit, problem.limit_text)
        both = lim if problem.limit is not None and problem.limit.denominator == 1 else None
        return (
            f"{c} requests {r}: {q} but limits it to {lim}; GPUs cannot be overcommitted, "
            f"so request and limit must be equal. Set both to {both or _whole(problem.limit)}.",
            f"{c}: {r} request {q} differs from limit {lim}",
        )
    if problem.check == "fractionalQuantity":
        q = _q(problem.request, problem.request_text)
        return (
            f"{c} asks for {r}: {q}, which is not a whole number; GPUs are allocated whole. "
            f"Use {_whole(problem.request)}, or a resource for part of a GPU (a MIG profile "
            "such as nvidia.com/mig-1g.10gb, or nvidia.com/gpu.shared).",
            f"{c}: {r} {q} is not a whole number",
        )
    if problem.check == "negativeQuantity":
        q = _q(problem.request, problem.request_text)
        return (
            f"{c} asks for {r}: {q}; a quantity cannot be negative. Use 0 or more.",
            f"{c}: {r} {q} is negative",
        )
    return (
        f"{c}: {r} {problem.detail}. Write a whole number such as 1.",
        f"{c}: {r} {problem.detail}",
    )


def quantity_findings(scope: Scope, settings: Settings) -> Iterator[Finding]:
    for container, problem in scope.pod.problems:
        action = settings.actions.get(problem.check, "deny")
        if action == "repair":
            continue
        message, summary = _quantity_text(container, problem)
        yield Finding("builtin", problem.check, action, message, summary, scope.at(container))


def _node_text(fit: Fit) -> str:
    if fit.node is None:
        return "none"
    if fit.node.pool:
        return f"node pool {fit.node.pool} (may scale from zero)"
    return f"node {fit.node.name}"


# Admits every node a pod could be allowed onto: a cordoned node is no alternative to offer.
_ANYWHERE = Placement(node_selector={}, required_terms=None, tolerations=({"operator": "Exists"},))


def capacity_findings(scope: Scope, inventory: Inventory, settings: Settings) -> Iterator[Finding]:
    for resource, need in scope.pod.effective.items():
        if need <= 0:
            continue
        if resource not in inventory.resource_names:
            yield _unknown_resource(scope, resource, inventory, settings)
            continue
        fit = inventory.largest(resource, scope.placement)
        if need <= fit.amount:
            continue
        best = inventory.largest(resource, _ANYWHERE)
        if fit.node is None:
            text = f"the pod requests {need} {resource} but no node it can use offers any."
        else:
            text = (
                f"the pod requests {need} {resource}, but the largest node it can use, "
                f"{_node_text(fit).removeprefix('node ')}, has {fit.amount} allocatable."
            )
        tainted = _tainted_fit(scope, inventory, resource, fit.amount)
        text += _remedy(need, fit, best) if tainted is None else _taint_text(need, *tainted)
        summary = f"{need} {resource} requested, largest usable node has {fit.amount}"
        action = settings.actions["capacity"]
        yield Finding("builtin", "capacity", action_of(action), text, summary, scope.where)


def _remedy(need: int, fit: Fit, best: Fit) -> str:
    text = ""
    if best.amount > fit.amount:
        text += (
            f" {_node_text(best).capitalize()} has {best.amount}, but the pod's "
            "nodeSelector, node affinity or tolerations exclude it."
        )
    if best.amount >= need and fit.amount == 0:
        return text + " Let the pod use that node."
    if best.amount >= need:
        return text + f" Let the pod use that node, or request at most {fit.amount}."
    return text + (
        f" No node has {need}: request at most {best.amount} per pod and spread the "
        "work over more pods."
    )


def _tainted_fit(
    scope: Scope, inventory: Inventory, resource: str, usable: int
) -> tuple[Fit, list[Taint]] | None:
    """The larger node the pod's selector and affinity admit but its tolerations do not, and
    the taints that keep it off: the scheduler's TaintToleration filter, named for the user."""
    selected = Placement(
        node_selector=scope.placement.node_selector,
        required_terms=scope.placement.required_terms,
        tolerations=({"operator": "Exists"},),
    )
    fit = inventory.largest(resource, selected)
    if fit.node is None or fit.amount <= usable:
        return None
    tolerations = Placement(
        node_selector={}, required_terms=None, tolerations=scope.placement.tolerations
    )
    taints = [t for t in fit.node.taints if not tolerations.admits({}, "", (t,))]
    return (fit, taints) if taints else None


def _taint_text(need: int, fit: Fit, taints: list[Taint]) -> str:
    named = ", ".join(_taint_name(t) for t in taints)
    tolerations = "; ".join(_toleration_text(t) for t in taints)
    one = len(taints) == 1
    text = (
        f" {_node_text(fit).capitalize()} has {fit.amount}, but its "
        f"{'taint' if one else 'taints'} {named} {'keeps' if one else 'keep'} the pod off. "
        f"If the pod may run there, add to its tolerations: {tolerations}."
    )
    if fit.amount < need:
        text += f" Even there, request at most {fit.amount}."
    return text


def _taint_name(taint: Taint) -> str:
    return (
        f"{taint.key}={taint.value}:{taint.effect}"
        if taint.value
        else f"{taint.key}:{taint.effect}"
    )


def _toleration_text(taint: Taint) -> str:
    if taint.value:
        return (
            f'{{key: "{taint.key}", operator: "Equal", value: "{taint.value}", '
            f'effect: "{taint.effect}"}}'
        )
    return f'{{key: "{taint.key}", operator: "Exists", effect: "{taint.effect}"}}'


def _unknown_resource(
    scope: Scope, resource: str, inventory: Inventory, settings: Settings
) -> Finding:
    known = sorted(n for n in inventory.resource_names if settings.gpu_resources.is_gpu(n))
    domain = resource.partition("/")[0]
    alike = [n for n in known if n.startswith(domain + "/")] or known
    offered = ", ".join(alike) if alike else "no GPU resources at all"
    close = difflib.get_close_matches(resource, alike, n=1, cutoff=0.8)
    hint = f" Did you mean {close[0]}?" if close else " Check the resource name."
    message = (
        f"the pod requests {resource}, which no node advertises; this cluster offers "
        f"{offered}.{hint}"
    )
    summary = f"{resource} is offered by no node (offered: {offered})"
    return Finding(
        "builtin",
        "unknownResource",
        action_of(settings.actions["unknownResource"]),
        message,
        summary,
        scope.where,
    )


# --- rule-driven checks -------------------------------------------------------------------


def rule_findings(scope: Scope, rule: Rule, *, inventory: Inventory | None) -> Iterator[Finding]:
    for check in rule.checks:
        result = (
            _RULE_CHECKS[check.kind](scope, check, inventory)
            if check.kind in _RULE_CHECKS
            else None
        )
        if result is None:
            continue
        message, summary = result
        if check.message:
            message = f"{message} {check.message}"
        yield Finding(rule.name, check.kind, check.action, message, summary, scope.where)


Result = tuple[str, str] | None


def _max_per_pod(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    if scope.pod.total <= check.value:
        return None
    return (
        f"the pod requests {scope.pod.total} GPUs; at most {check.value} per pod are allowed "
        f"here. Request {check.value} or fewer, or split the work over more pods.",
        f"{scope.pod.total} GPUs per pod, at most {check.value} allowed",
    )


def _max_per_container(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    for c in scope.pod.containers:
        if c.gpu_count > check.value:
            return (
                f'container "{c.name}" requests {c.gpu_count} GPUs; at most {check.value} per '
                "container are allowed here.",
                f'container "{c.name}": {c.gpu_count} GPUs, at most {check.value}',
            )
    return None


def _allowed_counts(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    allowed = sorted(check.value)
    for c in scope.pod.containers:
        for resource, count in c.gpus.items():
            if count not in allowed:
                nearest = min((a for a in allowed if a >= count), default=allowed[-1])
                listed = ", ".join(map(str, allowed))
                return (
                    f'container "{c.name}" requests {count} {resource}; allowed counts are '
                    f"{listed} (whole nodes or halves pack without stranding GPUs). "
                    f"Use {nearest}.",
                    f'container "{c.name}": {count} GPUs, allowed {listed}',
                )
    return None


def _selected_products(scope: Scope) -> set[str] | None:
    """Products the pod's own constraints allow; ``None`` when it does not constrain them."""
    selected = scope.placement.node_selector.get(PRODUCT_LABEL)
    if selected is not None:
        return {str(selected)}
    terms = scope.placement.required_terms or []
    products: set[str] = set()
    for term in terms:
        values = [
            set(map(str, e.get("values") or []))
            for e in term.get("matchExpressions") or []
            if isinstance(e, dict) and e.get("key") == PRODUCT_LABEL and e.get("operator") == "In"
        ]
        if not values:
            return None  # this term allows any product
        products |= set.intersection(*values)
    return products if terms else None


def _allowed_products(scope: Scope, check: RuleCheck, inventory: Inventory | None) -> Result:
    allowed = glob_matcher(check.value)
    listed = ", ".join(check.value)
    if inventory is not None:
        reachable = {
            shape.labels.get(PRODUCT_LABEL, "(unlabelled)")
            for name in scope.pod.resources
            for shape in inventory.admitted(name, scope.placement)
        }
        bad = sorted(p for p in reachable if not allowed(p))
    else:
        selected = _selected_products(scope)
        if selected is None:
            return (
                f"the pod may land on any GPU product, but only {listed} are allowed here. "
                f"Add a nodeSelector or required node affinity on {PRODUCT_LABEL}.",
                f"pod does not select a GPU product; allowed: {listed}",
            )
        bad = sorted(p for p in selected if not allowed(p))
    if not bad:
        return None
    return (
        f"the pod can land on nodes with GPU product {', '.join(bad)}, but only {listed} are "
        f"allowed here. Select allowed products with {PRODUCT_LABEL} in the pod's "
        "nodeSelector or required node affinity.",
        f"GPU product {', '.join(bad)} not allowed (allowed: {listed})",
    )


def _max_shared(scope: Scope, check: RuleCheck, inventory: Inventory | None) -> Result:
    del inventory
    for c in scope.pod.containers:
        for resource, count in c.gpus.items():
            if count > check.value and scope.settings.gpu_resources.is_shared(resource):
                return (
                    f'container "{c.name}" requests {count} {resource}; time-sliced replicas '
                    "of a shared GPU add no compute or memory, and may land on one physical "
                    f"GPU. Request at most {check.value}, or a dedicated GPU resource.",
                    f'container "{c.name}": {count} shared GPUs, at most {check.value}',
                )
    return None


def _required_labels(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    missing = [k for k in check.value if k not in scope.labels]
    if not missing:
        return None
    return (
        f"GPU pods here must carry the labels {', '.join(check.value)}; missing: "
        f"{', '.join(missing)}. Add them to the pod's metadata.labels.",
        f"missing pod labels: {', '.join(missing)}",
    )


def _forbidden(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    forbidden = glob_matcher(check.value)
    bad = [r for r in scope.pod.resources if forbidden(r)]
    if not bad:
        return None
    return (
        f"the pod requests {', '.join(bad)}, which pods here may not use.",
        f"{', '.join(bad)} may not be requested here",
    )


# Workloads that run for long: a GPU that hangs (driver hang, XID error) leaves their pods
# Running and useless until a liveness probe restarts them.
LONG_RUNNING_KINDS = frozenset({"Deployment", "StatefulSet", "LeaderWorkerSet"})
_PROBE_FIELDS = {
    "liveness": "livenessProbe",
    "readiness": "readinessProbe",
    "startup": "startupProbe",
}


def _require_probes(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    if scope.kind not in LONG_RUNNING_KINDS:
        return None
    for c in scope.pod.containers:
        if not c.gpu_count or (c.section == "initContainers" and not c.sidecar):
            continue
        missing = [_PROBE_FIELDS[p] for p in check.value if not c.body.get(_PROBE_FIELDS[p])]
        if missing:
            return (
                f'GPU container "{c.name}" of this {scope.kind} has no {", ".join(missing)}; '
                "a GPU driver hang or XID error leaves its pod Running but useless until a "
                "liveness probe restarts it. Add a probe that exercises the GPU (the "
                "server's health endpoint, or nvidia-smi).",
                f'GPU container "{c.name}" has no {", ".join(missing)}',
            )
    return None


def _allowed_priority_classes(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    allowed = glob_matcher(check.value)
    listed = ", ".join(check.value)
    name = scope.spec.get("priorityClassName")
    if isinstance(name, str) and name and allowed(name):
        return None
    if not isinstance(name, str) or not name:
        return (
            f"the pod sets no priorityClassName; GPU pods here must use one of {listed}. "
            "Set spec.priorityClassName.",
            f"no priorityClassName; allowed: {listed}",
        )
    return (
        f'the pod uses priorityClassName "{name}"; GPU pods here must use one of {listed}. '
        "Change spec.priorityClassName.",
        f'priorityClassName "{name}" not allowed (allowed: {listed})',
    )


_RULE_CHECKS = {
    "maxGPUsPerPod": _max_per_pod,
    "maxGPUsPerContainer": _max_per_container,
    "allowedGPUCounts": _allowed_counts,
    "allowedProducts": _allowed_products,
    "maxSharedGPUs": _max_shared,
    "requiredLabels": _required_labels,
    "forbiddenResources": _forbidden,
    "requireProbes": _require_probes,
    "allowedPriorityClasses": _allowed_priority_classes,
}
