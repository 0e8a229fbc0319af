"""Nodes that could exist: autoscaler pools as the API describes them.

A cluster that scales GPU nodes from zero shows no GPU node until a pod asks for one. What
it does show are the autoscaler's own objects: Karpenter ``NodePool``s (requirements,
labels, taints and limits of the nodes it may create), the cluster-autoscaler's status
ConfigMap (node groups, some at size zero), GKE ``ComputeClass``es. This module reads them
from raw JSON into plain data; ``scheduling.karpenter`` decides which pods a pool can take.

Anything the webhook cannot size is kept as an ``Autoscaler`` with the reason, so that no
capacity check denies a pod that may land there (docs/inventory.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.resources.inventory import Taint, taints_from_json

KARPENTER_GROUP = "karpenter.sh"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CA_STATUS_NAME = "cluster-autoscaler-status"
CA_STATUS_NAMESPACE = "kube-system"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One ``spec.template.spec.requirements`` entry (a NodeSelectorRequirement)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None  # Karpenter's NodeSelectorRequirementWithMinValues


@dataclass(frozen=True, slots=True)
class KarpenterPool:
    """A ``karpenter.sh/v1`` NodePool: the nodes it may create, before any is sized."""

    name: str
    node_class: tuple[str, str, str]  # nodeClassRef group, kind, name
    requirements: tuple[NodeRequirement, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # spec.limits: cpu in millicores, memory in bytes, others as counts ("nodes" too).
    limits: Mapping[str, int] = field(default_factory=dict)
    # Why the object could not be read in full; a pool with a problem is never sized.
    problem: str = ""
    # status.resources: what its nodes hold now (as limits count it). Transient: it can
    # only delay a pod, never be a reason to deny one.
    usage: Mapping[str, int] = field(default_factory=dict)
    # spec.replicas: a static pool keeps this many nodes and creates none for pending pods
    # (kubernetes-sigs/karpenter provisioner.go NewScheduler filters static pools out).
    replicas: int | None = None

    @property
    def provider_group(self) -> str:
        return self.node_class[0]


def karpenter_pool_from_json(raw: Mapping[str, Any]) -> KarpenterPool:
    """Read a NodePool as the API server (or a file) gives it; tolerant of missing parts,
    which then make the pool unbounded rather than small."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    name = str((meta or {}).get("name", ""))
    spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
    template = (spec or {}).get("template") or {}
    tspec = template.get("spec") if isinstance(template, dict) else {}
    tspec = tspec if isinstance(tspec, dict) else {}
    tmeta = template.get("metadata") if isinstance(template, dict) else {}
    problems: list[str] = []
    ref = tspec.get("nodeClassRef") if isinstance(tspec.get("nodeClassRef"), dict) else {}
    node_class = (
        str((ref or {}).get("group", "")),
        str((ref or {}).get("kind", "")),
        str((ref or {}).get("name", "")),
    )
    if not node_class[0]:
        problems.append("spec.template.spec.nodeClassRef names no group")
    requirements: list[NodeRequirement] = []
    for index, entry in enumerate(tspec.get("requirements") or []):
        if not isinstance(entry, dict) or not entry.get("key") or not entry.get("operator"):
            problems.append(f"spec.template.spec.requirements[{index}] is malformed")
            continue
        values = entry.get("values") or []
        least = entry.get("minValues")
        requirements.append(
            NodeRequirement(
                key=str(entry["key"]),
                operator=str(entry["operator"]),
                values=tuple(str(v) for v in values) if isinstance(values, list) else (),
                min_values=least
                if isinstance(least, int) and not isinstance(least, bool)
                else None,
            )
        )
    labels = (tmeta or {}).get("labels") if isinstance(tmeta, dict) else None
    limits = _amounts((spec or {}).get("limits") or {}, where="spec.limits", problems=problems)
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    resources = (status or {}).get("resources")
    # Usage only ever adds a warning: an unreadable entry adds none, and is no problem.
    usage = _amounts(
        resources if isinstance(resources, dict) else {}, where="status.resources", problems=[]
    )
    return KarpenterPool(
        name=name,
        node_class=node_class,
        requirements=tuple(requirements),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        # startupTaints are temporary: Karpenter does not ask pods to tolerate them.
        taints=taints_from_json(tspec.get("taints")),
        limits=limits,
        problem="; ".join(problems),
        usage=usage,
        replicas=_replicas((spec or {}).get("replicas")),
    )


def _amounts(raw: Mapping[str, Any], *, where: str, problems: list[str]) -> dict[str, int]:
    """Resource quantities as limits count them (CPU in millicores); an entry that is not
    a quantity is left out and said in ``problems``."""
    amounts: dict[str, int] = {}
    for resource, quantity in raw.items():
        try:
            amount = parse_quantity(quantity)
        except QuantityError:
            problems.append(f"{where}.{resource}: {quantity!r} is not a quantity")
            continue
        amounts[str(resource)] = int(amount * 1000) if resource == "cpu" else int(amount)
    return amounts


def _replicas(raw: object) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None


@dataclass(frozen=True, slots=True)
class Autoscaler:
    """Nodes an autoscaler may bring that the API does not describe well enough to size.

    ``selector``: labels a pod must select to get such a node ({} when any pod may)."""

    kind: str  # "cluster-autoscaler", "GKE ComputeClass", "GKE node auto-provisioning"
    name: str
    reason: str
    selector: Mapping[str, str] = field(default_factory=dict)


def cluster_autoscaler_groups(status: object) -> tuple[Autoscaler, ...]:
    """Node groups of the cluster-autoscaler's status that have no node now but may grow:
    their nodes' shape is known to the autoscaler (and its cloud) only.

    ``status`` is the ConfigMap's ``data.status`` as the shell parsed it: a mapping for the
    YAML written since cluster-autoscaler 1.30 (``ClusterAutoscalerStatus`` in
    kubernetes/autoscaler cluster-autoscaler/clusterstate/api/types.go: ``nodeGroups[]``
    with ``name`` and ``health.nodeCounts.registered.total``, ``cloudProviderTarget``,
    ``minSize``, ``maxSize``), or the text older versions write, with lines such as
    ``Name: ng-1`` and ``Health: Healthy (ready=0 ... registered=0 ... maxSize=5))``."""
    if isinstance(status, Mapping) and ("nodeGroups" in status or "clusterWide" in status):
        # An autoscaler without node groups has no nodeGroups: it can create no node.
        return tuple(_yaml_groups(status.get("nodeGroups") or []))
    if isinstance(status, str) and status.strip():
        return tuple(_text_groups(status))
    return (
        Autoscaler(
            "cluster-autoscaler",
            "cluster-autoscaler",
            "its status ConfigMap holds no status the webhook can read: node groups unknown",
        ),
    )


def _yaml_groups(groups: Iterable[Any]) -> Iterable[Autoscaler]:
    for group in groups:
        if not isinstance(group, dict):
            continue
        health = group.get("health") if isinstance(group.get("health"), dict) else {}
        counts = (health or {}).get("nodeCounts") or {}
        registered = (counts.get("registered") or {}) if isinstance(counts, dict) else {}
        total = registered.get("total", 0) if isinstance(registered, dict) else 0
        max_size = (health or {}).get("maxSize", 1)
        if _int(total) == 0 and _int(max_size) != 0:
            yield _empty_group(str(group.get("name", "")), max_size)


def _text_groups(status: str) -> Iterable[Autoscaler]:
    """The node groups of the text report: ``GetReadableString`` in kubernetes/autoscaler
    cluster-autoscaler/clusterstate/api/utils.go (before 1.30; read at 1.29.5) writes
    ``Cluster-wide:``, then, when there are node groups, ``NodeGroups:`` and per group a
    ``Name:`` line (its ProviderID, which may be empty) and a ``Health:`` line whose message
    ``buildHealthStatusNodeGroup`` (clusterstate/clusterstate.go) words as ``ready=.. ...
    registered=.. ... cloudProviderTarget=.. (minSize=.., maxSize=..)``.

    A group whose counts cannot be read, or a report that is not this text at all, is a
    node group of unknown size: an autoscaler that is there but unreadable may still
    bring a GPU node, so it is never taken for no autoscaler. So is a report that is a
    message in place of that text: ``WriteStatusConfigMap`` (clusterstate/utils/status.go)
    writes ``Initializing`` when the autoscaler starts (``NewStatusMapRecorder``), and
    ``OnEmptyCluster`` (processors/actionablecluster) writes ``Cluster has no ready
    nodes.`` while it waits for nodes; neither lists the node groups it has."""
    in_groups = False
    name = ""
    groups = 0
    for line in status.splitlines():
        text = line.strip()
        if text == "NodeGroups:":
            in_groups = True
        elif not in_groups:
            continue
        elif text.startswith("Name:"):
            name = text.removeprefix("Name:").strip()
        elif text.startswith("Health:"):
            groups += 1
            group = name or f"(unnamed node group {groups})"
            fields = dict(
                part.split("=", 1)
                for part in text.replace("(", " ").replace(")", " ").replace(",", " ").split()
                if "=" in part
            )
            registered, max_size = _int(fields.get("registered")), _int(fields.get("maxSize"))
            if registered < 0 or max_size < 0:
                yield Autoscaler(
                    "cluster-autoscaler",
                    group,
                    "its status line gives no node count or maximum the webhook can read",
                )
            elif registered == 0 and max_size:
                yield _empty_group(group, max_size)
            name = ""
    if not in_groups and (reason := _unlisted_groups(status)):
        yield Autoscaler("cluster-autoscaler", "cluster-autoscaler", reason)


def _unlisted_groups(status: str) -> str:
    """Why a text report without ``NodeGroups:`` lists no node group, where that does not
    mean the autoscaler has none: only ``GetReadableString``'s report (``Cluster-wide:``
    first) leaves the section out for an autoscaler without node groups."""
    lines = [line.strip() for line in status.strip().splitlines()]
    if lines[0].startswith("Cluster-autoscaler status at"):
        lines = lines[1:]
    elif lines[0] != "Cluster-wide:":
        return "its status ConfigMap is in no format the webhook can read: node groups unknown"
    if "Cluster-wide:" in lines:
        return ""
    said = next((f'says "{line[:80]}"' for line in lines if line), "holds its header only")
    return f"its status {said}, not its node groups: node groups unknown"


def _empty_group(name: str, max_size: object) -> Autoscaler:
    return Autoscaler(
        "cluster-autoscaler",
        name,
        f"node group at size 0 (max {max_size}): its nodes' shape is not in the API",
    )


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return -1


def node_overlay(raw: Mapping[str, Any]) -> Autoscaler | None:
    """A Karpenter ``NodeOverlay`` (karpenter.sh/v1alpha1, kubernetes-sigs/karpenter
    pkg/apis/v1alpha1/nodeoverlay.go) that adds ``spec.capacity`` to the instance types its
    requirements match: Karpenter then launches them for resources the catalogue does not
    list (a MIG profile, hugepages), so pools are not sized without it. One that only
    adjusts prices changes nothing the webhook judges (None)."""
    spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
    capacity = (spec or {}).get("capacity")
    if not isinstance(capacity, dict) or not capacity:
        return None
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    name = str((meta or {}).get("name", ""))
    added = ", ".join(sorted(str(k) for k in capacity))
    return Autoscaler(
        "Karpenter NodeOverlay",
        name,
        f"it adds {added} to instance types, which the webhook does not apply",
    )


@dataclass(frozen=True, slots=True)
class ComputeClassPriority:
    """One ``spec.priorities`` rule of a GKE ComputeClass, as far as it shapes a node
    (cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass): ``unsized``
    says why GKE's choice for it is not knowable (a node pool list, a TPU, a rule that
    leaves the machine to GKE)."""

    machine_family: str = ""
    machine_type: str = ""
    gpu_type: str = ""
    gpu_count: int = 0  # 0: any count
    min_cores: int = 0
    min_memory_gb: int = 0
    unsized: str = ""


@dataclass(frozen=True, slots=True)
class GKEComputeClass:
    """A GKE ``ComputeClass``: the nodes GKE creates for pods that select it."""

    name: str
    priorities: tuple[ComputeClassPriority, ...] = ()
    # Only ``whenUnsatisfiable: DoNotScaleUp`` keeps GKE to the priorities; otherwise it
    # may create nodes of its own choosing when none can be had.
    do_not_scale_up: bool = False
    auto_creation: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)  # nodePoolConfig.nodeLabels
    taints: tuple[Taint, ...] = ()  # nodePoolConfig.taints

    def autoscaler(self, why: str) -> Autoscaler:
        how = "creates node pools" if self.auto_creation else "scales its node pools"
        return Autoscaler(
            "GKE ComputeClass",
            self.name,
            f"GKE {how} for it from its priorities, which the webhook cannot size: {why}",
            selector={COMPUTE_CLASS_LABEL: self.name},
        )


_SHAPING = {"machineFamily", "machineType", "gpu", "minCores", "minMemoryGb"}


def compute_class_from_json(raw: Mapping[str, Any]) -> GKEComputeClass:
    """Read a ComputeClass tolerantly: a part that cannot be read makes its rule unsized."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
    spec = spec or {}
    priorities: list[ComputeClassPriority] = []
    for index, rule in enumerate(spec.get("priorities") or []):
        priorities.append(_priority(rule, index))
    config = spec.get("nodePoolConfig") if isinstance(spec.get("nodePoolConfig"), dict) else {}
    labels = (config or {}).get("nodeLabels")
    auto = spec.get("nodePoolAutoCreation")
    return GKEComputeClass(
        name=str((meta or {}).get("name", "")),
        priorities=tuple(priorities),
        do_not_scale_up=spec.get("whenUnsatisfiable") == "DoNotScaleUp",
        auto_creation=bool(isinstance(auto, dict) and auto.get("enabled")),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        taints=taints_from_json((config or {}).get("taints")),
    )


def _priority(rule: object, index: int) -> ComputeClassPriority:
    where = f"priorities[{index}]"
    if not isinstance(rule, dict):
        return ComputeClassPriority(unsized=f"{where} is malformed")
    for key, what in (("nodepools", "names node pools"), ("tpu", "asks for TPUs")):
        if rule.get(key):
            return ComputeClassPriority(
                unsized=f"{where} {what}, whose machines the API does not show"
            )
    if not _SHAPING & rule.keys():
        return ComputeClassPriority(unsized=f"{where} leaves the machine type to GKE")
    gpu = rule.get("gpu") if isinstance(rule.get("gpu"), dict) else {}
    try:
        return ComputeClassPriority(
            machine_family=str(rule.get("machineFamily") or ""),
            machine_type=str(rule.get("machineType") or ""),
            gpu_type=str((gpu or {}).get("type") or ""),
            gpu_count=int((gpu or {}).get("count") or 0),
            min_cores=int(rule.get("minCores") or 0),
            min_memory_gb=int(rule.get("minMemoryGb") or 0),
        )
    except (TypeError, ValueError):
        return ComputeClassPriority(unsized=f"{where} has a count that is not a number")


@dataclass(frozen=True, slots=True)
class PoolInventory:
    """Everything the API says about nodes that could exist, as read (not yet sized).

    ``node_classes``: (group, kind, name) of the node classes the reader could list; None
    when it could not read them (then a pool whose class is missing is not suspected)."""

    pools: tuple[KarpenterPool, ...] = ()
    autoscalers: tuple[Autoscaler, ...] = ()
    node_classes: frozenset[tuple[str, str, str]] | None = None
    compute_classes: tuple[GKEComputeClass, ...] = ()
    # Instance types of each EC2NodeClass's active capacity reservations
    # (status.capacityReservations), for the node classes whose status was read.
    reservations: Mapping[tuple[str, str, str], frozenset[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.pools or self.autoscalers or self.compute_classes)


NO_POOLS = PoolInventory()


def gke_auto_provisioning(node_labels: Sequence[Mapping[str, str]]) -> Autoscaler | None:
    """GKE node auto-provisioning names the node pools it creates ``nap-...``
    (cloud.google.com/kubernetes-engine/docs/how-to/node-auto-provisioning): a node of
    such a pool shows the cluster may create more pools of any shape it allows."""
    for labels in node_labels:
        pool = labels.get("cloud.google.com/gke-nodepool", "")
        if pool.startswith("nap-"):
            return Autoscaler(
                "GKE node auto-provisioning",
                "node auto-provisioning",
                f"node pool {pool} was auto-provisioned: GKE may create pools of any "
                "machine type its limits allow (a pod that selects a catalogued accelerator, "
                "machine family or type is judged against those machine types)",
            )
    return None
