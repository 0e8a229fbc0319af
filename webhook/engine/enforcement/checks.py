"""Checks: each returns findings, worded as what is wrong and what to change."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.engine.demand.gpus import Container, PodGPUs, QuantityProblem
from webhook.engine.kube.quantity import format_bytes, format_quantity
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.policy.ruleset import Action, Rule, RuleCheck, Settings, glob_matcher
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.fit import Shortfall, quantity_text
from webhook.engine.resources.gpufacts import (
    MEMORY_LABEL,
    MIG_PREFIX,
    MIG_PROFILES,
    PRODUCT_LABEL,
    UNLABELLED,
    DeviceFacts,
    mig_profile_gpus,
)
from webhook.engine.resources.inventory import (
    MIN_VALUES,
    Fit,
    FitAnswer,
    Inventory,
    Node,
    Placement,
    Shape,
    Taint,
    UnboundedPool,
    Units,
)
from webhook.engine.resources.offers import VENDOR_GPU_RESOURCES, lookalike, offered, offered_names
from webhook.engine.scheduling.devicepolicy import ClaimUnits, served_index
from webhook.engine.scheduling.dra import ClaimGPUs, PodClaims, claim_entries, served_gpu_resources


@dataclass(slots=True)  # not frozen: built on every admission, and frozen init costs more
class Scope:
    """One pod template under evaluation, after our mutations."""

    where: str  # dotted path of the pod spec in the object, e.g. "spec.template.spec"
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    pod: PodGPUs
    placement: Placement
    settings: Settings
    # Which node classes take the pod's whole request vector; set when there is an
    # inventory to ask (``Inventory.fit``).
    fit: FitAnswer | None = None
    kind: str = ""  # the object's kind: a Pod, or the workload holding the template
    # The DRA inventory (classes serve extended resources too), when there is one.
    devices: DeviceInventory | None = None
    # Some of the pod's GPUs may come from DRA devices (a claim, or a resource a class
    # serves): rules keyed on GPU labels are then also held on the devices
    # (``scheduling.devicepolicy``), and a node-side check alone does not deny.
    dra_gpus: bool = False
    # The pod's claims: what each container holds through them (``PodClaims.held``).
    claims: PodClaims | None = None

    def claim_gpus(self, container: Container) -> ClaimGPUs | None:
        """The GPUs ``container`` holds through claims, when it names any."""
        return self.claims.gpus_of(container.path) if self.claims else None

    def at(self, container: Container) -> str:
        if container.index < 0:
            return f"{self.where}.{container.section}"
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


# --- built-in quantity checks ---------------------------------------------------------------
# ``webhook.engine.demand.gpus`` finds the problem as it reads a container's resources; the
# words for each check id live here, one function each, registered in ``_QUANTITY_WORDS``.

Words = tuple[str, str]  # the message with its fix, and the one-line summary


def _requests_without_limits(c: str, problem: QuantityProblem) -> Words:
    r, q = problem.resource, _q(problem.request, problem.request_text)
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


def _requests_not_equal_limits(c: str, problem: QuantityProblem) -> Words:
    r, q = problem.resource, _q(problem.request, problem.request_text)
    lim = _q(problem.limit, problem.limit_text)
    both = lim if problem.limit is not None and problem.limit.denominator == 1 else None
    return (
        f"{c} requests {r}: {q} but limits it to {lim}; GPUs cannot be overcommitted, "
        f"so request and limit must be equal. Set both to {both or _whole(problem.limit)}.",
        f"{c}: {r} request {q} differs from limit {lim}",
    )


def _fractional_quantity(c: str, problem: QuantityProblem) -> Words:
    r, q = problem.resource, _q(problem.request, problem.request_text)
    return (
        f"{c} asks for {r}: {q}, which is not a whole number; GPUs are allocated whole. "
        f"Use {_whole(problem.request)}, or a resource for part of a GPU (a MIG profile "
        "such as nvidia.com/mig-1g.10gb, or nvidia.com/gpu.shared).",
        f"{c}: {r} {q} is not a whole number",
    )


def _negative_quantity(c: str, problem: QuantityProblem) -> Words:
    r, q = problem.resource, _q(problem.request, problem.request_text)
    return (
        f"{c} asks for {r}: {q}; a quantity cannot be negative. Use 0 or more.",
        f"{c}: {r} {q} is negative",
    )


def _invalid_quantity(c: str, problem: QuantityProblem) -> Words:
    r = problem.resource
    return (
        f"{c}: {r} {problem.detail}. Write a whole number such as 1.",
        f"{c}: {r} {problem.detail}",
    )


_QUANTITY_WORDS = {
    "requestsWithoutLimits": _requests_without_limits,
    "requestsNotEqualLimits": _requests_not_equal_limits,
    "fractionalQuantity": _fractional_quantity,
    "negativeQuantity": _negative_quantity,
    "invalidQuantity": _invalid_quantity,
}


def quantity_findings(scope: Scope, settings: Settings) -> Iterator[Finding]:
    for container, problem in scope.pod.problems:
        action = settings.actions.get(problem.check, "deny")
        if action == "repair":
            continue
        words = _QUANTITY_WORDS[problem.check]
        message, summary = words(f'container "{container.name}"', problem)
        yield Finding("builtin", problem.check, action, message, summary, scope.at(container))


def _node_text(fit: Fit) -> str:
    if fit.node is None:
        return "none"
    if fit.node.pool and fit.node.admits is not None:
        kind = fit.node.labels.get("node.kubernetes.io/instance-type", "")
        return f"node pool {fit.node.pool} ({kind} nodes it may create from zero)"
    if fit.node.pool:
        return f"node pool {fit.node.pool} (may scale from zero)"
    return f"node {fit.node.name}"


def class_name(shape: Shape) -> str:
    """A node class as people know it: its product and an example node."""
    if shape.pool and shape.example.admits is not None:
        kind = shape.labels.get("node.kubernetes.io/instance-type", "")
        return f"node pool {shape.pool} ({kind} nodes)"
    if shape.pool:
        return f"node pool {shape.pool}"
    product = shape.gpu.product or shape.labels.get(PRODUCT_LABEL) or "unlabelled"
    more = f" and {shape.node_count - 1} more" if shape.node_count > 1 else ""
    return f"{product} nodes ({shape.example.name}{more})"


# Admits every node a pod could be allowed onto, cordoned ones too: a cordon passes
# (inventory.py, transient node states), as the capacity check judges it.
_ANYWHERE = Placement(
    node_selector={}, required_terms=None, tolerations=({"operator": "Exists"},), cordoned=True
)


def capacity_findings(scope: Scope, inventory: Inventory, settings: Settings) -> Iterator[Finding]:
    # ``effective``, not ``resources``: GPUs a DRA device class serves are judged as claims.
    unknown = [
        r
        for r, n in scope.pod.effective.items()
        if n > 0 and not offered(r, nodes=inventory, devices=scope.devices)
    ]
    found = [_unknown_resource(scope, resource, inventory, settings) for resource in unknown]
    answer = scope.fit
    # No GPU resource asked and no node to fall short (GPUs a DRA class serves): the claims'
    # check speaks.
    if (
        not unknown
        and answer is not None
        and not answer.fitting
        and (answer.demand.gpus or answer.missing)
    ):
        text, summary = _too_big(scope, inventory) or _no_node_has_it_all(
            answer, selected=selected_gpu_text(scope.placement)
        )
        action = action_of(settings.actions["capacity"])
        if not settings.min_values_policy and min_values_only(answer):
            # The controller's --min-values-policy is not in the API: Strict (its default)
            # launches none of these, BestEffort would. Not known: not denied.
            text += (
                " Karpenter launches such a node only under --min-values-policy BestEffort; "
                "its default, Strict, launches none: not denied, since the webhook cannot "
                "see the flag (declare GPUSettings.minValuesPolicy to have this judged)."
            )
            action = "warn" if action == "deny" else action
        found.append(Finding("builtin", "capacity", action, text, summary, scope.where))
    unknowable = inventory.unbounded_for(scope.placement) if found else ()
    for finding in found:
        yield _cannot_know(finding, unknowable) if unknowable else finding


def _cannot_know(finding: Finding, pools: Sequence[UnboundedPool]) -> Finding:
    """A capacity finding where a pool of unknown size may take the pod: the webhook cannot
    know it will not fit, so it warns and says what it could not see."""
    named = "; ".join(pool.describe() for pool in pools[:3])
    more = f" and {len(pools) - 3} more" if len(pools) > 3 else ""
    message = (
        f"{finding.message} But {named}{more} may create a node for this pod, and the "
        "webhook cannot size it: not denied. Describe the pool (an InstanceType or NodePool "
        "rule document) to have this checked."
    )
    summary = f"{finding.summary}; but pool {pools[0].name} (size unknown) may take it"
    action = "warn" if finding.action == "deny" else finding.action
    return Finding(finding.rule, finding.check, action, message, summary, finding.path)


def fit_warnings(scope: Scope, settings: Settings) -> Iterator[Finding]:
    """What an admitted pod may still meet: nodes it can land on whose device plugin fails
    it (when the affinity that keeps it off them could not be added, or is turned off), and
    a fit that only nodes in a transient state (cordoned, not ready) offer now."""
    answer = scope.fit
    if answer is None or not answer.fitting:
        return
    refused = refused_finding(answer, settings=settings, where=scope.where)
    if refused is not None:
        yield refused
    waiting = answer.waiting()
    if waiting:
        states = "; ".join(f"{class_name(shape)} are {state}" for shape, state in waiting[:3])
        message = (
            f"the pod fits only nodes that cannot take it right now: {states}. It stays "
            "Pending until one is ready and schedulable again (a cordon or a bad condition "
            "passes, so this is no reason to deny it)."
        )
        if all(shape.example.unavailable for shape, _ in waiting):
            # A pool's use of its limits (status.resources) passes too.
            message = (
                f"the pod fits only nodes that its pools cannot create right now: {states}. "
                "It stays Pending until enough of the pool's nodes are removed, or its limits "
                "are raised (use comes and goes, so this is no reason to deny it)."
            )
        yield Finding(
            "builtin",
            "capacity",
            "warn",
            message,
            f"fits only nodes that are unavailable now ({states})",
            scope.where,
        )


def refused_finding(answer: FitAnswer, *, settings: Settings, where: str) -> Finding | None:
    """``sharedGPURequest`` where the pod may land on nodes whose device plugin fails a
    container of it (``answer.refused``); None where it may not."""
    refused = answer.refused
    if not refused:
        return None
    names = "; ".join(class_name(shape) for shape in refused[:3])
    asked = ", ".join(f"{n} {r}" for r, n in answer.demand.per_container if n > 1)
    message = (
        f"a container asks for {asked}, and the pod can also land on {names}, whose NVIDIA "
        "device plugin fails a container asking for more than one shared slot (the pod "
        "is rejected there with UnexpectedAdmissionError and not retried). Keep it off "
        "those nodes with required node affinity on nvidia.com/gpu.sharing-strategy, or "
        "ask for 1 slot per container."
    )
    action = action_of(settings.actions.get("sharedGPURequest", "warn"))
    summary = f"may land on nodes that refuse {asked} per container"
    return Finding("builtin", "sharedGPURequest", action, message, summary, where)


def _too_big(scope: Scope, inventory: Inventory) -> tuple[str, str] | None:
    """One GPU resource alone is more than any usable node has: today's message."""
    placement = scope.placement.healed()  # as ``Inventory.fit`` judges it
    for resource, need in scope.pod.effective.items():
        fit = inventory.largest(resource, placement)
        if need <= fit.amount:
            continue
        best = inventory.largest(resource, _ANYWHERE)
        asked = f"{need} {resource}{selected_gpu_text(scope.placement)}"
        if fit.node is None:
            text = f"the pod requests {asked} but no node it can use offers any."
        else:
            text = (
                f"the pod requests {asked}, but the largest node it can use, "
                f"{_node_text(fit).removeprefix('node ')}, has {fit.amount} allocatable."
            )
        tainted = _tainted_fit(scope, inventory, resource, fit.amount)
        if tainted is not None:
            text += _taint_text(need, *tainted)
        elif best.amount == 0 and _pools_only(inventory, resource):
            # Nodes an autoscaler may create take only the pods their rules allow (GKE
            # node auto-provisioning: a pod that selects their accelerator), not any pod.
            text += (
                " Only node pools offer it, to pods whose node selection they allow: "
                "gpu-webhook explain lists each pool and what it takes."
            )
        else:
            text += _remedy(need, fit, best, scope.placement)
        return text, f"{need} {resource} requested, largest usable node has {fit.amount}"
    return None


def min_values_only(answer: FitAnswer) -> bool:
    """Whether some node class holds the pod and only a pool's minValues keeps it off."""
    return any(
        short and all(s.resource.startswith(MIN_VALUES) for s in short)
        for _, short in answer.missing
    )


def _pools_only(inventory: Inventory, resource: str) -> bool:
    offering = [s for s in inventory.shapes if s.allocatable.get(resource)]
    return bool(offering) and all(s.example.admits is not None for s in offering)


def _amount_text(resource: str, amount: int) -> str:
    return f"{quantity_text(resource, amount)} {resource}"


def _short_text(short: Shortfall) -> str:
    if short.resource.startswith(MIN_VALUES):
        key = short.resource.removeprefix(MIN_VALUES).strip()
        return (
            f"{short.have} distinct {key} among the instance types that hold the pod, and "
            f"the pool's minValues asks for {short.need}"
        )
    if short.refused:
        return (
            f"a device plugin that refuses a container more than 1 {short.resource} slot, "
            f"for a container asking {short.need}"
        )
    have, need = (
        quantity_text(short.resource, short.have),
        quantity_text(short.resource, short.need),
    )
    return f"{have} of {need} {short.resource}"


def _no_node_has_it_all(answer: FitAnswer, *, selected: str = "") -> tuple[str, str]:
    """Every GPU resource fits somewhere, but no single usable node takes the whole pod."""
    demand = answer.demand
    asked = [_amount_text(n, c) + selected for n, c in demand.gpus]
    asked += [_amount_text(n, demand.amount(n)) for n in ("cpu", "memory") if demand.amount(n)]
    gpu_names = {n for n, _ in demand.gpus}
    # Classes with none of the pod's GPU resources say nothing worth reading.
    relevant = [m for m in answer.missing if gpu_names & set(m[0].allocatable)]
    ranked = sorted(relevant or answer.missing, key=lambda m: len(m[1]))
    lacks = [
        f"{class_name(shape)} have {', '.join(map(_short_text, short))}"
        for shape, short in ranked[:3]
    ]
    kinds = {s.resource for _, short in relevant for s in short}
    fixes = []
    if any(s.refused for _, short in relevant for s in short):
        # NVIDIA/k8s-device-plugin internal/rm/rm.go, ValidateRequest: the kubelet fails
        # the pod with UnexpectedAdmissionError (gpufacts.SlotRefusal).
        fixes.append(
            "the NVIDIA device plugin fails a container asking for more than one shared slot "
            'there ("maximum request size for shared resources is 1"): ask for 1 slot per '
            "container, or for whole GPUs on nodes that do not share them "
            "(nvidia.com/gpu.sharing-strategy: none)"
        )
    if len(demand.gpus) > 1 and kinds & gpu_names:
        fixes.append(
            "no node offers these GPU resources together: ask for one kind of GPU resource, "
            "or put the containers in separate pods"
        )
    if any(k.startswith(MIN_VALUES) for k in kinds):
        # kubernetes-sigs/karpenter pkg/cloudprovider/types.go SatisfiesMinValues: with
        # --min-values-policy Strict (the default) Karpenter launches none of them.
        fixes.append(
            "Karpenter launches no node when fewer instance types than the pool's minValues "
            "hold the pod: lower minValues, let the pool allow more such instance types, or "
            "ask for less"
        )
    if kinds & {"cpu", "memory"}:
        fixes.append(
            "lower the pod's cpu or memory requests (memory limits count where no request is "
            "set, including limits a rule sets) or let the pod use larger nodes"
        )
    text = (
        f"the pod requests {', '.join(asked)}, and no node it can use has all of it at once: "
        f"{'; '.join(lacks)}. To fix: {'; '.join(fixes) or 'let the pod use larger nodes'}."
    )
    return text, f"no usable node fits the whole pod ({', '.join(asked)})"


# Node labels that say which GPU a node has (model, memory, count, MIG, CUDA): GPU feature
# discovery's and the clouds' (GKE's accelerator, Karpenter's instance-gpu-*, AKS's SKU).
_GPU_LABEL_PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/mig",
    "nvidia.com/cuda.",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu",
    "karpenter.azure.com/sku-gpu",
    "node.kubernetes.io/instance-type",
)


def _selected_gpu_terms(placement: Placement) -> list[tuple[str, str]]:
    """The pod's node selection on GPU labels, as (label, how it is selected)."""
    asked = [
        (key, f"{key}={value}")
        for key, value in placement.node_selector.items()
        if key.startswith(_GPU_LABEL_PREFIXES)
    ]
    for term in placement.required_terms or ():
        for expression in term.get("matchExpressions") or ():
            if not isinstance(expression, Mapping):
                continue
            key = str(expression.get("key", ""))
            if not key.startswith(_GPU_LABEL_PREFIXES):
                continue
            values = ", ".join(str(v) for v in expression.get("values") or ())
            operator = str(expression.get("operator", ""))
            asked.append((key, f"{key} {operator} ({values})" if values else f"{key} {operator}"))
    return list(dict.fromkeys(asked))


def selected_gpu_text(placement: Placement) -> str:
    """What the pod asks of the GPU itself through its node selection, for a denial that
    names what was asked beside what is missing: `` (selecting nvidia.com/gpu.product=
    NVIDIA-A100-SXM4-80GB)``, or nothing when it selects no GPU label."""
    asked = [text for _, text in _selected_gpu_terms(placement)]
    return f" (selecting {'; '.join(asked[:4])})" if asked else ""


def _offers_text(node: Node | None, placement: Placement) -> str:
    """What the excluded node has under the labels the pod selects (else its product)."""
    if node is None:
        return ""
    keys = [key for key, _ in _selected_gpu_terms(placement)] or [PRODUCT_LABEL]
    shown = [
        f"{k}={node.labels[k]}" if k != PRODUCT_LABEL or len(keys) > 1 else node.labels[k]
        for k in dict.fromkeys(keys)
        if k in node.labels
    ]
    return f" ({', '.join(shown[:4])})" if shown else ""


def _remedy(need: int, fit: Fit, best: Fit, placement: Placement) -> str:
    if best.amount == 0:
        return " Every node that offers it is cordoned: wait for one to be uncordoned or added."
    text = ""
    if best.amount > fit.amount:
        offers = _offers_text(best.node, placement)
        text += (
            f" {_node_text(best).capitalize()}{offers} has {best.amount}, but the pod's "
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
        cordoned=True,  # a cordon passes: as ``Inventory.fit`` judges it
    )
    fit = inventory.largest(resource, selected)
    if fit.node is None or fit.amount <= usable:
        return None
    tolerations = Placement(
        node_selector={},
        required_terms=None,
        tolerations=scope.placement.tolerations,
        cordoned=True,  # a cordon is no taint to tolerate: it passes
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
    offered = ", ".join(alike) if alike else "no GPU resource on any node"
    # Not "the cluster offers none": a pool may still bring GPU nodes (its sentence follows).
    here = f"this cluster's nodes offer {offered}" if alike else "no node offers a GPU resource yet"
    profile = resource.removeprefix(MIG_PREFIX).removesuffix(".shared")
    gpus = mig_profile_gpus(profile) if resource.startswith(MIG_PREFIX) else []
    if gpus:
        # A real profile this cluster lacks: another profile is no typo fix.
        message = (
            f"the pod requests {resource}, a MIG profile of {' and '.join(gpus)} GPUs, but no "
            f"node in this cluster offers it; {here}. Ask for one of "
            "those, or ask an admin to partition GPUs with this profile."
        )
    else:
        close = lookalike(resource, alike)
        hint = f" Did you mean {close}?" if close else " Check the resource name."
        message = f"the pod requests {resource}, which no node advertises; {here}.{hint}"
    summary = f"{resource} is offered by no node (offered: {offered})"
    return Finding(
        "builtin",
        "unknownResource",
        action_of(settings.actions["unknownResource"]),
        message,
        summary,
        scope.where,
    )


def extended_names(scope: Scope) -> dict[str, str]:
    """Every extended resource a container of the pod asks for that is no GPU to the
    policy, with the first container asking: the scheduler compares each with the node
    (``fitsRequest``)."""
    names: dict[str, str] = {}
    for c in scope.pod.containers:
        for name in c.others or ():
            names.setdefault(name, c.name)
    return names


def _gpu_names(inventory: Inventory | None, scope: Scope, settings: Settings) -> list[str]:
    """GPU resource names a misspelling is compared with: the known vendors', those the
    policy names, and the GPU resources the cluster offers (nodes, pools, DRA classes)."""
    exact = [
        name for name, _ in settings.gpu_resources.entries if not any(c in name for c in "*?[")
    ]
    offered_here = offered_names(nodes=inventory, devices=scope.devices)
    # With the names GPU device classes serve (``deviceclass.resource.kubernetes.io/<class>``).
    gpus = served_gpu_resources(
        settings.gpu_resources, devices=scope.devices, is_gpu_class=settings.gpu_device_classes
    )
    return [*VENDOR_GPU_RESOURCES, *exact, *(n for n in offered_here if gpus.is_gpu(n))]


def misspelled_findings(
    scope: Scope, inventory: Inventory | None, settings: Settings
) -> Iterator[Finding]:
    """A resource that is no GPU to the policy, that nothing offers, and that is a
    misspelling of a GPU resource (``offers.lookalike``): the pod would stay Pending for
    ever. Denied as ``unknownResource`` with an inventory; without one, nothing says the
    name is offered nowhere, so a warning."""
    for name, container in extended_names(scope).items():
        if settings.gpu_resources.is_gpu(name) or settings.ignored_resources(name):
            continue
        if offered(name, nodes=inventory, devices=scope.devices):
            continue
        meant = lookalike(name, _gpu_names(inventory, scope, settings))
        if meant is None:
            continue
        who = f'container "{container}"'
        if inventory is None:
            message = (
                f"{who} asks for {name}, which looks like a misspelling of {meant} (resource "
                "names are case-sensitive); if no node offers it, the pod stays Pending. "
                f"Did you mean {meant}?"
            )
            action: Action = "warn"
            summary = f"{name} looks like a misspelling of {meant}"
        else:
            message = (
                f"{who} asks for {name}, which no node, node pool or DRA device class offers; "
                f"the pod would stay Pending. Did you mean {meant}? (Resource names are "
                "case-sensitive; list a resource the scheduler ignores in GPUSettings "
                "ignoredResources.)"
            )
            action = action_of(settings.actions["unknownResource"])
            summary = f"{name} is offered by nothing; did you mean {meant}?"
        finding = Finding("builtin", "unknownResource", action, message, summary, scope.where)
        # A pool of unknown size may bring a node that offers even this name.
        unknowable = inventory.unbounded_for(scope.placement) if inventory is not None else ()
        yield _cannot_know(finding, unknowable) if unknowable else finding


def mig_profile_findings(scope: Scope, settings: Settings) -> Iterator[Finding]:
    """Without an inventory, a MIG resource whose profile no NVIDIA GPU has
    (``gpufacts.MIG_PROFILES``, NVIDIA's MIG user guide): a typo such as
    ``nvidia.com/mig-1g.10gbb`` that no node can offer, named with the profile it is
    closest to. A warning: with no nodes to look at, the webhook cannot say that no node
    advertises the name (with an inventory, ``unknownResource`` judges it)."""
    profiles = sorted({f"{MIG_PREFIX}{p}" for known in MIG_PROFILES.values() for p in known})
    action = action_of(settings.actions["unknownResource"])
    for resource, need in scope.pod.effective.items():
        if need <= 0 or not resource.startswith(MIG_PREFIX):
            continue
        profile = resource.removeprefix(MIG_PREFIX).removesuffix(".shared")
        if mig_profile_gpus(profile):
            continue
        meant = lookalike(resource.removesuffix(".shared"), profiles)
        hint = f" Did you mean {meant}?" if meant else " Check the profile name."
        message = (
            f"the pod requests {resource}, but {profile} is no MIG profile of any NVIDIA GPU, "
            f"so no device plugin advertises it and the pod would stay Pending.{hint}"
        )
        summary = f"{resource} is no known MIG profile" + (
            f" (did you mean {meant}?)" if meant else ""
        )
        yield Finding(
            "builtin",
            "unknownResource",
            "warn" if action == "deny" else action,
            message,
            summary,
            scope.where,
        )


def _units(scope: Scope, inventory: Inventory | None, resource: str) -> Units:
    """``resource`` on the node classes this pod can land on: those that take its whole
    request, or, when none does (a capacity finding says so), every usable one."""
    if inventory is None:
        return _NO_UNITS
    if scope.fit is not None:
        units = scope.fit.units(resource)
        if units.offering:
            return units
    return Units.of(
        (shape, shape.gpu.device(resource, shape.allocatable[resource]))
        for shape in inventory.admitted(resource, scope.placement)
    )


_NO_UNITS = Units((), mig=False, shared=None)


def _devices(
    scope: Scope, inventory: Inventory | None, resource: str
) -> Sequence[tuple[Shape, DeviceFacts]]:
    return _units(scope, inventory, resource).offering


def whole_gpus(scope: Scope) -> bool:
    """The pod gets whole GPUs wherever it fits (or, without an inventory, asks for no MIG
    or shared resource by name): ``device_findings`` would find nothing."""
    if scope.pod.partial:
        return False
    return scope.fit is None or scope.fit.whole(scope.pod.vector)


def device_findings(
    scope: Scope, inventory: Inventory | None, settings: Settings
) -> Iterator[Finding]:
    """What one unit of a GPU resource is on the nodes the pod can use: a shared slot asked
    for more than once (``sharedGPURequest``), several MIG devices in one container
    (``multipleMIGDevices``)."""
    for c in scope.pod.containers:
        if c.gpu_count <= 1:
            continue  # neither several slots nor several MIG devices
        migs: dict[str, int] = {}
        where = ""
        for resource, count in c.gpus.items():
            units = _units(scope, inventory, resource)
            if units.mig or resource.startswith(MIG_PREFIX):
                migs[resource] = count
            if units.mig and not resource.startswith(MIG_PREFIX):
                shape = next(s for s, d in units.offering if d.kind == "mig")
                where = f" on {class_name(shape)}, where {resource} is a MIG slice"
            if (
                count > 1
                and (units.shared is not None or settings.gpu_resources.is_shared(resource))
                and (scope.fit is None or scope.fit.fitting)  # else capacity says why
            ):
                yield _shared_request(
                    scope, c, resource, count, shared=units.shared, settings=settings
                )
        if sum(migs.values()) > 1:
            yield _multiple_migs(scope, c, migs, settings, where=where)


def _shared_request(
    scope: Scope,
    c: Container,
    resource: str,
    count: int,
    *,
    shared: tuple[Shape, DeviceFacts] | None,
    settings: Settings,
) -> Finding:
    who = f'container "{c.name}"'
    if shared is None:
        where = f"{resource} is a shared GPU resource: its slots"
    else:
        shape, device = shared
        behind = f" over {device.physical} GPUs" if device.physical is not None else ""
        where = (
            f"on {class_name(shape)} one {resource} is a {device.sharing} slot "
            f"({device.replicas} per GPU{behind}): {count} slots"
        )
    base = resource.removesuffix(".shared")
    message = (
        f"{who} asks for {count} {resource}, but {where} may all share one GPU and add no "
        "compute or memory (the device plugin fails such pods where failRequestsGreaterThanOne "
        f"is set). Ask for 1 {resource}, or for whole GPUs on nodes that do not share them "
        f"({base}.sharing-strategy: none)."
    )
    summary = f"{who}: {count} {resource}, shared slots add no compute; ask for 1"
    action = action_of(settings.actions.get("sharedGPURequest", "warn"))
    return Finding("builtin", "sharedGPURequest", action, message, summary, scope.at(c))


def _multiple_migs(
    scope: Scope, c: Container, migs: Mapping[str, int], settings: Settings, *, where: str = ""
) -> Finding:
    who = f'container "{c.name}"'
    total = sum(migs.values())
    listed = ", ".join(f"{r}: {n}" for r, n in sorted(migs.items()))
    message = (
        f"{who} asks for {total} MIG devices ({listed}){where}; a CUDA process sees only one MIG "
        "device, so the others stay idle unless the container runs one process per device. "
        "Ask for one MIG device of a larger profile (e.g. 3g.40gb instead of 3 x 1g.10gb), or "
        "split the work over several containers or pods."
    )
    summary = f"{who}: {total} MIG devices, a CUDA process uses one"
    action = action_of(settings.actions.get("multipleMIGDevices", "warn"))
    return Finding("builtin", "multipleMIGDevices", action, message, summary, scope.at(c))


def _held(c: Container, u: ClaimUnits, counts: Sequence[tuple[str, int]]) -> int:
    """How many of ``counts`` (per request of the claim) container ``c`` holds: the
    requests its ``resources.claims`` names, or, for a claim the scheduler makes for a
    resource a class serves, the request made for it (``container-<index>-...``)."""
    if not u.claim.counted:
        return sum(n for r, n in counts if c.section == "containers" and served_index(r) == c.index)
    total = 0
    for request in claim_entries(c.body, u.claim.name):
        total += sum(n for r, n in counts if not request or r == request)
    return total


def _unknown_note(unknown: bool) -> str:
    return (
        " (a device selector could not be evaluated or a node pool's devices are unknown, "
        "so this is a warning)"
        if unknown
        else ""
    )


def _seen(action: Action, unknown: bool) -> Action:
    """What the allocator picks is not known in full: a warning, never a denial."""
    return "warn" if unknown and action == "deny" else action


def claim_unit_findings(
    scope: Scope, units: Sequence[ClaimUnits], rules: Sequence[Rule]
) -> Iterator[Finding]:
    """``multipleMIGDevices`` and ``maxSharedGPUs`` where GPUs come from DRA claims, per
    container as the device plugin's resources are judged: a request that may get devices
    with ``allowMultipleAllocations`` asks for shares of GPUs, as time-sliced replicas are;
    the requests a container holds that may get MIG devices count as its MIG devices
    (``scheduling.devicepolicy.claim_units``)."""
    limits = [
        (rule, check) for rule in rules for check in rule.checks if check.kind == "maxSharedGPUs"
    ]
    for c in scope.pod.containers:
        held = [(u, _held(c, u, u.shared), _held(c, u, u.mig)) for u in units]
        held = [(u, shared, mig) for u, shared, mig in held if shared or mig]
        if not held:
            continue
        unknown = any(u.unknown for u, _, _ in held)
        who = f'container "{c.name}"'
        through = ", ".join(
            f'claim "{u.claim.name}" ({u.claim.source})' if u.claim.counted else u.claim.source
            for u, _, _ in held
        )
        migs = sum(mig for _, _, mig in held)
        if migs > 1:
            message = (
                f"{who} may be given {migs} MIG devices through {through}"
                f"{_unknown_note(unknown)}; a CUDA process sees only one MIG device, so the "
                "others stay idle unless the container runs one process per device. Ask for "
                "one MIG device of a larger profile (a selector on "
                "device.attributes['gpu.nvidia.com'].profile), or split the work over several "
                "containers or pods."
            )
            summary = f"{who}: {migs} MIG devices, a CUDA process uses one"
            action = action_of(scope.settings.actions.get("multipleMIGDevices", "warn"))
            yield Finding(
                "builtin",
                "multipleMIGDevices",
                _seen(action, unknown),
                message,
                summary,
                scope.at(c),
            )
        shares = sum(shared for _, shared, _ in held)
        for rule, check in limits:
            if shares <= check.value:
                continue
            message = (
                f"{who} may be given {shares} devices that allow multiple allocations through "
                f"{through}{_unknown_note(unknown)}: shares of GPUs that other claims use too "
                "add no compute or memory, and may be parts of one physical GPU. Request at "
                f"most {check.value}, or select devices that are not shared."
            )
            if check.message:
                message = f"{message} {check.message}"
            summary = f"{who}: {shares} shared GPUs, at most {check.value}"
            yield Finding(
                rule.name, check.kind, _seen(check.action, unknown), message, summary, scope.where
            )


# --- rule-driven checks -------------------------------------------------------------------


def rule_findings(scope: Scope, rule: Rule, *, inventory: Inventory | None) -> Iterator[Finding]:
    for check in rule.checks:
        action = check.action
        if check.kind in _COUNT_CHECKS:
            judged = _COUNT_CHECKS[check.kind](scope, check, inventory)
            if judged is None:
                continue
            message, summary, unsure = judged
            action = _seen(action, unsure)
        else:
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
        yield Finding(rule.name, check.kind, action, message, summary, scope.where)


Result = tuple[str, str] | None
# A result whose third part says the count behind it is not known before allocation (GPUs
# through claims): then a denial becomes a warning (``_seen``).
Judged = tuple[str, str, bool] | None


def _max_per_pod(scope: Scope, check: RuleCheck, _: Inventory | None) -> Result:
    if scope.pod.total <= check.value:
        return None
    return (
        f"the pod requests {scope.pod.total} GPUs; at most {check.value} per pod are allowed "
        f"here. Request {check.value} or fewer, or split the work over more pods.",
        f"{scope.pod.total} GPUs per pod, at most {check.value} allowed",
    )


def _through(scope: Scope, c: Container) -> str:
    """The GPU claims (or claims not read) a container names, for messages."""
    named = [
        f'claim "{p.name}" ({p.source})'
        for p in (scope.claims.claims if scope.claims else ())
        if p.counted and (p.gpu_count or p.claim is None) and claim_entries(c.body, p.name)
    ]
    return ", ".join(named)


def _count_text(counts: Sequence[int], unbounded: bool) -> str:
    if unbounded:
        return f"{min(counts)} or more"
    return " or ".join(map(str, sorted(counts)))


def _max_per_container(scope: Scope, check: RuleCheck, _: Inventory | None) -> Judged:
    """Resources and claims together; where claims give a count not known before
    allocation, only a count above the limit in every allocation is denied."""
    limit = int(check.value)
    warned: Judged = None
    for c in scope.pod.containers:
        held = scope.claim_gpus(c)
        if held is None or not held.gpu:
            if c.gpu_count > limit:
                return (
                    f'container "{c.name}" requests {c.gpu_count} GPUs; at most {limit} per '
                    "container are allowed here.",
                    f'container "{c.name}": {c.gpu_count} GPUs, at most {limit}',
                    False,
                )
            continue
        counts = sorted({c.gpu_count + n for n in held.counts})
        through = _through(scope, c)
        if counts[0] > limit:
            asked = _count_text(counts, held.unbounded)
            return (
                f'container "{c.name}" is given {asked} GPUs (through {through}); at most '
                f"{limit} per container are allowed here. Ask for {limit} or fewer.",
                f'container "{c.name}": {asked} GPUs through claims, at most {limit}',
                False,
            )
        if warned is None and (held.unbounded or counts[-1] > limit):
            asked = _count_text(counts, held.unbounded)
            warned = (
                f'container "{c.name}" may be given {asked} GPUs (through {through}), and at '
                f"most {limit} per container are allowed here; not denied, since the count "
                f"is not known before allocation: {held.unknown_text()}. Ask for at most "
                f"{limit} in every alternative (exactly, with allocationMode ExactCount).",
                f'container "{c.name}": may get {asked} GPUs through claims, at most {limit}',
                True,
            )
    return warned


def _allowed_counts(scope: Scope, check: RuleCheck, _: Inventory | None) -> Judged:
    """Per resource; the GPUs a container's claims give count as one more."""
    allowed = sorted(check.value)
    listed = ", ".join(map(str, allowed))
    warned: Judged = None
    for c in scope.pod.containers:
        for resource, count in c.gpus.items():
            if count not in allowed:
                nearest = min((a for a in allowed if a >= count), default=allowed[-1])
                return (
                    f'container "{c.name}" requests {count} {resource}; allowed counts are '
                    f"{listed} (whole nodes or halves pack without stranding GPUs). "
                    f"Use {nearest}.",
                    f'container "{c.name}": {count} GPUs, allowed {listed}',
                    False,
                )
        held = scope.claim_gpus(c)
        if held is None or not held.gpu:
            continue
        bad = sorted(n for n in held.counts if n and n not in allowed)
        if not bad and not held.unbounded:
            continue
        through = _through(scope, c)
        asked = _count_text(sorted(held.counts), held.unbounded)
        if held.exact is not None or (
            not held.unbounded and 0 not in held.counts and len(bad) == len(held.counts)
        ):
            return (
                f'container "{c.name}" is given {asked} GPUs (through {through}); allowed '
                f"counts are {listed} (whole nodes or halves pack without stranding GPUs). "
                "Ask for an allowed count.",
                f'container "{c.name}": {asked} GPUs through claims, allowed {listed}',
                False,
            )
        if warned is None:
            warned = (
                f'container "{c.name}" may be given {asked} GPUs (through {through}); allowed '
                f"counts are {listed}. Not denied, since the count is not known before "
                f"allocation: {held.unknown_text()}. Ask for an allowed count in every "
                "alternative (exactly, with allocationMode ExactCount).",
                f'container "{c.name}": may get {asked} GPUs through claims, allowed {listed}',
                True,
            )
    return warned


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


def _product(shape: Shape, device: DeviceFacts) -> str:
    return device.product or shape.labels.get(PRODUCT_LABEL) or UNLABELLED


def _allowed_products(scope: Scope, check: RuleCheck, inventory: Inventory | None) -> Result:
    allowed = glob_matcher(check.value)
    listed = ", ".join(check.value)
    if inventory is not None:
        # The product a pod really gets: "-MIG-1g.10gb" under MIG, "-SHARED" on shared GPUs.
        reachable = {
            _product(shape, device)
            for name in scope.pod.resources
            for shape, device in _devices(scope, inventory, name)
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


def _whole_gpus_only(scope: Scope, check: RuleCheck, inventory: Inventory | None) -> Result:
    if not check.value:
        return None
    parts: dict[str, str] = {}
    for name in scope.pod.resources:
        if name.startswith(MIG_PREFIX):
            parts[name] = "a MIG slice"
        elif scope.settings.gpu_resources.is_shared(name):
            parts[name] = "a shared slot"
        for shape, device in _devices(scope, inventory, name):
            if device.kind != "whole":
                parts.setdefault(name, f"a {device.describe} on {class_name(shape)}")
    if not parts:
        return None
    got = "; ".join(f"{name} is {what}" for name, what in parts.items())
    return (
        f"only whole GPUs are allowed here, but the pod can get part of one: {got}. Ask for "
        "nvidia.com/gpu on nodes with whole GPUs: select them with nvidia.com/gpu.product "
        "(products without -MIG- or -SHARED) or nvidia.com/gpu.sharing-strategy: none in the "
        "pod's nodeSelector or required node affinity.",
        f"not whole GPUs: {', '.join(parts)}",
    )


MIB = 2**20


def _selected_memory(scope: Scope) -> int | None:
    """The least GPU memory (MiB) the pod's own constraints guarantee, or ``None``."""
    selected = scope.placement.node_selector.get(MEMORY_LABEL)
    if selected is not None:
        return int(selected) if str(selected).isdigit() else None
    terms = scope.placement.required_terms or []
    least: int | None = None
    for term in terms:
        floors = []
        for e in term.get("matchExpressions") or []:
            values = [str(v) for v in e.get("values") or []]
            if e.get("key") != MEMORY_LABEL or not values or not all(v.isdigit() for v in values):
                continue
            if e.get("operator") == "Gt" and len(values) == 1:
                floors.append(int(values[0]) + 1)
            elif e.get("operator") == "In":
                floors.append(min(map(int, values)))
        if not floors:
            return None  # this term allows any GPU memory
        floor = max(floors)
        least = floor if least is None else min(least, floor)
    return least


def _min_gpu_memory(scope: Scope, check: RuleCheck, inventory: Inventory | None) -> Result:
    need = -(-int(check.value) // MIB)
    text = format_bytes(int(check.value))
    fix = (
        f"Select nodes with more GPU memory: required node affinity {MEMORY_LABEL} Gt "
        f"{need - 1} (MiB), or a GPU resource with more memory."
    )
    if inventory is None:
        least = _selected_memory(scope)
        if least is not None and least >= need:
            return None
        return (
            f"the pod needs GPUs with at least {text} of memory here, but does not select "
            f"them. {fix}",
            f"pod does not select GPUs with {text} memory",
        )
    seen: dict[str, int | None] = {}
    for name in scope.pod.resources:
        for shape, device in _devices(scope, inventory, name):
            seen[_product(shape, device)] = device.memory_mib
            if device.memory_mib is not None and device.memory_mib >= need:
                return None
    if scope.dra_gpus:
        return None  # DRA devices may have it: devicepolicy judges them
    found = ", ".join(
        f"{product} ({format_bytes(mib * MIB) if mib is not None else 'memory not labelled'})"
        for product, mib in sorted(seen.items())
    )
    return (
        f"the pod needs GPUs with at least {text} of memory here, but the GPUs of the nodes it "
        f"can use have less: {found or 'none'}. {fix}",
        f"no usable GPU has {text} memory",
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
    holders = scope.claims.holders if scope.claims else frozenset()
    for c in scope.pod.containers:
        if not (c.gpu_count or c.path in holders) or (
            c.section == "initContainers" and not c.sidecar
        ):
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
    "allowedProducts": _allowed_products,
    "maxSharedGPUs": _max_shared,
    "requiredLabels": _required_labels,
    "forbiddenResources": _forbidden,
    "wholeGPUsOnly": _whole_gpus_only,
    "minGPUMemory": _min_gpu_memory,
    "requireProbes": _require_probes,
    "allowedPriorityClasses": _allowed_priority_classes,
}
# Checks of a count that claims may leave unknown until allocation.
_COUNT_CHECKS = {
    "maxGPUsPerContainer": _max_per_container,
    "allowedGPUCounts": _allowed_counts,
}
