"""GKE's nodes that could exist: ComputeClasses and node auto-provisioning, sized through
the catalogue's GCP rows where GKE's choice is bounded, and never guessed where it is not.

- A ``ComputeClass`` (cloud.google.com/kubernetes-engine/docs/concepts/about-custom-
  compute-classes) makes GKE create nodes for pods that select it
  (``cloud.google.com/compute-class``) from its ``priorities``, in order. A rule names
  a ``machineType``, a ``machineFamily``, a ``gpu`` (``type``, ``count``), ``minCores``
  and ``minMemoryGb``; GKE picks a machine that satisfies all of them. The class is sized
  only when every rule is bounded by listed machine types, and it says
  ``whenUnsatisfiable: DoNotScaleUp``: with ``ScaleUpAnyway`` GKE creates nodes outside
  the priorities when none can be had, of a shape the webhook cannot know.
- Node auto-provisioning (shown by a node of a ``nap-...`` pool) may create any machine
  its cluster-level limits allow, and those limits are not in the Kubernetes API: it stays
  of unknown size, except for a pod that selects an accelerator, machine family or
  machine type that only listed machine types have. NAP then creates one of those
  (cloud.google.com/kubernetes-engine/docs/how-to/node-auto-provisioning: GPUs are asked
  for with the ``cloud.google.com/gke-accelerator`` node selector), so such a pod is
  judged against them.

GKE sets ``cloud.google.com/gke-accelerator``, ``gke-accelerator-count``,
``machine-family`` and ``node.kubernetes.io/instance-type`` on its nodes (the catalogue's
labels); other ``cloud.google.com/`` and topology labels are not modelled, so a pod's
selection on them is not judged (as Karpenter lets undefined well-known labels pass).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook.engine.resources.instancetypes import Allowance, Catalogue, InstanceType
from webhook.engine.resources.inventory import Node, Placement, Taint, UnboundedPool
from webhook.engine.resources.nodepools import (
    COMPUTE_CLASS_LABEL,
    Autoscaler,
    ComputeClassPriority,
    GKEComputeClass,
    gke_auto_provisioning,
)
from webhook.engine.scheduling.karpenter import (
    INSTANCE_TYPE,
    PoolType,
    Requirements,
    ResolvedPool,
    compatible,
    from_labels,
    pod_requirements,
    tolerates_all,
)

ACCELERATOR = "cloud.google.com/gke-accelerator"
MACHINE_FAMILY = "cloud.google.com/machine-family"
# Compute Engine series whose machines come with GPUs attached (cloud.google.com/compute/
# docs/gpus): one of them that the catalogue lacks may be any size. N1 takes attached
# GPUs only through a rule's ``gpu`` field; other series have none.
GPU_FAMILIES = frozenset({"a2", "a3", "a4", "a4x", "g2", "g4"})
PROVIDER = "GKE ComputeClass"


def _well_known(key: str) -> bool:
    return key.startswith(("cloud.google.com/", "topology.kubernetes.io/", "topology.gke.io/")) or (
        key in ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
    )


def _family(machine: str) -> str:
    return machine.split("-", 1)[0]


@dataclass(frozen=True, slots=True)
class _Listed:
    """The accelerators, machine families and machine types the catalogue's GCP rows name,
    read once per sizing rather than per rule or per pod."""

    accelerators: frozenset[str]
    families: frozenset[str]
    names: frozenset[str]

    @classmethod
    def of(cls, rows: Sequence[InstanceType]) -> _Listed:
        return cls(
            accelerators=frozenset(row.labels.get(ACCELERATOR, "") for row in rows),
            families=frozenset(row.labels.get(MACHINE_FAMILY, "") for row in rows),
            names=frozenset(row.name for row in rows),
        )


def priority_rows(
    rule: ComputeClassPriority, rows: Sequence[InstanceType], listed: _Listed
) -> tuple[tuple[InstanceType, ...], str]:
    """The listed machine types GKE may create for one rule, or why it cannot be known."""
    if rule.unsized:
        return (), rule.unsized
    if rule.gpu_type and rule.gpu_type not in listed.accelerators:
        return (), f"its GPU type {rule.gpu_type} is on machine types the catalogue lacks"
    if rule.machine_type and rule.machine_type not in listed.names:
        if rule.gpu_type or _family(rule.machine_type) in GPU_FAMILIES:
            return (), f"its machine type {rule.machine_type} is not in the catalogue"
        return (), ""  # a machine without GPUs: nothing for a GPU pod
    if rule.machine_family and rule.machine_family not in listed.families:
        if rule.gpu_type or rule.machine_family in GPU_FAMILIES:
            return (), f"its machine family {rule.machine_family} is not in the catalogue"
        return (), ""
    if not (rule.machine_type or rule.machine_family or rule.gpu_type):
        return (), "its rule leaves the machine type to GKE"
    chosen = tuple(
        row
        for row in rows
        if (not rule.machine_type or row.name == rule.machine_type)
        and (not rule.machine_family or row.labels.get(MACHINE_FAMILY) == rule.machine_family)
        and (not rule.gpu_type or row.labels.get(ACCELERATOR) == rule.gpu_type)
        and (not rule.gpu_count or row.gpu_count == rule.gpu_count)
        and row.vcpu >= rule.min_cores
        and row.memory_mib >= rule.min_memory_gb * 1024
    )
    return chosen, ""


def _admits(taints: tuple[Taint, ...], known: Requirements) -> Callable[[Placement], bool]:
    """Karpenter's compatibility over GKE's labels: keys the node is known to carry
    (``known``) must match, other GKE and topology keys are not judged, any other key the
    pod requires is a label such a node does not have."""

    def admits(placement: Placement) -> bool:
        if not tolerates_all(taints, placement.tolerations):
            return False
        for pod in pod_requirements(placement) or ():
            if compatible(known, pod, well_known=_well_known) is None:
                return True
        return False

    return admits


@dataclass(frozen=True, slots=True)
class GKESizing:
    resolved: tuple[ResolvedPool, ...] = ()
    autoscalers: tuple[Autoscaler, ...] = ()
    nodes: tuple[Node, ...] = ()
    unbounded: tuple[UnboundedPool, ...] = ()


def size_compute_classes(
    classes: Sequence[GKEComputeClass],
    *,
    catalogue: Catalogue,
    allowance: Allowance,
    declared: frozenset[str] = frozenset(),
) -> GKESizing:
    rows = catalogue.of("gcp")
    resolved: list[ResolvedPool] = []
    autoscalers: list[Autoscaler] = []
    nodes: list[Node] = []
    unbounded: list[UnboundedPool] = []
    for cls in classes:
        if cls.name in declared:
            continue
        chosen, why = _class_rows(cls, rows)
        if why:
            autoscaler = cls.autoscaler(why)
            autoscalers.append(autoscaler)
            unbounded.append(
                UnboundedPool(
                    cls.name,
                    PROVIDER,
                    autoscaler.reason,
                    _admits((), from_labels({COMPUTE_CLASS_LABEL: cls.name})),
                )
            )
            continue
        extra = {**cls.labels, COMPUTE_CLASS_LABEL: cls.name}
        types = sorted(
            (PoolType(row, allowance.allocatable(row), 1_000_000) for row in chosen),
            key=lambda t: (-t.instance.gpu_count, -t.instance.memory_mib, t.instance.name),
        )
        resolved.append(ResolvedPool(cls.name, PROVIDER, types=tuple(types)))
        for kind in types:
            row = kind.instance
            labels = {**row.labels, **extra}
            nodes.append(
                Node(
                    name=f"nodepool/{cls.name}/{row.name}",
                    labels=labels,
                    taints=cls.taints,
                    allocatable=dict(kind.allocatable),
                    capacity=row.capacity,
                    pool=cls.name,
                    count=kind.nodes,
                    admits=_admits(cls.taints, from_labels(labels)),
                )
            )
    return GKESizing(tuple(resolved), tuple(autoscalers), tuple(nodes), tuple(unbounded))


def _class_rows(
    cls: GKEComputeClass, rows: Sequence[InstanceType]
) -> tuple[tuple[InstanceType, ...], str]:
    if not rows:
        return (), "the catalogue lists no GCP machine types"
    if not cls.priorities:
        return (), "it has no priorities"
    if not cls.do_not_scale_up:
        return (), ("without whenUnsatisfiable: DoNotScaleUp, GKE may create nodes outside them")
    chosen: dict[str, InstanceType] = {}
    listed = _Listed.of(rows)
    for rule in cls.priorities:
        found, why = priority_rows(rule, rows, listed)
        if why:
            return (), why
        chosen.update((row.name, row) for row in found)
    return tuple(chosen.values()), ""


# --- node auto-provisioning -------------------------------------------------------------


def _class_selected(pod: Requirements) -> bool:
    """A pod that selects a ComputeClass gets that class's nodes only, not NAP's own."""
    req = pod.get(COMPUTE_CLASS_LABEL)
    return req is not None and not req.complement and bool(req.values)


def _pinned(pod: Requirements, listed: _Listed) -> bool:
    """Whether a pod's requirement set keeps NAP to listed machine types: it selects only
    accelerators, families or machine types that no unlisted machine has."""
    for key, values in (
        (ACCELERATOR, listed.accelerators),
        (MACHINE_FAMILY, listed.families),
        (INSTANCE_TYPE, listed.names),
    ):
        req = pod.get(key)
        # The accelerators listed come attached to listed machine types only (N1's
        # attachable T4, P4, V100 and P100 are not listed), so selecting one pins NAP too.
        if req is not None and not req.complement and req.values and req.values <= values:
            return True
    return False


def auto_provisioning(
    node_labels: Sequence[Mapping[str, str]],
    *,
    catalogue: Catalogue,
    allowance: Allowance,
    declared: frozenset[str],
) -> tuple[Autoscaler, list[Node], UnboundedPool] | None:
    """GKE node auto-provisioning, where the cluster's nodes show it and no declared
    ``NodePool`` describes it: the autoscaler, its nodes and its pool of unknown size
    (``nap_pools``)."""
    nap = gke_auto_provisioning(node_labels)
    if nap is None or nap.name in declared:
        return None
    return (nap, *nap_pools(nap, catalogue=catalogue, allowance=allowance))


def nap_pools(
    nap: Autoscaler, *, catalogue: Catalogue, allowance: Allowance
) -> tuple[list[Node], UnboundedPool]:
    """NAP as nodes of every listed machine type, for pods whose selection keeps NAP to
    them, and as a pool of unknown size for every other pod."""
    rows = catalogue.of("gcp")
    listed = _Listed.of(rows)
    nodes = [
        Node(
            name=f"nodepool/{nap.name}/{row.name}",
            labels=dict(row.labels),
            allocatable=allowance.allocatable(row),
            capacity=row.capacity,
            pool=nap.name,
            count=1_000_000,
            admits=_nap_admits(row, listed),
        )
        for row in rows
    ]

    def unpinned(placement: Placement) -> bool:
        sets = pod_requirements(placement)
        return sets is None or any(
            not _pinned(pod, listed) and not _class_selected(pod) for pod in sets
        )

    return nodes, UnboundedPool(nap.name, nap.kind, nap.reason, unpinned)


def _nap_admits(row: InstanceType, listed: _Listed) -> Callable[[Placement], bool]:
    reqs = from_labels(row.labels)

    def admits(placement: Placement) -> bool:
        for pod in pod_requirements(placement) or ():
            if (
                _pinned(pod, listed)
                and not _class_selected(pod)
                and compatible(reqs, pod, well_known=_well_known) is None
            ):
                return True
        return False

    return admits
