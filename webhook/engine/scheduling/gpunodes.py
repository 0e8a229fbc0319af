"""Whether a pod can land on a GPU node, and whether it can land anywhere else.

The scheduler decides with its filters: NodeAffinity (``nodeSelector`` and required node
affinity) and TaintToleration (only ``NoSchedule`` and ``NoExecute`` taints filter;
kubernetes pkg/scheduler/framework/plugins/tainttoleration ``Filter`` and
plugins/nodeaffinity ``Filter``). ``Placement.admits`` implements both; this module only
asks them about GPU nodes.

With an inventory, GPU nodes are the nodes (and declared node pools) that offer a GPU
resource or carry a GPU node label, or whose ResourceSlices hold a device of a GPU device
class (a DRA driver without a device plugin: ``DRAGPUs``), and the answer is the
scheduler's own for real nodes.
Without one, a GPU node is what ``GPUSettings.gpuNodes`` describes: it carries one of the
GPU taints (or none, when none are configured) and the GPU labels, and every other label a
selector may ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from webhook.engine.kube.selectors import requirement_matches, tolerates
from webhook.engine.policy.ruleset import GPUNodes, GPUResources, NodeLabel
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import CONDITION_TAINT_PREFIX, Inventory, Placement, Shape
from webhook.engine.scheduling.dra import GPUDevices, gpu_devices


class Reach(Enum):
    NONE = "none"  # no GPU node admits the pod
    SOME = "some"  # GPU nodes and others
    ONLY = "only"  # GPU nodes and nothing else


@dataclass(frozen=True, slots=True)
class GPUNodeReach:
    reach: Reach
    # GPU taints ("key" or "key=value") the pod tolerates.
    tolerated: tuple[str, ...]
    # The pod restricts its nodes at all (a nodeSelector or required node affinity).
    selects: bool

    @property
    def can_land(self) -> bool:
        return self.reach is not Reach.NONE


def pinned_to_a_node(spec: Mapping[str, Any], placement: Placement) -> bool:
    """A pod bound to a named node: the DaemonSet controller pins each of its pods with
    ``matchFields`` on ``metadata.name`` (pkg/controller/daemon/util
    ``ReplaceDaemonSetPodNodeNameNodeAffinity``), and ``nodeName`` skips the scheduler."""
    if spec.get("nodeName"):
        return True
    return any(
        isinstance(e, dict) and e.get("key") == "metadata.name"
        for term in placement.required_terms or ()
        for e in term.get("matchFields") or ()
    )


def _label_holds(label: NodeLabel, labels: Mapping[str, str]) -> bool:
    value = labels.get(label.key)
    return value is not None and (label.value is None or value == label.value)


def is_gpu_shape(shape: Shape, *, nodes: GPUNodes, resources: GPUResources) -> bool:
    if any(amount > 0 and resources.is_gpu(name) for name, amount in shape.allocatable.items()):
        return True
    return any(_label_holds(label, shape.labels) for label in nodes.labels)


@dataclass(frozen=True, slots=True)
class DRAGPUs:
    """The DRA inventory and which of its classes are GPUs (``gpuDeviceClasses``): nodes
    whose ResourceSlices hold GPUs are GPU nodes, with or without a device plugin (NVIDIA's
    DRA driver puts nothing in allocatable, and on 1.36 managed clusters run it alone)."""

    devices: DeviceInventory
    is_gpu_class: Callable[[str], bool]

    def gpus(self) -> GPUDevices:
        return gpu_devices(self.devices, self.is_gpu_class)


def _gpu_members(
    shape: Shape, *, nodes: GPUNodes, resources: GPUResources, dra: GPUDevices | None
) -> tuple[bool, bool]:
    """(some node of the shape is a GPU node, every one is): by allocatable and labels,
    which all members share, else by each member's ResourceSlices."""
    if is_gpu_shape(shape, nodes=nodes, resources=resources):
        return True, True
    if dra is None or shape.pool:
        return False, False
    found = [dra.holds(member) for member in shape.members]
    return any(found), all(found)


def _tolerated_taints(
    placement: Placement, taints: Sequence[tuple[str, str | None, str]]
) -> tuple[str, ...]:
    """GPU taints some toleration of the pod tolerates; a taint of any value is tolerated
    by an ``Exists`` toleration or by an ``Equal`` one on its key (some node may carry that
    value)."""
    out = []
    for key, value, effect in taints:
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        for toleration in placement.tolerations:
            probe = value
            if probe is None:
                probe = str(toleration.get("value") or "")
            if tolerates(toleration, key=key, value=probe, effect=effect):
                out.append(key if value is None or not value else f"{key}={value}")
                break
    return tuple(dict.fromkeys(out))


def _selects(placement: Placement) -> bool:
    return bool(placement.node_selector) or placement.required_terms is not None


def gpu_node_reach(
    spec: Mapping[str, Any],
    placement: Placement,
    *,
    nodes: GPUNodes,
    resources: GPUResources,
    inventory: Inventory | None,
    dra: DRAGPUs | None = None,
) -> GPUNodeReach:
    del spec  # kept for callers: issue 16's DRA claims read the pod spec here
    if inventory is not None:
        return _reach_in(inventory, placement, nodes=nodes, resources=resources, dra=dra)
    return _reach_described(placement, nodes)


def bound_node_reach(
    name: str,
    inventory: Inventory,
    *,
    nodes: GPUNodes,
    resources: GPUResources,
    dra: DRAGPUs | None = None,
) -> GPUNodeReach | None:
    """For a pod already bound to node ``name``: whether that node is a GPU node, exactly
    (a bound pod never moves); ``None`` when the inventory does not hold the node."""
    for shape in inventory.shapes:
        for member in shape.members:
            if member.name == name:
                gpu = is_gpu_shape(shape, nodes=nodes, resources=resources) or (
                    dra is not None and not shape.pool and dra.gpus().holds(member)
                )
                return GPUNodeReach(Reach.ONLY if gpu else Reach.NONE, (), True)
    return None


def _gpu_taints(
    inventory: Inventory, members: Mapping[int, tuple[bool, bool]]
) -> list[tuple[str, str | None, str]]:
    """Taints that GPU nodes carry and other nodes do not; a node's condition taints
    (``node.kubernetes.io/not-ready`` and the like) come and go on any node."""
    on_gpu: set[tuple[str, str | None, str]] = set()
    elsewhere: set[tuple[str, str | None, str]] = set()
    for shape in inventory.shapes:
        some, every = members[id(shape)]
        for t in shape.taints:
            if not t.key.startswith(CONDITION_TAINT_PREFIX):
                if some:
                    on_gpu.add((t.key, t.value, t.effect))
                if not every:
                    elsewhere.add((t.key, t.value, t.effect))
    return sorted(on_gpu - elsewhere, key=str)


@dataclass(slots=True)
class _Memo:
    """Answers for one (snapshot, settings): held by reference, like evaluate's pool memo,
    since a freed snapshot's id may be reused by the next one."""

    inventory: Inventory
    nodes: GPUNodes
    resources: GPUResources
    # Shared by the DRA snapshots that differ only in claims (``with_claim_objects``).
    dra: GPUDevices | None
    taints: list[tuple[str, str | None, str]]
    # Per shape of the snapshot (by id): (some member is a GPU node, every one is).
    members: dict[int, tuple[bool, bool]]
    answers: dict[bytes, GPUNodeReach]


_memo: _Memo | None = None
_MEMO_SIZE = 2048


def _memo_for(
    inventory: Inventory, nodes: GPUNodes, resources: GPUResources, dra: DRAGPUs | None
) -> _Memo:
    global _memo  # noqa: PLW0603 - a memo; answers stay a function of their inputs
    memo = _memo
    gpus = dra.gpus() if dra is not None else None
    if (
        memo is None
        or memo.inventory is not inventory
        or memo.nodes is not nodes
        or memo.resources is not resources
        or memo.dra is not gpus
    ):
        members = {
            id(s): _gpu_members(s, nodes=nodes, resources=resources, dra=gpus)
            for s in inventory.shapes
        }
        taints = _gpu_taints(inventory, members)
        memo = _memo = _Memo(inventory, nodes, resources, gpus, taints, members, {})
    return memo


def _reach_in(
    inventory: Inventory,
    placement: Placement,
    *,
    nodes: GPUNodes,
    resources: GPUResources,
    dra: DRAGPUs | None,
) -> GPUNodeReach:
    memo = _memo_for(inventory, nodes, resources, dra)
    known = memo.answers.get(placement.key())
    if known is not None:
        return known
    tolerated = _tolerated_taints(placement, memo.taints)
    admitted = inventory.shapes_admitting(placement)
    members = [memo.members[id(s)] for s in admitted]
    gpu = any(some for some, _ in members)
    other = any(not every for _, every in members)
    reach = Reach.NONE if not gpu else Reach.SOME if other else Reach.ONLY
    answer = GPUNodeReach(reach, tolerated, _selects(placement))
    if len(memo.answers) >= _MEMO_SIZE:
        memo.answers = {}
    memo.answers[placement.key()] = answer
    return answer


def _judge(
    expr: Mapping[str, Any], label: NodeLabel, labels: Sequence[NodeLabel]
) -> tuple[bool, bool]:
    """(holds on some GPU node carrying ``label``, holds only on GPU nodes) for one
    requirement. Such a node may also carry the other GPU labels (each with its configured
    value) or not; a requirement on any other key may hold on it."""
    key = expr.get("key")
    operator = expr.get("operator")
    only = operator in ("In", "Exists", "Gt", "Lt") and any(la.key == key for la in labels)
    if key == label.key:
        if label.value is None:
            # Any value: some GPU node carries one the requirement accepts, unless it
            # demands that the label is absent.
            return operator != "DoesNotExist", only
        holds = requirement_matches(expr, {label.key: label.value})
        return holds, holds and only
    other = next((la for la in labels if la.key == key), None)
    if other is None or other.value is None:
        return True, only
    holds = requirement_matches(expr, {}) or requirement_matches(expr, {other.key: other.value})
    return holds, holds and only


def _terms(placement: Placement) -> list[list[Mapping[str, Any]]]:
    """The pod's node requirements as ORed lists of ANDed requirements: the nodeSelector
    is ANDed into every term."""
    selector: list[Mapping[str, Any]] = [
        {"key": k, "operator": "In", "values": [str(v)]} for k, v in placement.node_selector.items()
    ]
    if placement.required_terms is None:
        return [selector]
    # A term without requirements matches no node (selectors.term_matches).
    return [
        selector + [e for e in t.get("matchExpressions") or [] if isinstance(e, dict)]
        for t in placement.required_terms
        if t.get("matchExpressions") or t.get("matchFields")
    ]


def _reach_described(placement: Placement, nodes: GPUNodes) -> GPUNodeReach:
    taints = [(t.key, t.value, t.effect) for t in nodes.taints]
    tolerated = _tolerated_taints(placement, taints)
    selects = _selects(placement)
    blocking = [t for t in taints if t[2] in ("NoSchedule", "NoExecute")]
    if blocking and not tolerated:
        return GPUNodeReach(Reach.NONE, tolerated, selects)
    # GPU nodes carry at least one of the labels: the pod can land if some term holds on
    # nodes with one of them, and only there if every term requires one.
    labels = nodes.labels or (NodeLabel(""),)
    holding = [
        term
        for term in _terms(placement)
        if any(all(_judge(e, label, labels)[0] for e in term) for label in labels)
    ]
    if not holding:
        return GPUNodeReach(Reach.NONE, tolerated, selects)
    only = all(any(_judge(e, labels[0], labels)[1] for e in term) for term in holding)
    return GPUNodeReach(Reach.ONLY if only else Reach.SOME, tolerated, selects)
