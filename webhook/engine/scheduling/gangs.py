"""Whether the pods of a workload that must run together can all run at once.

A distributed training job starts only when every worker is up: the Kubeflow training
operator and mpi-operator create a PodGroup whose ``minMember`` is all replicas (or
``runPolicy.schedulingPolicy.minAvailable``), Volcano's Job has ``spec.minAvailable``
(defaulted to the sum of its tasks' replicas), a LeaderWorkerSet group is its leader and
``size - 1`` workers, a KubeRay worker group with ``numOfHosts`` makes that many hosts per
replica as one unit, and a JobSet's replicated jobs run as one. Checking each pod against
the largest node, and the sum of all pods against the sum of all GPUs
(``clusterCapacity``), admits a job of 3 workers x 8 GPUs on two 8-GPU and four 4-GPU
nodes, which never starts.

For identical pods the answer is exact: an empty node of one class holds
``pods_per_node`` of them (``webhook.engine.resources.fit``), nodes are independent, so
the pods that can run at once are the sum over the classes the pod fits of that count
times the class's nodes (a declared pool counts as its ``maxNodes``). For pods of several
templates the webhook denies only on a bound that proves the gang cannot fit (a template
that alone cannot place its pods, or templates whose joint request exceeds every node any
of them can use) and warns when a first-fit placement cannot confirm it fits.

Gangs formed by scheduling labels the webhook cannot see the size of (a coscheduling
``PodGroup``'s ``minMember``, a Volcano ``PodGroup`` named by annotation, a Kueue pod
group of pods that arrive one by one) are judged as all the pods of the object (or the
group's announced total of copies of the pod) and only ever warned about.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from webhook.engine.kube.patch import lookup
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.resources.fit import Demand, pods_per_node, quantity_text
from webhook.engine.resources.inventory import FitAnswer, Shape
from webhook.engine.scheduling.gangdevices import (
    PodDevices,
    device_capacity,
    placed_together,
)

Devices = Mapping[int, PodDevices]  # by id() of the PodTemplate

# Kinds whose every pod is one gang (all replicas of all replica specs).
KUBEFLOW_KINDS = frozenset({"PyTorchJob", "TFJob", "MPIJob", "PaddleJob", "XGBoostJob"})
# Labels and annotations that put pods in a gang whose size the object does not say.
# scheduler-plugins coscheduling (sigs.k8s.io/scheduler-plugins apis/scheduling, label
# ``scheduling.x-k8s.io/pod-group``), Volcano (annotation ``scheduling.k8s.io/group-name``
# and the older ``scheduling.volcano.sh/group-name``), Kueue plain pod groups (label
# ``kueue.x-k8s.io/pod-group-name``, annotation ``kueue.x-k8s.io/pod-group-total-count``).
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
# Work allowed to a first-fit placement (nodes times pods); beyond it the gang is judged by
# its bounds alone.
_PLACEMENT_BUDGET = 200_000


@dataclass(frozen=True, slots=True)
class Member:
    """Pods of one template (or several alike) in a gang, and where they fit; ``devices``
    when its GPUs come from DRA claims (``webhook.engine.scheduling.gangdevices``)."""

    name: str
    count: int
    fit: FitAnswer
    devices: PodDevices | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Gang:
    """Pods that must all (or ``need`` of them) run at once."""

    why: str  # what makes them a gang, for the message
    members: tuple[Member, ...]
    need: int | None = None  # fewer than all (minAvailable); None: all of them
    certain: bool = True  # the gang's size is known: a proof may deny

    @property
    def size(self) -> int:
        return sum(m.count for m in self.members)

    @property
    def required(self) -> int:
        return min(self.need, self.size) if self.need is not None else self.size


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gang's answer: ``proven`` that it cannot fit, or only ``unconfirmed``."""

    gang: Gang
    proven: bool
    at_once: int  # an upper bound on the gang's pods that can run at once
    placed: int  # pods a first-fit placement ran together (a lower bound); -1: not tried
    reason: str


def capacity(fit: FitAnswer) -> int | None:
    """How many pods of this vector and placement can run at once on the nodes and pools
    the pod can use; ``None``: unbounded (nothing in the vector is counted by nodes)."""
    total = 0
    for shape in fit.fitting:
        each = pods_per_node(shape.allocatable, shape.gpu, fit.demand)
        if each is None:
            return None
        total += each * shape.node_count
    return total


# --- which pods form gangs -----------------------------------------------------------------


def may_be_gang(obj: Mapping[str, Any], templates: Sequence[tuple[PodTemplate, FitAnswer]]) -> bool:
    """Whether ``gangs_of`` can find anything: a lone Pod is in a gang only as a member of a
    Kueue pod group, the one grouping whose size the pod itself states (every admission of
    a plain pod would otherwise pay for the whole look)."""
    if not templates or templates[0][0].path:
        return bool(templates)
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(labels, dict) and bool(labels.get(KUEUE_GROUP_LABEL))


def gangs_of(
    obj: Mapping[str, Any],
    templates: Sequence[tuple[PodTemplate, FitAnswer]],
    devices: Devices | None = None,
) -> list[Gang]:
    """The gangs of ``obj`` among its templates that have a fit answer (GPU templates)."""
    if not templates:
        return []
    devices = devices or {}
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = str(obj.get("kind", ""))
    if group == "kubeflow.org" and kind in KUBEFLOW_KINDS:
        return _whole(kind, obj, templates, devices, need=_min_available(obj, "runPolicy"))
    if group == "jobset.x-k8s.io" and kind == "JobSet":
        return _whole(kind, obj, templates, devices, need=None)
    if group == "batch.volcano.sh" and kind == "Job":
        return _whole("Volcano Job", obj, templates, devices, need=_min_available(obj, ""))
    if group == "leaderworkerset.x-k8s.io" and kind == "LeaderWorkerSet":
        return _lws_group(obj, templates, devices)
    if group == "ray.io":
        return list(_ray_hosts(obj, templates, devices))
    return _labelled(templates, devices)


def _member_name(template: PodTemplate) -> str:
    named = [str(p) for p in template.path if p not in ("template", "spec")]
    return ".".join(named[-1:]) or "pod"


def _members(
    templates: Iterable[tuple[PodTemplate, FitAnswer, int]], devices: Devices
) -> tuple[Member, ...]:
    return tuple(
        Member(_member_name(t), count, fit, devices.get(id(t)))
        for t, fit, count in templates
        if count > 0
    )


def _whole(
    why: str,
    obj: Mapping[str, Any],
    templates: Sequence[tuple[PodTemplate, FitAnswer]],
    devices: Devices,
    *,
    need: int | None,
) -> list[Gang]:
    elastic = lookup(obj, ("spec", "elasticPolicy", "minReplicas"))
    rows = []
    for template, fit in templates:
        count = template.replicas if template.replicas is not None else 1
        # An elastic PyTorchJob starts with minReplicas workers (training-operator
        # ElasticPolicy): the gang is its masters and that many workers.
        if _int(elastic) is not None and "Worker" in template.path:
            least = max(_int(elastic) or 0, 0)
            if least < count:
                # Say which number the gang was counted with (issue 41).
                why = f"{why} (Worker counted at elasticPolicy.minReplicas {least})"
            count = min(count, least)
        rows.append((template, fit, count))
    members = _members(rows, devices)
    return [Gang(why, members, need=need)] if members else []


def _min_available(obj: Mapping[str, Any], under: str) -> int | None:
    """``spec.minAvailable`` (Volcano) or ``spec.runPolicy.schedulingPolicy.minAvailable``
    (training operator, mpi-operator); unset or not positive: all pods."""
    path = (
        ("spec", under, "schedulingPolicy", "minAvailable") if under else ("spec", "minAvailable")
    )
    value = _int(lookup(obj, path))
    return value if value is not None and value > 0 else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lws_group(
    obj: Mapping[str, Any], templates: Sequence[tuple[PodTemplate, FitAnswer]], devices: Devices
) -> list[Gang]:
    """One LeaderWorkerSet group: groups start independently, a group's pods together
    (the leader waits for its workers); the templates' replicas are for all groups."""
    groups = _int(lookup(obj, ("spec", "replicas")))
    groups = 1 if groups is None else groups
    if groups <= 0:
        return []
    rows = [(t, f, (t.replicas or 0) // groups) for t, f in templates]
    members = _members(rows, devices)
    return [Gang("LeaderWorkerSet group", members)] if members else []


def _ray_hosts(
    obj: Mapping[str, Any], templates: Sequence[tuple[PodTemplate, FitAnswer]], devices: Devices
) -> Iterator[Gang]:
    """A KubeRay worker group with ``numOfHosts`` > 1 makes that many pods per replica, one
    multi-host unit (ray-operator ``WorkerGroupSpec.NumOfHosts``)."""
    for template, fit in templates:
        group = lookup(obj, template.path[:-1])
        hosts = _int(group.get("numOfHosts")) if isinstance(group, dict) else None
        if hosts is not None and hosts > 1:
            name = str(group.get("groupName") or _member_name(template))
            yield Gang(
                f"Ray worker group {name} (numOfHosts {hosts})",
                (Member(name, hosts, fit, devices.get(id(template))),),
            )


def _labelled(templates: Sequence[tuple[PodTemplate, FitAnswer]], devices: Devices) -> list[Gang]:
    """Pods that a gang scheduler groups by label or annotation: the group's size is in an
    object the webhook does not see, so the gang is only ever warned about."""
    for template, fit in templates:
        raw = template.template.get("metadata") if not template.pod_spec else None
        meta: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        labels: Mapping[str, Any] = _map(meta.get("labels"))
        count = template.replicas if template.replicas is not None else 1
        if count <= 1 and not labels.get(KUEUE_GROUP_LABEL):
            continue  # one pod alone is no gang (only Kueue's annotation can say otherwise)
        notes: Mapping[str, Any] = _map(meta.get("annotations"))
        why = ""
        if labels.get(KUEUE_GROUP_LABEL):
            total = _count(notes.get(KUEUE_TOTAL_ANNOTATION))
            if total is not None and not template.path:
                count = total
            why = f"Kueue pod group {labels[KUEUE_GROUP_LABEL]}"
        elif labels.get(COSCHEDULING_LABEL):
            why = f"PodGroup {labels[COSCHEDULING_LABEL]}"
        else:
            named = next((notes[a] for a in VOLCANO_GROUP_ANNOTATIONS if notes.get(a)), None)
            if named:
                why = f"Volcano PodGroup {named}"
        if why and count > 1:
            member = Member(_member_name(template), count, fit, devices.get(id(template)))
            return [Gang(why, (member,), certain=False)]
    return []


def _map(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, dict) else {}


def _count(raw: object) -> int | None:
    try:
        value = int(str(raw))
    except ValueError:
        return None
    return value if value > 0 else None


# --- judging one gang -----------------------------------------------------------------------


def _merged(members: Sequence[Member]) -> list[Member]:
    """Templates with the same placement and vector are one set of identical pods."""
    by_key: dict[tuple[bytes, Demand, Any], Member] = {}
    for m in members:
        key = (m.fit.placement.key(), m.fit.demand, m.devices.claims if m.devices else None)
        seen = by_key.get(key)
        by_key[key] = (
            m
            if seen is None
            else Member(f"{seen.name}+{m.name}", seen.count + m.count, m.fit, m.devices)
        )
    return list(by_key.values())


def judge(gang: Gang) -> Verdict | None:
    """``None`` when the gang fits (or nothing bounds it); else why it cannot or might not."""
    groups = _merged(gang.members)
    if any(not g.fit.fitting for g in groups):
        return None  # a pod that fits no node at all: the pod's own capacity check says so
    if any(g.devices is not None for g in groups):
        return _judge_devices(gang, groups)
    required = gang.required
    caps = [capacity(g.fit) for g in groups]
    if len(groups) == 1:
        cap = caps[0]
        if cap is None or cap >= required:
            return None
        return Verdict(gang, True, cap, cap, _identical_reason(gang, groups[0], cap))
    # The most pods that can run at once, each template counted as if alone.
    alone = sum(
        g.count if c is None else min(g.count, c) for g, c in zip(groups, caps, strict=True)
    )
    if required == gang.size:
        for g, c in zip(groups, caps, strict=True):
            if c is not None and c < g.count:
                reason = (
                    f"{g.count} {g.name} pods need to run at once, but only {c} fit the "
                    "nodes and pools they can use"
                )
                return Verdict(gang, True, alone, _placed(groups, required), reason)
        joint = _joint_bound(groups)
        if joint:
            return Verdict(gang, True, alone, _placed(groups, required), joint)
    elif alone < required:
        reason = f"{required} of them must run at once, but at most {alone} fit"
        return Verdict(gang, True, alone, _placed(groups, required), reason)
    placed = _first_fit(groups, required)
    if placed is not None and placed >= required:
        return None
    reason = (
        f"a first-fit placement ran {placed} of the {required} pods together"
        if placed is not None
        else "the gang is too large to place pod by pod"
    )
    return Verdict(gang, False, alone, -1 if placed is None else placed, reason)


def _judge_devices(gang: Gang, groups: Sequence[Member]) -> Verdict | None:
    """``judge`` for gangs with DRA-claimed GPUs: counts from the nodes' devices
    (``gangdevices``); a count that is not exact (some node's devices could not be
    counted) is never a proof."""
    required = gang.required
    caps: list[tuple[int | None, bool]] = []
    for g in groups:
        if g.devices is None:
            caps.append((capacity(g.fit), True))
        else:
            caps.append(device_capacity(g.fit, g.devices))
    if len(groups) == 1:
        cap, exact = caps[0]
        if cap is None or cap >= required:
            return None
        if exact:
            reason = (
                f"at most {cap} of its {required} pods can run at once: the DRA devices of "
                "the nodes they can use hold that many sets of their claims"
            )
            return Verdict(gang, True, cap, cap, reason)
        reason = (
            f"the nodes whose DRA devices the webhook can count hold {cap} of them at once, "
            "and the devices of the other nodes they can use could not be counted"
        )
        return Verdict(gang, False, cap, cap, reason)
    alone = sum(
        g.count if c is None else min(g.count, c) for g, (c, _) in zip(groups, caps, strict=True)
    )
    for g, (c, exact) in zip(groups, caps, strict=True):
        if exact and c is not None and c < g.count and required == gang.size:
            reason = (
                f"{g.count} {g.name} pods need to run at once, but only {c} fit the nodes "
                "and devices they can use"
            )
            return Verdict(gang, True, alone, -1, reason)
    if alone < required and all(exact for _, exact in caps):
        reason = f"{required} of them must run at once, but at most {alone} fit"
        return Verdict(gang, True, alone, -1, reason)
    placed = None
    if all(g.devices is not None for g in groups):
        rows = [(g.fit, g.devices, g.count) for g in groups if g.devices is not None]
        placed = placed_together(rows, required=required)
    if placed is not None and placed >= required:
        return None
    reason = (
        f"a first-fit placement of their DRA claims ran {placed} of the {required} pods together"
        if placed is not None
        else "the webhook cannot place DRA claims of these templates together"
    )
    return Verdict(gang, False, alone, -1 if placed is None else placed, reason)


def _placed(groups: Sequence[Member], required: int) -> int:
    """Pods a first-fit placement runs together (-1: too large to try): the largest group
    the message can say fits, a lower bound."""
    placed = _first_fit(groups, required)
    return -1 if placed is None else placed


def _identical_reason(gang: Gang, group: Member, cap: int) -> str:
    return (
        f"at most {cap} of its {gang.required} pods ({_describe(group.fit.demand)} each) can "
        "run at once on the nodes and pools they can use"
    )


def _describe(demand: Demand) -> str:
    parts = [f"{quantity_text(name, amount)} {name}" for name, amount in demand.gpus]
    return " + ".join(parts) or "GPU"


def _vector(demand: Demand) -> list[tuple[str, int]]:
    return [
        (name, need)
        for name, need in (*demand.gpus, ("cpu", demand.cpu), ("memory", demand.memory))
        if need > 0
    ]


def _joint_bound(groups: Sequence[Member]) -> str:
    """A set of templates whose pods together ask more of some resource than all the nodes
    any of them can use hold: no placement exists."""
    if len(groups) > 10:
        groups = groups[:10]  # 2^10 subsets at most; the rest only weaken the bound
    for size in range(2, len(groups) + 1):
        for subset in combinations(groups, size):
            shapes: dict[int, Shape] = {}
            for g in subset:
                for shape in g.fit.fitting:
                    shapes[id(shape)] = shape
            asked: dict[str, int] = {}
            for g in subset:
                for name, need in _vector(g.fit.demand):
                    asked[name] = asked.get(name, 0) + need * g.count
            for name, need in asked.items():
                stated = [s for s in shapes.values() if name in s.allocatable]
                if len(stated) < len(shapes):
                    continue  # a node that does not state it may hold any amount
                have = sum(s.allocatable[name] * s.node_count for s in stated)
                if need > have:
                    names = ", ".join(f"{g.count} {g.name}" for g in subset)
                    return (
                        f"its pods ({names}) together need {quantity_text(name, need)} "
                        f"{name}, and the nodes and pools they can use hold "
                        f"{quantity_text(name, have)}"
                    )
    return ""


def _first_fit(groups: Sequence[Member], required: int) -> int | None:
    """Pods placed together by first-fit decreasing on single nodes (largest pods first,
    each to the fullest node that takes it); ``None`` when over the work budget."""
    nodes: dict[int, tuple[Shape, int]] = {}
    for g in groups:
        for shape in g.fit.fitting:
            nodes[id(shape)] = (shape, shape.node_count)
    total_nodes = sum(count for _, count in nodes.values())
    pods = sum(g.count for g in groups)
    if total_nodes * pods * len(groups) > _PLACEMENT_BUDGET:
        return None
    free: list[tuple[int, dict[str, int]]] = []
    for key, (shape, count) in nodes.items():
        free.extend((key, dict(shape.allocatable)) for _ in range(count))
    ordered = sorted(groups, key=lambda g: [-need for _, need in _vector(g.fit.demand)])
    placed = 0
    for g in ordered:
        allowed = {id(s) for s in g.fit.fitting}
        vector = _vector(g.fit.demand)
        for _ in range(g.count):
            best = None
            for index, (key, left) in enumerate(free):
                if key in allowed and all(left.get(n, need) >= need for n, need in vector):
                    room = sum(left.get(n, 0) for n, _ in vector)
                    if best is None or room < best[0]:
                        best = (room, index)
            if best is None:
                continue
            left = free[best[1]][1]
            for name, need in vector:
                if name in left:
                    left[name] -= need
            placed += 1
    return min(placed, required) if placed < required else placed


def gang_findings(
    obj: Mapping[str, Any],
    templates: Sequence[tuple[PodTemplate, FitAnswer]],
    *,
    action: str,
    devices: Devices | None = None,
    unsure: str = "",
) -> list[Finding]:
    """``gangFit`` findings: a proof denies (by default), anything short of one warns.
    ``unsure`` says what may bring nodes the count cannot see (a proof then only warns)."""
    findings = []
    for gang in gangs_of(obj, templates, devices):
        verdict = judge(gang)
        if verdict is None:
            continue
        findings.append(_finding(verdict, action, unsure))
    return findings


def _finding(verdict: Verdict, action: str, unsure: str = "") -> Finding:
    gang = verdict.gang
    who = f"{gang.why}: {gang.required} pods must run at once"
    if gang.certain and verdict.proven and not unsure:
        if verdict.placed >= 0 and verdict.at_once == verdict.placed:
            largest = f"the largest group that fits at once is {_pods(verdict.placed)}"
        elif verdict.placed >= 0:
            largest = f"a first-fit placement runs {verdict.placed} of them at once"
        else:
            largest = f"at most {verdict.at_once} can run at once"
        message = (
            f"{who}, but {verdict.reason}; {largest}, so the job never starts. Lower the "
            "replicas or the GPUs per pod, or add nodes (a NodePool rule declares nodes an "
            "autoscaler may add)."
        )
        return Finding(
            "builtin",
            "gangFit",
            action_of(action),
            message,
            f"gang of {gang.required} pods cannot run at once ({largest})",
        )
    if gang.certain and verdict.proven:
        message = f"{who}, but {verdict.reason}, so the job may never start. Not denied: {unsure}."
    else:
        if verdict.proven:
            text = f"{verdict.reason}; at most {verdict.at_once} can run at once"
        else:
            text = f"could not confirm they fit together: {verdict.reason}"
        size = "" if gang.certain else " (the group's size is set outside this object)"
        message = f"{who}{size}; {text}. If they must all start together, the job may never start."
    return Finding(
        "builtin",
        "gangFit",
        "warn" if action == "deny" else action_of(action),
        message,
        f"gang of {gang.required} pods may not run at once",
    )


def _pods(count: int) -> str:
    return f"{count} pod" if count == 1 else f"{count} pods"
