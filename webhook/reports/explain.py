"""Why a pod can or cannot run on this cluster's GPUs: ``gpu-webhook explain``.

Three readings side by side: each GPU node class's answer (the classes ``gpu-webhook
inventory`` shows), in kube-scheduler's words and filter order
(``webhook.engine.scheduling.placement``); what the webhook would change and whether it
would deny; and, for a live pod, the scheduler's own last ``FailedScheduling`` message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.decision import Finding, Waiver
from webhook.engine.policy.ruleset import GPUResources, Policy
from webhook.engine.resources.devices import ClaimSpec, DeviceInventory, DeviceRequest, SubRequest
from webhook.engine.resources.fit import Demand, demand_of
from webhook.engine.resources.gpufacts import (
    COUNT_LABEL,
    DEVICE_PLUGIN_DEFAULTS,
    GPUFacts,
    SlotRefusal,
    gpu_facts,
)
from webhook.engine.resources.inventory import Inventory, Node, Placement, healed
from webhook.engine.resources.offers import lookalike, offered, offered_names
from webhook.engine.scheduling.dra import device_counts, fit, pod_claims, request_shortfall
from webhook.engine.scheduling.placement import Refusal, refusal, shared_slots
from webhook.files.context import review_time
from webhook.reports.audit import ObjectRef
from webhook.reports.escape import terminal_text
from webhook.reports.findings import finding_json, object_diff, waiver_json, waiver_line
from webhook.reports.inventory import NO_GPU, class_key, dra_product, dra_products, table
from webhook.reports.pools import PoolAnswer, pool_answers, sizing

# DynamicResources' Filter message when a node's devices cannot serve the pod.
CANNOT_ALLOCATE = "cannot allocate all claims"

# The scheduler compares every extended resource, GPU or not: a typo such as
# nvidia.com/gpus is no GPU to the policy, and exactly why a pod stays Pending.
EXTENDED = GPUResources((("*/*", False),))


@dataclass(frozen=True, slots=True)
class ClassAnswer:
    """One node class's answer: how many of its nodes fit, else the scheduler's reasons."""

    product: str
    resources: str
    nodes: int
    fits: int
    reasons: tuple[tuple[str, int], ...]  # most common first
    detail: str
    # A node pool declared in rule files: up to this many nodes the cluster may create.
    pool_nodes: int = 0
    # Of ``fits``, the nodes a transient state keeps from the pod now, and what it says:
    # a "cannot fit" is never judged on such a state (the cluster heals), but it is why a
    # pod is Pending now.
    waiting: int = 0
    now: str = ""
    when: str = ""

    @property
    def node_count(self) -> str:
        if self.pool_nodes:
            return f"0-{self.pool_nodes} nodes"
        return f"{self.nodes} node" if self.nodes == 1 else f"{self.nodes} nodes"

    @property
    def verdict(self) -> str:
        if self.fits and self.pool_nodes:
            detail = "; ".join(filter(None, ["on a node the pool adds", self.detail]))
            return f"fits ({detail})"
        if self.fits and self.waiting == self.fits:
            detail = "; ".join(filter(None, [f"now: {self.now}", self.detail]))
            return f"fits {self.when} ({detail})"
        if self.fits:
            of = f" {self.fits} of {self.nodes} nodes" if self.nodes > 1 else ""
            later = f"{self.waiting} of them {self.when}" if self.waiting else ""
            detail = "; ".join(filter(None, [later, self.detail]))
            return f"fits{of}" + (f" ({detail})" if detail else "")
        reasons = ", ".join(f"{n} {reason}" for reason, n in self.reasons)
        return f"no: {reasons}" + (f" ({self.detail})" if self.detail else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "product": self.product,
            "resources": self.resources,
            "nodes": self.nodes,
            "poolNodes": self.pool_nodes,
            "fits": self.fits,
            "reasons": [{"reason": r, "nodes": n} for r, n in self.reasons],
            "detail": self.detail,
            "waiting": self.waiting,
            "now": self.now,
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class TemplateAnswer:
    path: str  # where the pod spec is in the object; "spec" for a Pod
    demand: Mapping[str, int]
    classes: tuple[ClassAnswer, ...]
    other_nodes: int  # nodes without any GPU resource
    # Requested resources that no node offers, each with what it may have meant: the
    # scheduler names the first filter a node fails, often a taint, and hides a typo.
    unoffered: tuple[str, ...] = ()
    # Autoscaler pools (nodes that could exist) and whether each could take the pod.
    pools: tuple[PoolAnswer, ...] = ()
    # Device classes its GPU claims still to be allocated ask for (DRA): a pod that asks
    # through claims only requests no extended resource, but it does ask for GPUs.
    claimed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "requests": dict(self.demand),
            "claimedDeviceClasses": list(self.claimed),
            "unoffered": list(self.unoffered),
            "classes": [c.to_json() for c in self.classes],
            "nodesWithoutGPUs": self.other_nodes,
            "pools": [p.to_json() for p in self.pools],
        }


@dataclass(frozen=True, slots=True)
class SchedulerEvent:
    message: str
    time: str
    count: int


@dataclass(frozen=True, slots=True)
class Explanation:
    ref: ObjectRef
    allowed: bool
    understood: bool
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]
    notices: tuple[str, ...]
    patch: tuple[Mapping[str, Any], ...]
    diff: tuple[str, ...]
    templates: tuple[TemplateAnswer, ...]
    phase: str = ""
    event: SchedulerEvent | None = None
    # The node a live pod is bound to (``spec.nodeName``): the scheduler has placed it.
    bound_to: str = ""
    # pod.status.extendedResourceClaimStatus: the claim the scheduler made for extended
    # resources a device class serves (KEP-5004), and the resources it holds.
    extended_claim: str = ""
    extended_resources: tuple[str, ...] = ()
    # Findings GPUPolicyExceptions waived (issue 44).
    waivers: tuple[Waiver, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.ref.to_json(),
            "phase": self.phase,
            "boundTo": self.bound_to or None,
            "extendedResourceClaim": self.extended_claim,
            "webhook": {
                "allowed": self.allowed,
                "findings": [finding_json(f) for f in self.findings],
                "waived": [waiver_json(w) for w in self.waivers],
                "warnings": list(self.warnings),
                "notices": list(self.notices),
                "patch": [dict(op) for op in self.patch],
            },
            "templates": [t.to_json() for t in self.templates],
            "scheduler": None
            if self.event is None
            else {
                "lastFailedScheduling": self.event.message,
                "time": self.event.time,
                "count": self.event.count,
            },
        }


def explain(
    obj: Mapping[str, Any],
    *,
    policy: Policy,
    inventory: InventoryView,
    nodes: Sequence[Node],
    namespace_labels: Mapping[str, str] | None = None,
    phase: str = "",
    event: SchedulerEvent | None = None,
    bound_to: str = "",
    status: Mapping[str, Any] | None = None,
) -> Explanation:
    """Judge ``obj`` as a CREATE, then ask every node class about each of its pod
    templates as the webhook would leave them (its tolerations and affinity included).
    ``bound_to`` is the node a live pod is bound to, said first: the rest is how a new copy
    of the pod would be judged."""
    ref = ObjectRef.of(obj)
    decision = evaluate(
        Request(obj, namespace=ref.namespace, namespace_labels=namespace_labels, now=review_time()),
        policy=policy,
        inventory=inventory,
    )
    mutated = decision.mutated if decision.mutated is not None else obj
    templates = policy.kinds.templates(mutated) or []
    found = sizing(inventory.pools, policy=policy, inventory=inventory.snapshot)
    answers = []
    for template in templates:
        pod = pod_gpus(template.spec, EXTENDED, template.singles)
        # Resources the scheduler is told to ignore (GPUSettings ignoredResources) it
        # does not compare with nodes.
        ignored = policy.settings.ignored_resources
        demand = {r: n for r, n in pod.effective.items() if n > 0 and not ignored(r)}
        # The whole request vector, as the webhook's capacity check judges it: CPU and
        # memory (limits the webhook set included) beside every extended resource.
        vector = demand_of(
            template.spec,
            tuple((r, n) for r, n in pod.vector if not ignored(r)),
            tuple((r, n) for r, n in pod.per_container if not ignored(r)),
            pod.containers,
        )
        served = _served(inventory.devices, demand)
        pending = _pending(template.spec, ref.namespace, inventory.devices, policy)
        classes = _classes(
            (*nodes, *policy.node_pools),
            template.spec,
            vector,
            plugin=policy.settings.device_plugin,
            served=served,
            devices=inventory.devices,
            pending=pending,
        )
        answers.append(
            TemplateAnswer(
                path=".".join(map(str, template.spec_path)) or "spec",
                demand=demand,
                classes=classes,
                # A node whose devices the table shows (the pod's claims' classes too)
                # is no node without GPUs.
                other_nodes=sum(
                    1
                    for n in nodes
                    if _no_gpu(n, {**served, **_claim_classes(pending)}, inventory.devices)
                ),
                unoffered=(
                    _unoffered(
                        inventory,
                        policy,
                        (*nodes, *found.nodes),
                        {r: n for r, n in demand.items() if r not in served},
                    )
                    if not found.unbounded
                    else ()
                ),
                pools=pool_answers(found, template.spec, vector),
                claimed=tuple(_claim_classes(pending).values()),
            )
        )
    return Explanation(
        ref=ref,
        allowed=decision.allowed,
        understood=decision.understood,
        findings=decision.findings,
        warnings=decision.warnings,
        notices=decision.notices,
        patch=tuple(decision.patch),
        diff=tuple(object_diff(obj, mutated)) if decision.patch else (),
        templates=tuple(answers),
        waivers=decision.waivers,
        phase=phase,
        event=event,
        bound_to=bound_to,
        **_extended_claim(status),
    )


def _extended_claim(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """What ``pod.status.extendedResourceClaimStatus`` says (set by the scheduler's
    DynamicResources PreBind, ``patchPodExtendedResourceClaimStatus``)."""
    held = (status or {}).get("extendedResourceClaimStatus")
    if not isinstance(held, Mapping) or not held.get("resourceClaimName"):
        return {}
    mappings = held.get("requestMappings")
    resources = sorted(
        {str(m.get("resourceName")) for m in mappings or [] if isinstance(m, Mapping)}
    )
    return {
        "extended_claim": str(held["resourceClaimName"]),
        "extended_resources": tuple(r for r in resources if r != "None"),
    }


def _pending(
    spec: Mapping[str, Any], namespace: str, devices: DeviceInventory | None, policy: Policy
) -> tuple[ClaimSpec, ...]:
    """The template's GPU claims still to be allocated, as the inventory knows them."""
    if devices is None or not devices.complete or not spec.get("resourceClaims"):
        return ()
    claims = pod_claims(
        spec,
        namespace=namespace or "default",
        devices=devices,
        is_gpu_class=policy.settings.gpu_device_classes,
    )
    return tuple(
        c.claim.spec
        for c in claims.claims
        if c.claim is not None and not c.claim.allocated and c.gpu_count
    )


def _served(devices: DeviceInventory | None, demand: Mapping[str, int]) -> dict[str, str]:
    """Requested extended resources a device class serves (KEP-5004), to their class."""
    if devices is None or not devices.complete:
        return {}
    return {r: c for r in demand if (c := devices.extended_class(r)) is not None}


def _claim_classes(pending: Sequence[ClaimSpec]) -> dict[str, str]:
    """The classes the pending claims name, keyed like served resources (by "")."""
    names = sorted(
        {a.device_class for spec in pending for r in spec.requests for a in r.alternatives}
    )
    return {f"claim:{name}": name for name in names}


def _dra_devices(
    node: Node, served: Mapping[str, str], devices: DeviceInventory | None
) -> tuple[tuple[str, int, int], ...]:
    """Per served class, the devices of the node's slices its selectors match and how many
    of them are tainted (served only where the node's allocatable lacks the resource)."""
    if devices is None or not served:
        return ()
    profile = devices.profile(node)
    if not profile.devices:
        return ()
    out = []
    seen: set[str] = set()
    for resource, device_class in sorted(served.items()):
        if node.allocatable.get(resource, 0) > 0 or device_class in seen:
            continue
        seen.add(device_class)
        sub = SubRequest(name=resource, device_class=device_class)
        counts = device_counts(sub, (profile,), devices)
        if counts.of_class:
            out.append((device_class, counts.of_class, counts.tainted))
    return tuple(out)


def _no_gpu(node: Node, served: Mapping[str, str], devices: DeviceInventory | None) -> bool:
    return class_key(node)[0] == NO_GPU and not _dra_devices(node, served, devices)


def _dra_refusal(
    node: Node,
    demand: Demand,
    served: Mapping[str, str],
    devices: DeviceInventory,
    pending: tuple[ClaimSpec, ...] = (),
) -> Refusal | None:
    """DynamicResources' Filter: the pod's claims and the claim the scheduler makes for
    served resources (one device per unit, the class's selectors, no tolerations), all
    from this node's devices; the detail names the selector or taint that keeps them."""
    profile = devices.profile(node)
    specs = list(pending)
    for resource, need in demand.gpus:
        device_class = served.get(resource)
        if device_class is None or node.allocatable.get(resource, 0) > 0:
            continue
        sub = SubRequest(name=resource, device_class=device_class, count=need)
        counts = device_counts(sub, (profile,), devices)
        # Devices a selector could not be evaluated on may serve it: no refusal on them.
        if counts.usable + counts.unknown < need:
            detail = f"{counts.usable} of {need} {resource} via DeviceClass {device_class}"
            if counts.tainted:
                detail += f"; {counts.tainted} more tainted {counts.taint}, not tolerated"
            return Refusal("DynamicResources", CANNOT_ALLOCATE, detail)
        specs.append(ClaimSpec((DeviceRequest(name=resource, alternatives=(sub,)),)))
    if not pending or fit(tuple(specs), profile.devices, devices).fits is not False:
        return None
    for spec in pending:
        for request in spec.requests:
            if len(request.alternatives) != 1:
                continue
            detail = request_shortfall(request.alternatives[0], profile, devices)
            if detail:
                return Refusal("DynamicResources", CANNOT_ALLOCATE, detail)
    return Refusal(
        "DynamicResources", CANNOT_ALLOCATE, "the pod's claims need more devices together"
    )


def _node_demand(node: Node, demand: Demand, served: Mapping[str, str]) -> Demand:
    """The vector NodeResourcesFit compares: without the served resources the node lacks
    (DynamicResources serves those)."""
    dropped = {r for r in served if node.allocatable.get(r, 0) == 0}
    if not dropped:
        return demand
    return demand._replace(
        gpus=tuple((r, n) for r, n in demand.gpus if r not in dropped),
        per_container=tuple((r, n) for r, n in demand.per_container if r not in dropped),
    )


# How a transient state ends, for "fits when ...".
_WHEN = {
    "cordoned": "when uncordoned",
    "not ready": "when the node is ready again",
    "unreachable": "when the node is reachable again",
}


def _judged(
    node: Node,
    spec: Mapping[str, Any],
    demand: Demand,
    *,
    placement: Placement,
    facts: GPUFacts,
    sharing: SlotRefusal,
) -> tuple[Refusal | None, Refusal | None, str]:
    """The node's answer once transient states are gone (what a denial rests on), the
    scheduler's answer now when only such a state differs, and that state."""
    now = refusal(node, spec, demand, placement=placement, facts=facts, sharing=sharing)
    if now is None:
        return None, None, ""
    state = placement.transient_state(node)
    if not state:
        return now, None, ""
    later = refusal(healed(node), spec, demand, placement=placement, facts=facts, sharing=sharing)
    return later, (now if later is None else None), state


def _with_devices(
    judged: tuple[Refusal | None, Refusal | None, str],
    *,
    node: Node,
    demand: Demand,
    served: Mapping[str, str],
    devices: DeviceInventory | None,
    pending: tuple[ClaimSpec, ...],
) -> tuple[Refusal | None, Refusal | None, str]:
    """``_judged``'s answer, with DynamicResources' when every other filter lets the node
    take the pod: a node's devices do not heal with its conditions."""
    later, _, _ = judged
    if later is not None or devices is None or not (served or pending):
        return judged
    refused = _dra_refusal(node, demand, served, devices, pending)
    return judged if refused is None else (refused, None, "")


def _classes(
    nodes: Sequence[Node],
    spec: Mapping[str, Any],
    demand: Demand,
    *,
    plugin: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
    served: Mapping[str, str] | None = None,
    devices: DeviceInventory | None = None,
    pending: tuple[ClaimSpec, ...] = (),
) -> tuple[ClassAnswer, ...]:
    placement = Placement.of(spec)  # one pod: read its tolerations and affinity once
    served = served or {}
    shown = {**served, **_claim_classes(pending)}
    groups: dict[tuple[Any, ...], list[Node]] = {}
    for node in nodes:
        dra = _dra_devices(node, shown, devices)
        key = (*class_key(node), node.pool, dra, dra_products(devices, node) if dra else ())
        if key[0] != NO_GPU or dra:
            groups.setdefault(key, []).append(node)
    answers = []
    for key, members in groups.items():
        product, gpus, _, sharing, replicas_label, _, pool, dra, _ = key
        if product == NO_GPU and devices is not None:
            product = dra_product(devices, members[0])
        if pool:  # declared in rule files: nodes the cluster may create for a waiting pod
            product = f"{product} (node pool {pool})"
        replicas = int(replicas_label) if str(replicas_label).isdigit() else 1
        facts = _GroupFacts()
        judged = [
            _with_devices(
                _judged(
                    n,
                    spec,
                    _node_demand(n, demand, served),
                    placement=placement,
                    facts=facts.of(n),
                    sharing=plugin,
                ),
                node=n,
                demand=demand,
                served=served,
                devices=devices,
                pending=pending,
            )
            for n in members
        ]
        refusals: list[Refusal | None] = [later for later, _, _ in judged]
        fitting = [n for n, r in zip(members, refusals, strict=True) if r is None]
        reasons = Counter(r.reason for r in refusals if r is not None)
        waiting = [(now, state) for _, now, state in judged if now is not None]
        now_reasons = Counter(now.reason for now, _ in waiting)
        states = Counter(state for _, state in waiting)
        if fitting:
            detail = shared_slots(fitting[0], dict(demand.gpus), replicas)
        else:
            first = reasons.most_common(1)[0][0]
            detail = next(r.detail for r in refusals if r is not None and r.reason == first)
        resources = " ".join(
            [f"{k}={v}" for k, v in gpus]
            + [f"{c}={n} (DRA{f', {t} tainted' if t else ''})" for c, n, t in dra]
        )
        if sharing not in ("", "none") or replicas > 1:
            resources += f" ({sharing or 'time-slicing'} x{replicas})"
        answers.append(
            ClassAnswer(
                product=product,
                resources=resources,
                nodes=len(members),
                fits=len(fitting),
                reasons=tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
                detail=detail,
                pool_nodes=members[0].count if pool else 0,
                waiting=len(waiting),
                now=", ".join(f"{n} {reason}" for reason, n in now_reasons.most_common()),
                when=" or ".join(
                    _WHEN.get(state, f"when {state.removeprefix('tainted ')} is lifted")
                    for state, _ in states.most_common()
                ),
            )
        )
    answers.sort(key=lambda a: (not a.fits, a.product, a.resources))
    return tuple(answers)


class _GroupFacts:
    """``gpu_facts`` of one node class, read once per GPU count rather than per node (10,000
    nodes would cost a reading each). What the NodeResourcesFit step reads of the facts
    (``fit.shortfalls``) is whether a unit of ``nvidia.com/gpu`` or its renamed
    ``nvidia.com/gpu.shared`` is a shared slot, and the physical GPUs behind the slots (a
    MIG device is never a slot to that rule). Members of a class share the inputs of the
    first (their GPU resources, ``gpu.product``, ``gpu.replicas``, ``gpu.sharing-strategy``
    and ``mig.strategy`` are in ``class_key``); ``gpu.count``, the second, is the key here."""

    def __init__(self) -> None:
        self._by_count: dict[str | None, GPUFacts] = {}

    def of(self, node: Node) -> GPUFacts:
        count = node.labels.get(COUNT_LABEL)
        hit = self._by_count.get(count)
        if hit is None:
            hit = self._by_count[count] = gpu_facts(node.labels, node.allocatable)
        return hit


def _unoffered(
    view: InventoryView, policy: Policy, nodes: Sequence[Node], demand: Mapping[str, int]
) -> tuple[str, ...]:
    """Requested resources that nothing offers (``offers.offered``: nodes, autoscaler and
    declared node pools, DRA device classes), each with what it may have meant."""
    # ``nodes`` holds the nodes of sized autoscaler pools beside the cluster's own.
    snapshot = Inventory(nodes).with_nodes(policy.node_pools)
    devices = view.usable_devices
    notes = []
    for resource in demand:
        if offered(resource, nodes=snapshot, devices=devices):
            continue
        close = lookalike(resource, offered_names(nodes=snapshot, devices=devices))
        hint = f"; did you mean {close}?" if close else ""
        notes.append(f"no node offers {resource}{hint}")
    return tuple(notes)


def render_text(explanation: Explanation) -> str:
    e = explanation
    phase = f" ({e.phase})" if e.phase else ""
    lines = [f"{e.ref.kind} {e.ref.namespace}/{e.ref.name}{phase}"]
    if e.bound_to:
        lines.append(
            f"  bound to node {e.bound_to}: the scheduler has placed it; below is how a new "
            "copy of this pod would be judged"
        )
    if not e.understood:
        lines.append("  holds no pod template the webhook understands: nothing to explain")
        return terminal_text(lines)
    for template in e.templates:
        lines += ["", _requests_line(template)]
        lines += [f"  {note}" for note in template.unoffered]
        if not template.classes:
            lines.append("  no node advertises a GPU resource")
        rows = [(c.product, c.node_count, c.resources, c.verdict) for c in template.classes]
        if rows:
            lines += table([("NODE CLASS", "NODES", "GPU RESOURCES PER NODE", "ANSWER"), *rows])
        if template.other_nodes:
            lines.append(f"  and {_count(template.other_nodes)} without GPUs")
        if template.pools:
            lines.append("  Node pools (nodes that could exist):")
            lines += [f"    {p.text}: {p.answer}" for p in template.pools]
    lines += ["", _webhook_line(e)]
    lines += [f"  {f.action:5} {f.id}: {f.message}" for f in e.findings]
    lines += [f"  waived {waiver_line(w)}" for w in e.waivers]
    lines += [f"  notice: {n}" for n in e.notices]
    lines += ["  " + line for line in e.diff]
    if e.event is not None:
        times = f", {e.event.count} times" if e.event.count > 1 else ""
        lines += [
            "",
            f"Scheduler, last FailedScheduling ({e.event.time}{times}):",
            f'  "{e.event.message}"',
        ]
    elif e.phase == "Pending" and not e.bound_to:
        lines += ["", "Scheduler: no FailedScheduling event (yet, or expired after an hour)"]
    if e.extended_claim:
        held = ", ".join(e.extended_resources) or "its extended resources"
        lines.append(
            f"  {held} came from DRA: ResourceClaim {e.extended_claim}, made by the scheduler "
            "(pod.status.extendedResourceClaimStatus)"
        )
    return terminal_text(lines)


def _requests_line(template: TemplateAnswer) -> str:
    demand = ", ".join(f"{r}: {n}" for r, n in template.demand.items())
    if template.claimed:
        classes = ", ".join(template.claimed)
        claims = f"devices of {classes} through its ResourceClaims"
        demand = f"{demand} and {claims}" if demand else claims
    demand = demand or "no GPU resource"
    where = "" if template.path == "spec" else f" at {template.path}"
    return (
        f"Pod template{where} requests {demand}; per GPU node class, as kube-scheduler "
        "would filter it (allocatable, not current use):"
    )


def _webhook_line(e: Explanation) -> str:
    if not e.allowed:
        rules = ", ".join(dict.fromkeys(f.id for f in e.findings if f.action == "deny"))
        return f"Webhook on create: DENIED by {rules}"
    change = "with these changes" if e.patch else "unchanged"
    return f"Webhook on create: allowed, {change}"


def _count(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"
