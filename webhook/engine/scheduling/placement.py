"""Why a pod can or cannot go to one node, in the order and the words of kube-scheduler.

kube-scheduler runs its filter plugins per node in a fixed order and stops at the first
that fails (``pkg/scheduler/apis/config/v1/default_plugins.go``: NodeUnschedulable,
NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, ...). Each plugin's
reason is what a ``FailedScheduling`` event counts, e.g. ``0/7 nodes are available: 2
node(s) had untolerated taint {nvidia.com/gpu: present}, 5 Insufficient nvidia.com/gpu``.
``Refusal.reason`` is that text; ``detail`` adds what the scheduler does not say.

Resources are compared with a node's allocatable, not with what other pods already use:
this is whether a pod can ever fit, which is the question behind a pod that stays Pending
on an idle cluster. The comparison is the webhook's own capacity rule, ``fit.shortfalls``,
on the pod's whole request vector (``fit.Demand``: ``explain`` puts every extended resource
the pod asks for in it, GPU or not, beside CPU and memory), so that ``explain`` and the
webhook's "cannot fit" never disagree. NodePorts and volume filters are not run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.kube.selectors import terms_match, tolerates
from webhook.engine.resources.fit import Demand, Shortfall, quantity_text, shortfalls
from webhook.engine.resources.gpufacts import (
    DEVICE_PLUGIN_DEFAULTS,
    MIG_PREFIX,
    GPUFacts,
    SlotRefusal,
    gpu_facts,
)
from webhook.engine.resources.inventory import Node, Placement, Taint

# Reasons as kube-scheduler words them (pkg/scheduler/framework/plugins/*):
UNSCHEDULABLE = "node(s) were unschedulable"  # nodeunschedulable.ErrReasonUnschedulable
NODE_NAME = "node(s) didn't match the requested node name"  # nodename.ErrReason
AFFINITY = "node(s) didn't match Pod's node affinity/selector"  # nodeaffinity.ErrReasonPod
INSUFFICIENT = "Insufficient {}"  # noderesources: "Insufficient " + resource name
# Not the scheduler's word: it places such a pod, and the NVIDIA device plugin refuses it on
# the node (see ``_refused``).
DEVICE_PLUGIN = "NVIDIA device plugin"
REFUSED = (
    "node(s) refuse more than one {} slot per container (kube-scheduler places the pod; "
    "the NVIDIA device plugin fails it at allocation)"
)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
SHARED_SUFFIX = ".shared"


@dataclass(frozen=True, slots=True)
class Refusal:
    """The first filter a node fails: the plugin, its reason, and our detail."""

    plugin: str
    reason: str
    detail: str = ""


def refusal(
    node: Node,
    spec: Mapping[str, Any],
    demand: Demand,
    *,
    placement: Placement | None = None,
    facts: GPUFacts | None = None,
    sharing: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
) -> Refusal | None:
    """Why ``node`` cannot take a pod with ``spec`` asking ``demand``; ``None`` when it can.

    ``facts`` are the node's ``gpu_facts``, passed by a caller that asks many nodes alike
    (computed here otherwise); ``sharing`` is where the device plugin refuses several
    slots (``GPUSettings.devicePlugin``)."""
    where = placement if placement is not None else Placement.of(spec)
    tolerations = where.tolerations
    if node.unschedulable and not _tolerated(
        tolerations, Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
    ):
        return Refusal("NodeUnschedulable", UNSCHEDULABLE, "cordoned")
    wanted = spec.get("nodeName") if isinstance(spec, dict) else None
    if wanted and wanted != node.name:
        return Refusal("NodeName", NODE_NAME, f"the pod names node {wanted}")
    for taint in _taints(node):
        if taint.effect in ("NoSchedule", "NoExecute") and not _tolerated(tolerations, taint):
            detail = "not ready" if taint.key == NOT_READY_TAINT else ""
            return Refusal(
                "TaintToleration",
                f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",
                detail,
            )
    for key, value in where.node_selector.items():
        label = node.labels.get(key)
        if label != str(value):
            detail = f"nodeSelector {key}={value}, node has " + (
                f"{key}={label}" if label is not None else f"no {key} label"
            )
            return Refusal("NodeAffinity", AFFINITY, detail)
    if where.required_terms is not None and not terms_match(
        where.required_terms, node.labels, node.name
    ):
        return Refusal("NodeAffinity", AFFINITY, "required node affinity matches no term")
    if facts is None:
        facts = gpu_facts(node.labels, node.allocatable)
    short = shortfalls(node.allocatable, facts, demand, sharing)
    if not short:
        return None
    first = min(short, key=_scheduler_order)
    if first.refused:
        return _refused(first, facts)
    if first.resource in ("cpu", "memory"):
        have, need = (
            quantity_text(first.resource, first.have),
            quantity_text(first.resource, first.need),
        )
        detail = f"requests {need}, a node here has {have} allocatable"
        if first.resource == "memory":
            detail += " (a memory limit is the request where none is set)"
    else:
        detail = _shortage(node, first.resource, first.need)
    return Refusal("NodeResourcesFit", INSUFFICIENT.format(first.resource), detail)


def _scheduler_order(short: Shortfall) -> int:
    """``fitsRequest`` (kubernetes ``pkg/scheduler/framework/plugins/noderesources/fit.go``)
    checks cpu, then memory (then ephemeral-storage), then each scalar resource, and keeps
    every reason; a ``FailedScheduling`` event counts each. One reason per node is shown
    here: the first in that order. The device plugin's refusal is not the scheduler's: it
    comes last, named only where the scheduler itself lets the pod through."""
    if short.refused:
        return 3
    return {"cpu": 0, "memory": 1}.get(short.resource, 2)


def _refused(short: Shortfall, facts: GPUFacts) -> Refusal:
    """A shared node (time-slicing, MPS) has the slots, but its device plugin refuses a
    container more than one. The scheduler counts slots and places the pod; the NVIDIA
    device plugin then fails it at allocation (``ValidateRequest`` in
    NVIDIA/k8s-device-plugin ``internal/rm/rm.go``: "maximum request size for shared
    resources is 1; found 2"), and the kubelet rejects the pod with
    ``UnexpectedAdmissionError`` (``gpufacts.SlotRefusal``)."""
    device = facts.devices.get(short.resource)
    sharing = device.sharing if device is not None and device.sharing != "none" else "shared"
    replicas = f" x{device.replicas}" if device is not None and device.replicas > 1 else ""
    base = short.resource.removesuffix(SHARED_SUFFIX)
    flag = "" if sharing == "mps" else " (failRequestsGreaterThanOne)"
    detail = (
        f"{sharing}{replicas}{flag}: a container asks {short.need} {short.resource}; ask for 1 "
        f"per container, or for whole GPUs on nodes that do not share them "
        f"({base}.sharing-strategy: none)"
    )
    return Refusal(DEVICE_PLUGIN, REFUSED.format(short.resource), detail)


def shared_slots(node: Node, demand: Mapping[str, int], replicas: int) -> str:
    """A note for a pod that fits on time-sliced GPUs by counting slots: two slots may be
    two shares of one GPU, never two GPUs' worth of compute or memory."""
    if replicas <= 1:
        return ""
    for resource, need in demand.items():
        if need > 1 and node.allocatable.get(resource, 0) and _is_gpu_slot(resource):
            return (
                f"{need} {resource} are {need} time-sliced slots (x{replicas} per GPU), "
                "possibly on one GPU, not whole GPUs"
            )
    return ""


def _is_gpu_slot(resource: str) -> bool:
    return not resource.startswith(MIG_PREFIX)


def _taints(node: Node) -> Sequence[Taint]:
    """The node's taints, and the not-ready taint the node lifecycle controller sets on a
    node whose Ready condition is not true (TaintNodesByCondition), when not yet there."""
    if node.ready or any(t.key == NOT_READY_TAINT for t in node.taints):
        return node.taints
    return (*node.taints, Taint(NOT_READY_TAINT, "", "NoSchedule"))


def _tolerated(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    return any(
        tolerates(t, key=taint.key, value=taint.value, effect=taint.effect) for t in tolerations
    )


def _shortage(node: Node, resource: str, need: int) -> str:
    have = node.allocatable.get(resource, 0)
    if have:
        return f"requests {need}, a node here has {have}"
    offered = sorted(n for n, v in node.allocatable.items() if v and _gpu_like(n))
    if resource.startswith(MIG_PREFIX):
        profiles = [n.removeprefix(MIG_PREFIX) for n in offered if n.startswith(MIG_PREFIX)]
        profile = resource.removeprefix(MIG_PREFIX)
        if profiles:
            return f"MIG profile {profile} absent; profiles here: {', '.join(profiles)}"
        return f"MIG profile {profile} absent; no MIG here"
    shared = resource + SHARED_SUFFIX
    if shared in offered:
        return f"GPUs here are shared: only {shared} is offered"
    if offered:
        return f"{resource} not offered here; offered: {', '.join(offered)}"
    return f"{resource} not offered here"


def _gpu_like(name: str) -> bool:
    return "/" in name and ("gpu" in name or "/mig-" in name)
