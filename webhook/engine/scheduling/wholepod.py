"""One node for the whole pod: its extended resources, its DRA claims and its cpu and memory.

kube-scheduler runs its filters per node, and a node passes only when every filter passes:
NodeResourcesFit for the request vector, DynamicResources for the pod's claims and for the
claim it makes itself for extended resources that a device class serves (KEP-5004,
``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``,
``filterExtendedResources``). For each extended resource that a class maps, per node:

- the node's allocatable has the resource (non-zero): the device plugin serves it there, and
  NodeResourcesFit counts it like any other resource;
- the node has none of it: the class's devices on that node serve it, one device per unit
  (``createRequestsAndMappings``: an ``ExactCount`` request of the class, its selectors
  only, no tolerations), allocated together with the pod's own claims
  (``Allocator.Allocate`` over all the pod's claims on the node).

So a pod fits when one node the pod can land on passes both; judging capacity and claims
each over the whole cluster admits pods no node can hold (the plain GPUs on one node, the
claim's devices on another). Node classes group nodes with equal allocatable, labels and
taints; within a class, nodes are grouped by their DRA devices (``Profile``), so the cost
follows the number of distinct nodes, memoised per snapshot.

The same per-node rule, summed over the cluster, is what a workload's pods together can get
of such a resource (``served_total``, for ``clusterCapacity``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.kube.selectors import terms_match
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.resources.cel.celbudget import review_spent
from webhook.engine.resources.devices import (
    ALLOCATION_RESULTS_MAX_SIZE,
    ClaimSpec,
    Device,
    DeviceInventory,
    DeviceRequest,
    Profile,
    SubRequest,
)
from webhook.engine.resources.fit import Demand, Shortfall, shortfalls
from webhook.engine.resources.gpufacts import DEVICE_PLUGIN_DEFAULTS, SlotRefusal
from webhook.engine.resources.inventory import FitAnswer as NodeFit
from webhook.engine.resources.inventory import Inventory, Placement, Shape
from webhook.engine.scheduling.dra import (
    EVERYWHERE,
    Candidates,
    FitAnswer,
    PodClaim,
    PodClaims,
    _eligible,
    _finding,
    _Matcher,
    candidates,
    device_counts,
    fit,
    fits_somewhere,
    shortfall,
    unevaluated_selector,
)

_MEMO_SIZE = 4096


def needs_whole_pod(claims: PodClaims, demand: Demand | None) -> bool:
    """Whether the pod's devices and its request vector must be judged on one node: it has
    an extended resource that a class serves, or GPU claims beside any request (GPU
    resources, or only CPU and memory: the scheduler's NodeResourcesFit and
    DynamicResources filters both run on the one node it picks)."""
    if claims.served:
        return True
    return bool(demand is not None and claims.gpu_count)


@dataclass(frozen=True, slots=True)
class WholeAnswer:
    fits: bool | None
    reason: str = ""


def _vector(
    demand: Demand, extra: Sequence[tuple[str, int]], per_container: Mapping[str, int]
) -> Demand:
    """The pod's vector with the served resources a node's device plugin serves."""
    if not extra:
        return demand
    gpus = tuple(sorted({**dict(demand.gpus), **dict(extra)}.items()))
    most = {
        **dict(demand.per_container),
        **{r: per_container[r] for r, _ in extra if r in per_container},
    }
    return demand._replace(gpus=gpus, per_container=tuple(sorted(most.items())))


def _served_amounts(claims: PodClaims) -> tuple[tuple[str, int], ...]:
    """The extended resources a device class serves, with the pod's effective request of
    each (taken out of its request vector, ``dra.extended_resource_claims``)."""
    return tuple((c.name, c.gpu_count) for c in claims.claims if not c.counted)


def plugin_fit(
    claims: PodClaims,
    *,
    demand: Demand,
    placement: Placement,
    nodes: Inventory,
    refusal: SlotRefusal,
) -> NodeFit:
    """The pod's fit node class by node class, with the resources a device class serves
    put back in its vector where the class's allocatable has them: a device plugin serves
    them there and NodeResourcesFit counts them (``filterExtendedResources``); elsewhere
    the class's devices serve them (``whole_pod_fit`` judges those). Its ``refused`` are the
    classes that would hold the pod but whose device plugin fails a container of it (more
    than one MPS slot; time-slicing with ``failRequestsGreaterThanOne``), and its demand
    holds the served amounts (what a container asks, for the warning). As
    ``Inventory.fit``, on the nodes as they are once healed."""
    extra = _served_amounts(claims)
    most = dict(claims.served_per_container)
    fitting: list[Shape] = []
    missing: list[tuple[Shape, tuple[Shortfall, ...]]] = []
    for shape in nodes.placeable(placement.healed()):
        plugin = [(r, n) for r, n in extra if shape.allocatable.get(r, 0) > 0]
        vector = _vector(demand, plugin, most) if plugin else demand
        short = shortfalls(shape.allocatable, shape.gpu, vector, refusal)
        if short:
            missing.append((shape, short))
        else:
            fitting.append(shape)
    full = _vector(demand, extra, most)
    return NodeFit(placement, full, tuple(fitting), tuple(missing), refusal)


def whole_pod_fit(
    *,
    pending: tuple[ClaimSpec, ...],
    served: Sequence[PodClaim],
    demand: Demand,
    placement: Placement,
    nodes: Inventory,
    devices: DeviceInventory,
    allowed: Sequence[tuple[Mapping[str, Any], ...] | None] = (),
    per_container: Mapping[str, int] | None = None,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
) -> WholeAnswer:
    """Whether one node the pod can land on takes its request vector and all its claims;
    a node whose device plugin would fail a container of it (``refusal``) takes nothing."""
    names = tuple(c.name for c in served)
    most = tuple(sorted((per_container or {}).items()))
    key = (
        "whole",
        id(nodes),
        placement.key(),
        demand,
        pending,
        names,
        most,
        repr(allowed),
        refusal,
    )
    memo = devices._memo
    known = memo.get(key)
    if known is not None and known[0] is nodes:
        return known[1]  # type: ignore[no-any-return]
    answer = _whole_pod_fit(
        pending=pending,
        served=served,
        demand=demand,
        placement=placement,
        nodes=nodes,
        devices=devices,
        allowed=allowed,
        per_container=per_container or {},
        refusal=refusal,
    )
    if review_spent():
        return answer  # found with selectors left unevaluated: this review's answer only
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[key] = (nodes, answer)
    return answer


def _whole_pod_fit(
    *,
    pending: tuple[ClaimSpec, ...],
    served: Sequence[PodClaim],
    demand: Demand,
    placement: Placement,
    nodes: Inventory,
    devices: DeviceInventory,
    allowed: Sequence[tuple[Mapping[str, Any], ...] | None],
    per_container: Mapping[str, int],
    refusal: SlotRefusal,
) -> WholeAnswer:
    unknown: WholeAnswer | None = None
    names_nodes = placement.names_nodes(nodes.identity_labels)
    for shape in nodes.placeable(placement):
        # Per node: the device plugin where allocatable has the resource, else the class.
        plugin = [c for c in served if shape.allocatable.get(c.name, 0) > 0]
        by_class = [c for c in served if shape.allocatable.get(c.name, 0) == 0]
        vector = _vector(demand, [(c.name, c.gpu_count) for c in plugin], per_container)
        if shortfalls(shape.allocatable, shape.gpu, vector, refusal):
            continue
        specs = (*pending, *(c.claim.spec for c in by_class if c.claim is not None))
        if not specs:
            return WholeAnswer(True)
        if shape.pool:
            unknown = WholeAnswer(None, "a node pool may add nodes whose devices are not known yet")
            continue
        found = _profiles(shape, placement, devices, allowed, names_nodes=names_nodes)
        answer = fits_somewhere(specs, found, devices)
        if answer.fits:
            return WholeAnswer(True)
        if answer.fits is None:
            unknown = WholeAnswer(None, answer.reason)
    return unknown or WholeAnswer(False)


def _profiles(
    shape: Shape,
    placement: Placement,
    devices: DeviceInventory,
    allowed: Sequence[tuple[Mapping[str, Any], ...] | None],
    *,
    names_nodes: bool,
) -> Candidates:
    profiles: dict[Any, Profile] = {}
    for node in shape.members:
        if names_nodes and not placement.admits(node.labels, node.name, shape.taints):
            continue
        if any(t is not None and not terms_match(t, node.labels, node.name) for t in allowed):
            continue
        profile = devices.profile(node)
        if profile.devices:
            profiles.setdefault(profile.key, profile)
    return Candidates(tuple(profiles.values()))


def _node_candidates(
    devices: DeviceInventory, nodes: Inventory, placement: Placement, resource: str
) -> Candidates:
    """Device profiles of usable nodes whose allocatable lacks ``resource`` (the class's)."""
    profiles: dict[Any, Profile] = {}
    names_nodes = placement.names_nodes(nodes.identity_labels)
    for shape in nodes.placeable(placement):
        if shape.allocatable.get(resource, 0) > 0 or shape.pool:
            continue
        for profile in _profiles(shape, placement, devices, (), names_nodes=names_nodes).profiles:
            profiles.setdefault(profile.key, profile)
    return Candidates(tuple(profiles.values()))


def _plugin_text(
    resource: str, nodes: Inventory, placement: Placement, *, refusing: Sequence[Shape]
) -> tuple[int, str]:
    """The most of ``resource`` one usable node's device plugin gives the pod: nodes whose
    plugin fails a container of it (``refusing``) give nothing."""
    for shape in nodes.admitted(resource, placement):
        if any(shape is r for r in refusing):
            continue
        amount = shape.allocatable[resource]
        return amount, f"{amount} allocatable on node {shape.example.name} (its device plugin)"
    return 0, ""


def _refusing(
    resource: str, nodes: Inventory, placement: Placement, *, most: int, refusal: SlotRefusal
) -> list[Shape]:
    """Usable nodes whose device plugin fails a container asking ``most`` of ``resource``
    (``gpufacts.SlotRefusal``), largest first."""
    found = []
    for shape in nodes.admitted(resource, placement):
        device = shape.gpu.devices.get(resource)
        if device is not None and refusal.refuses(device, most):
            found.append(shape)
    return found


def _refused_text(
    need: int, resource: str, most: int, refusing: Sequence[Shape], offers: Sequence[str]
) -> tuple[str, str]:
    names = ", ".join(s.example.name for s in refusing[:3]) + (", ..." if len(refusing) > 3 else "")
    others = (
        f"; the other nodes it can use offer at most {', and at most '.join(offers)}"
        if offers
        else ""
    )
    # NVIDIA/k8s-device-plugin internal/rm/rm.go, ValidateRequest (gpufacts.SlotRefusal).
    return (
        f"the pod requests {need} {resource}, {most} of them in one container, and no node it "
        f"can use takes it: the nodes with that many ({names}) share their GPUs, and their "
        "NVIDIA device plugin fails a container asking for more than one shared slot "
        '("maximum request size for shared resources is 1"; the pod is rejected with '
        f"UnexpectedAdmissionError){others}. Ask for 1 {resource} per container, or for whole "
        "GPUs on nodes that do not share them.",
        f"{need} {resource} asked ({most} in one container): the nodes with that many refuse "
        "more than 1 shared slot per container",
    )


def _served_text(
    pod_claim: PodClaim, devices: DeviceInventory, nodes: Inventory, placement: Placement
) -> tuple[int, str]:
    assert pod_claim.claim is not None
    sub = pod_claim.claim.spec.requests[0].alternatives[0]
    found = _node_candidates(devices, nodes, placement, pod_claim.name)
    counts = device_counts(sub, found.profiles, devices)
    if not counts.of_class:
        return 0, ""
    text = (
        f"{counts.usable} via DeviceClass {sub.device_class} on node {counts.example}"
        if counts.usable
        else f"none via DeviceClass {sub.device_class}"
    )
    if counts.tainted:
        text += (
            f" ({counts.tainted} more there tainted {counts.taint}, which the scheduler's "
            "claim for the resource does not tolerate)"
        )
    return counts.usable, text


def whole_pod_shortfall(
    claims: PodClaims,
    *,
    demand: Demand,
    placement: Placement,
    nodes: Inventory,
    devices: DeviceInventory,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
) -> tuple[str, str]:
    """Why no one node takes the whole pod, worded for the user."""
    served = [c for c in claims.claims if not c.counted and c.claim is not None]
    per_container = dict(claims.served_per_container)
    for pod_claim in served:
        need = pod_claim.gpu_count
        resource = pod_claim.name
        most = per_container.get(resource, 0)
        refusing = _refusing(resource, nodes, placement, most=most, refusal=refusal)
        plugin, plugin_text = _plugin_text(resource, nodes, placement, refusing=refusing)
        by_class, class_text = _served_text(pod_claim, devices, nodes, placement)
        if need <= max(plugin, by_class):
            continue
        offers = [t for t in (plugin_text, class_text) if t]
        held = [s for s in refusing if s.allocatable[resource] >= need]
        if held:
            return _refused_text(need, resource, most, held, offers)
        if not offers:
            device_class = pod_claim.gpu_classes[0] if pod_claim.gpu_classes else ""
            found = candidates(devices, nodes, placement)
            everywhere = candidates(devices, nodes, EVERYWHERE)
            return shortfall((pod_claim,), found, everywhere, devices)[0], (
                f"{need} {resource} asked, no usable node offers it ({device_class})"
            )
        most = max(plugin, by_class)
        return (
            f"the pod requests {need} {resource}, but no node it can use has that many: they "
            f"offer at most {', and at most '.join(offers)}. Ask for at most {most}, or spread "
            "the work over more pods.",
            f"{need} {resource} asked, a usable node has at most {most}",
        )
    known = [c for c in claims.claims if c.claim is not None and c.counted and c.gpu_count]
    if known and not served:
        found = candidates(devices, nodes, placement)
        if not fits_somewhere(tuple(c.claim.spec for c in known if c.claim), found, devices).fits:
            everywhere = candidates(devices, nodes, EVERYWHERE)
            return shortfall(known, found, everywhere, devices)
    parts = [f"{n} {r}" for r, n in demand.gpus]
    parts += [
        f"{c.gpu_count} {c.name} (from a node's device plugin, or where a node has none, from "
        f"DeviceClass {c.gpu_classes[0] if c.gpu_classes else '?'})"
        for c in served
    ]
    parts += [f'claim "{c.name}" ({c.source})' for c in known]
    if demand.cpu or demand.memory:
        parts.append("its cpu and memory requests")
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    return (
        f"no node the pod can use has everything it asks for at once: {listed}. The "
        "scheduler places a pod on one node, so each part fitting on some node is not enough. "
        "Ask for what one node has, or put the parts in separate pods.",
        "no usable node has the pod's resources and claims together",
    )


def whole_pod_answer(
    claims: PodClaims,
    *,
    demand: Demand,
    placement: Placement,
    nodes: Inventory,
    devices: DeviceInventory,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
) -> WholeAnswer | None:
    """Whether one node the pod can land on takes all of it; None where the claims are not
    judged here (the slices are not known, or a class is unknown: reported as such)."""
    known = [c for c in claims.claims if c.claim is not None]
    if not devices.complete or not known:
        return None
    if any(
        sub.device_class not in devices.classes
        for c in known
        if c.claim is not None
        for request in c.claim.spec.requests
        for sub in request.alternatives
    ):
        return None  # reported as an unknown class
    pending = tuple(
        c.claim.spec
        for c in known
        if c.claim is not None and not c.claim.allocated and c.gpu_count and c.counted
    )
    allowed = tuple(
        c.claim.allocation_terms for c in known if c.claim is not None and c.claim.allocated
    )
    served = [c for c in known if not c.counted]
    return whole_pod_fit(
        pending=pending,
        served=served,
        demand=demand,
        placement=placement,
        nodes=nodes,
        devices=devices,
        allowed=allowed,
        per_container=dict(claims.served_per_container),
        refusal=refusal,
    )


def whole_pod_findings(
    claims: PodClaims,
    *,
    demand: Demand,
    placement: Placement,
    nodes: Inventory,
    devices: DeviceInventory,
    actions: Mapping[str, str],
    where: str,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
) -> Iterator[Finding]:
    """The ``deviceClaims`` finding for a pod whose devices and resources share a node."""
    answer = whole_pod_answer(
        claims, demand=demand, placement=placement, nodes=nodes, devices=devices, refusal=refusal
    )
    if answer is None or answer.fits:
        return
    if answer.fits is None:
        if "selector" in answer.reason:
            yield unevaluated_selector(answer.reason, actions=actions, where=where)
        return
    message, summary = whole_pod_shortfall(
        claims,
        demand=demand,
        placement=placement,
        nodes=nodes,
        devices=devices,
        refusal=refusal,
    )
    yield _finding("deviceClaims", actions.get("deviceClaims", "deny"), message, summary, where)


@dataclass(frozen=True, slots=True)
class ServedCapacity:
    """How much of an extended resource a device class gives one node (KEP-5004)."""

    resource: str
    device_class: str
    most: int  # devices one usable node without the resource in allocatable gives it
    node: str  # that node ("" when none has any)


def served_capacity(
    resource: str,
    *,
    devices: DeviceInventory,
    nodes: Inventory,
    placement: Placement = EVERYWHERE,
) -> ServedCapacity | None:
    """The DRA side of an extended resource: None when no device class maps ``resource``
    (``extendedResourceName``, or ``deviceclass.resource.kubernetes.io/<class>``), else the
    most devices that class offers for it on one node the placement admits and whose
    allocatable lacks it (nodes that have it use their device plugin). Devices count as the
    scheduler's claim for the resource takes them: the class's selectors, untainted."""
    device_class = devices.extended_class(resource)
    if device_class is None or not devices.complete:
        return None
    sub = SubRequest(name=resource, device_class=device_class)
    found = _node_candidates(devices, nodes, placement, resource)
    counts = device_counts(sub, found.profiles, devices)
    return ServedCapacity(resource, device_class, counts.usable, counts.example)


@dataclass(frozen=True, slots=True)
class ServedTotal:
    """All of an extended resource that a device class serves, cluster-wide (KEP-5004)."""

    resource: str
    device_class: str
    plugin: int  # allocatable on the nodes whose device plugin serves it
    devices: int  # pods' units the class's devices give on the nodes without it
    unlimited: bool = False  # a device serves any number of pods (no capacity to share)
    unknown: str = ""  # why there may be more than counted ("": the count is all there is)

    @property
    def have(self) -> int:
        return self.plugin + self.devices


def served_total(
    resource: str, *, devices: DeviceInventory, nodes: Inventory
) -> ServedTotal | None:
    """The cluster's whole capacity for ``resource`` when a device class serves it, or None.

    As the scheduler serves it per node (``filterExtendedResources``): a node whose
    allocatable has the resource gives that (its device plugin, NodeResourcesFit); every
    other node gives the class's devices there, each as one unit (the claim the scheduler
    makes, ``createRequestsAndMappings``: an ``ExactCount`` request of the class, its
    selectors only, no tolerations, so a device tainted ``NoSchedule``/``NoExecute`` is no
    capacity). A device several nodes reach (``allNodes``, a node selector) counts once. A
    device that allows multiple allocations gives as many units as its capacity holds of
    what one allocation takes (its ``requestPolicy`` default, else all of it), and without
    capacity any number. Partitions of one GPU (``consumesCounters``) count as many as fit
    together (``_most_together``). Where a count cannot be exact it errs high, never low:
    this total only ever warns of a shortfall that is real.

    ``unknown`` says what could add more: devices not listed (no ResourceSlices known), a
    node pool whose devices are unknown, a pool of unknown size, or a selector this
    webhook cannot evaluate (``deviceselectors``)."""
    device_class = devices.extended_class(resource)
    if device_class is None:
        return None
    key = ("served-total", resource, id(nodes))
    memo = devices._memo
    known = memo.get(key)
    if known is not None and known[0] is nodes:
        return known[1]  # type: ignore[no-any-return]
    answer = _served_total(resource, device_class, devices=devices, nodes=nodes)
    if review_spent():
        return answer  # found with selectors left unevaluated: this review's answer only
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[key] = (nodes, answer)
    return answer


def _served_total(
    resource: str, device_class: str, *, devices: DeviceInventory, nodes: Inventory
) -> ServedTotal:
    plugin = nodes.total(resource)
    unknown = "" if devices.complete else "the cluster's ResourceSlices are not known"
    sub = SubRequest(name=resource, device_class=device_class)
    matcher = _Matcher(devices)
    seen: set[int] = set()
    together: dict[tuple[object, ...], int] = {}
    units = 0
    unlimited = False
    for shape in nodes.shapes:
        if shape.allocatable.get(resource, 0) > 0:
            continue
        if shape.pool:
            unknown = unknown or f"node pool {shape.pool} may add nodes whose devices are not known"
            continue
        for node in shape.members:
            found = [d for d in devices.devices_for(node) if id(d) not in seen]
            seen.update(id(d) for d in found)
            eligible, problem, cannot_tell = _eligible(sub, found, devices.classes, matcher)
            if cannot_tell:
                unknown = unknown or problem
            chosen = [found[i] for i in eligible]
            if any(d.consumes for d in chosen) and not any(d.shared for d in chosen):
                units += _most_together(chosen, device_class, devices, known=together)
                continue
            for device in chosen:
                share = _allocations(device)
                if share is None:
                    unlimited = True
                else:
                    units += share
    if nodes.unbounded and not unknown:
        unknown = nodes.unbounded[0].describe() + " may add nodes"
    return ServedTotal(resource, device_class, plugin, units, unlimited, unknown)


def _most_together(
    chosen: Sequence[Device],
    device_class: str,
    devices: DeviceInventory,
    *,
    known: dict[tuple[object, ...], int],
) -> int:
    """Of one node's devices of the class, some consuming shared counters (partitions of a
    GPU), the most the allocator gives at once (``checkAvailableCounters``). Devices that
    share no counter set are independent, so each group of counter sets (one GPU's, as
    drivers publish them) is searched alone: the largest k for which k one-device claims
    fit together. A search it cannot finish keeps the group's size (too high, never too
    low); alike groups share the answer."""
    groups: dict[tuple[str, str, str], list[Device]] = {}
    total = 0
    for device in chosen:
        if not device.consumes:
            total += _allocations(device) or 0
            continue
        # Devices consuming several sets join the group of their first (drivers publish a
        # partition against its own GPU's set).
        first = (device.driver, device.pool, device.consumes[0][0])
        groups.setdefault(first, []).append(device)
    for (driver, pool, _), group in groups.items():
        sets = sorted({name for d in group for name, _ in d.consumes})
        available = devices.counters.get((driver, pool), {})
        # By amounts, not names: every GPU of a node has a counter set of its own name.
        key = (
            tuple(sorted(tuple(sorted(c for _, cs in d.consumes for c in cs)) for d in group)),
            tuple(sorted(tuple(sorted(available.get(n, {}).items())) for n in sets)),
        )
        hit = known.get(key)
        if hit is None:
            hit = known[key] = _most_of(group, device_class, devices)
        total += hit
    return total


def _most_of(group: Sequence[Device], device_class: str, devices: DeviceInventory) -> int:
    """One request of k devices: the search tries sets of devices, not orders of them."""
    fits, bound = 0, len(group)
    if bound > ALLOCATION_RESULTS_MAX_SIZE:
        return bound  # more than one claim may hold: not searched, the bound stays
    while fits < bound:
        k = (fits + bound + 1) // 2
        sub = SubRequest(name="r", device_class=device_class, count=k)
        answer = fit((ClaimSpec((DeviceRequest("r", (sub,)),)),), group, devices)
        if answer.fits is None:
            break
        if answer.fits:
            fits = k
        else:
            bound = k - 1
    return bound


def _allocations(device: Device) -> int | None:
    """How many of the scheduler's one-device claims ``device`` can hold; None: any number."""
    if not device.shared:
        return 1
    taken = device.consumption(())
    if not taken:
        return None
    values = {(d, n): v for d, n, v in device.capacity}
    counts = [int(values[k] // v) for k, v in taken.items() if v > 0]
    return min(counts) if counts else None


def cluster_capacity_finding(served: ServedTotal, *, need: int, action: str) -> Finding | None:
    """``clusterCapacity`` for a resource a device class serves: the pods of a workload
    together need more than the cluster holds. Where more may exist than is known, a
    warning that says what the webhook could not see."""
    if served.unlimited or need <= served.have or not (served.have or served.unknown):
        return None  # nothing at all offers it: the pod's own check says so
    parts = []
    if served.plugin:
        parts.append(f"{served.plugin} allocatable on nodes with a device plugin")
    parts.append(
        f"{served.devices} via DeviceClass {served.device_class} on the nodes without"
        if parts
        else f"{served.devices} via DeviceClass {served.device_class}"
    )
    have = " and ".join(parts)
    message = (
        f"all pods of this workload together request {need} {served.resource}, but the whole "
        f"cluster has {served.have} ({have}); not every pod can run at once. Lower replicas "
        "or GPUs per pod, or add nodes."
    )
    summary = f"workload needs {need} {served.resource}, cluster has {served.have}"
    verdict = action_of(action)
    if served.unknown:
        message += (
            f" But the webhook cannot count all of them ({served.unknown}), so this is "
            "only a warning."
        )
        summary += f" (or more: {served.unknown})"
        verdict = "warn" if verdict == "deny" else verdict
    return Finding("builtin", "clusterCapacity", verdict, message, summary)


__all__ = [
    "FitAnswer",
    "ServedCapacity",
    "ServedTotal",
    "cluster_capacity_finding",
    "needs_whole_pod",
    "plugin_fit",
    "served_capacity",
    "served_total",
    "whole_pod_answer",
    "whole_pod_findings",
    "whole_pod_fit",
]
