"""Why a pod can or cannot run on this cluster's GPUs: ``gpu-webhook explain``.

Three readings side by side: each GPU node class's answer (the classes ``gpu-webhook
inventory`` shows), in kube-scheduler's words and filter order
(``webhook.engine.scheduling.placement``); what the webhook would change and whether it
would deny; and, for a live pod, the scheduler's own last ``FailedScheduling`` message.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import GPUResources, Policy
from webhook.engine.resources.fit import Demand, demand_of
from webhook.engine.resources.gpufacts import COUNT_LABEL, GPUFacts, gpu_facts
from webhook.engine.resources.inventory import Node, Placement
from webhook.engine.scheduling.placement import Refusal, refusal, shared_slots
from webhook.reports.audit import ObjectRef, finding_json
from webhook.reports.inventory import NO_GPU, class_key, table

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
        if self.fits:
            of = f" {self.fits} of {self.nodes} nodes" if self.nodes > 1 else ""
            return f"fits{of}" + (f" ({self.detail})" if self.detail else "")
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

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "requests": dict(self.demand),
            "unoffered": list(self.unoffered),
            "classes": [c.to_json() for c in self.classes],
            "nodesWithoutGPUs": self.other_nodes,
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

    def to_json(self) -> dict[str, Any]:
        return {
            **self.ref.to_json(),
            "phase": self.phase,
            "webhook": {
                "allowed": self.allowed,
                "findings": [finding_json(f) for f in self.findings],
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
) -> Explanation:
    """Judge ``obj`` as a CREATE, then ask every node class about each of its pod
    templates as the webhook would leave them (its tolerations and affinity included)."""
    ref = ObjectRef.of(obj)
    decision = evaluate(
        Request(obj, namespace=ref.namespace, namespace_labels=namespace_labels),
        policy=policy,
        inventory=inventory,
    )
    mutated = decision.mutated if decision.mutated is not None else obj
    templates = policy.kinds.templates(mutated) or []
    answers = []
    for template in templates:
        pod = pod_gpus(template.spec, EXTENDED, template.singles)
        demand = {r: n for r, n in pod.effective.items() if n > 0}
        # The whole request vector, as the webhook's capacity check judges it: CPU and
        # memory (limits the webhook set included) beside every extended resource.
        vector = demand_of(template.spec, pod.vector, pod.per_container, pod.containers)
        answers.append(
            TemplateAnswer(
                path=".".join(map(str, template.spec_path)) or "spec",
                demand=demand,
                classes=_classes((*nodes, *policy.node_pools), template.spec, vector),
                other_nodes=sum(1 for n in nodes if class_key(n)[0] == NO_GPU),
                unoffered=_unoffered(nodes, demand),
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
        phase=phase,
        event=event,
    )


def _classes(
    nodes: Sequence[Node], spec: Mapping[str, Any], demand: Demand
) -> tuple[ClassAnswer, ...]:
    placement = Placement.of(spec)  # one pod: read its tolerations and affinity once
    groups: dict[tuple[Any, ...], list[Node]] = {}
    for node in nodes:
        key = (*class_key(node), node.pool)
        if key[0] != NO_GPU:
            groups.setdefault(key, []).append(node)
    answers = []
    for key, members in groups.items():
        product, gpus, _, sharing, replicas_label, _, pool = key
        if pool:  # declared in rule files: nodes the cluster may create for a waiting pod
            product = f"{product} (node pool {pool})"
        replicas = int(replicas_label) if str(replicas_label).isdigit() else 1
        facts = _GroupFacts()
        refusals: list[Refusal | None] = [
            refusal(n, spec, demand, placement=placement, facts=facts.of(n)) for n in members
        ]
        fitting = [n for n, r in zip(members, refusals, strict=True) if r is None]
        reasons = Counter(r.reason for r in refusals if r is not None)
        if fitting:
            detail = shared_slots(fitting[0], dict(demand.gpus), replicas)
        else:
            first = reasons.most_common(1)[0][0]
            detail = next(r.detail for r in refusals if r is not None and r.reason == first)
        resources = " ".join(f"{k}={v}" for k, v in gpus)
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


def _unoffered(nodes: Sequence[Node], demand: Mapping[str, int]) -> tuple[str, ...]:
    offered = {r for n in nodes for r, v in n.allocatable.items() if v and "/" in r}
    notes = []
    for resource in demand:
        if resource in offered:
            continue
        close = difflib.get_close_matches(resource, sorted(offered), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        notes.append(f"no node offers {resource}{hint}")
    return tuple(notes)


def object_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """A unified diff of two objects as YAML: how people read a patch."""
    old = yaml.safe_dump(dict(before), sort_keys=False).splitlines()
    new = yaml.safe_dump(dict(after), sort_keys=False).splitlines()
    return list(difflib.unified_diff(old, new, "original", "mutated", n=2, lineterm=""))


def render_text(explanation: Explanation) -> str:
    e = explanation
    phase = f" ({e.phase})" if e.phase else ""
    lines = [f"{e.ref.kind} {e.ref.namespace}/{e.ref.name}{phase}"]
    if not e.understood:
        lines.append("  holds no pod template the webhook understands: nothing to explain")
        return "\n".join(lines) + "\n"
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
    lines += ["", _webhook_line(e)]
    lines += [f"  {f.action:5} {f.id}: {f.message}" for f in e.findings]
    lines += [f"  notice: {n}" for n in e.notices]
    lines += ["  " + line for line in e.diff]
    if e.event is not None:
        times = f", {e.event.count} times" if e.event.count > 1 else ""
        lines += [
            "",
            f"Scheduler, last FailedScheduling ({e.event.time}{times}):",
            f'  "{e.event.message}"',
        ]
    elif e.phase == "Pending":
        lines += ["", "Scheduler: no FailedScheduling event (yet, or expired after an hour)"]
    return "\n".join(lines) + "\n"


def _requests_line(template: TemplateAnswer) -> str:
    demand = ", ".join(f"{r}: {n}" for r, n in template.demand.items()) or "no GPU resource"
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
