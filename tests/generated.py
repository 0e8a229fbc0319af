"""Random GPU clusters and pods for the differential tests (tests/engine/evaluation/test_fit_differential.py
judges the capacity model with them, tests/reports/test_explain_differential.py ``explain``).

Nodes carry the label sets GPU feature discovery writes, and the ground truth a reference
needs (``GeneratedNode.shared``); pods mix several GPU resources, init containers and native
sidecars, CPU and memory, selectors, affinity, tolerations and overhead; ``policy`` adds the
webhook's tolerations and memory limits, with the checks that do not judge capacity audited.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_SMALL = "nvidia.com/mig-1g.10gb"
MIG_LARGE = "nvidia.com/mig-3g.40gb"
GPU_NAMES = [GPU, SHARED, MIG_SMALL, MIG_LARGE]
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
# Taints the node lifecycle controller sets for a bad condition (TaintNodesByCondition).
CONDITION_TAINTS = {
    "not-ready-tainted": "node.kubernetes.io/not-ready",
    "memory-pressure": "node.kubernetes.io/memory-pressure",
}
CAPACITY_CHECKS = {"capacity", "unknownResource"}


def asks_for_gpu(spec: dict[str, Any]) -> bool:
    """Whether some container names a GPU resource (generated amounts are never zero)."""
    return any(
        name in GPU_NAMES
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        for section in ("requests", "limits")
        for name in ((c.get("resources") or {}).get(section) or {})
    )


@dataclass
class GeneratedNode:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)
    unschedulable: bool = False
    # Ground truth the reference uses: the shared resource and the physical GPUs behind it.
    shared: tuple[str, int] | None = None
    ready: bool = True

    def as_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"taints": self.taints}
        if self.unschedulable:
            spec["unschedulable"] = True
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": spec,
            "status": {
                "allocatable": self.allocatable,
                "capacity": self.allocatable,
                "conditions": [{"type": "Ready", "status": str(self.ready)}],
            },
        }


# --- generated inventories ----------------------------------------------------------------

# Label sets as GPU feature discovery writes them: see tests/cases/_inventories/*.yaml for
# the sources (NVIDIA/k8s-device-plugin internal/lm).
CPU_AMOUNTS = ["30", "62", "190"]
MEMORY_AMOUNTS = ["120Gi", "240Gi", "1000Gi"]


@st.composite
def gpu_node(draw: st.DrawFn, index: int, *, conditions: bool = False) -> GeneratedNode:
    """A GPU node; with ``conditions``, sometimes one whose condition is bad: not ready
    (with or without the taint the node lifecycle controller adds), or under pressure."""
    name = f"node-{index}"
    kind = draw(st.sampled_from(["plain", "timesliced", "renamed", "mps", "mig-single", "mixed"]))
    zone = draw(st.sampled_from(["a", "b"]))
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}
    allocatable = {
        "cpu": draw(st.sampled_from(CPU_AMOUNTS)),
        "memory": draw(st.sampled_from(MEMORY_AMOUNTS)),
        "pods": "110",
    }
    shared: tuple[str, int] | None = None
    if kind != "cpu":
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.memory"] = draw(st.sampled_from(["15360", "40960", "81920"]))
    physical = draw(st.integers(1, 8))
    replicas = draw(st.integers(2, 4))
    if kind == "plain":
        labels |= {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "nvidia.com/gpu.count": str(physical),
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
        }
        allocatable[GPU] = str(physical)
    elif kind in ("timesliced", "renamed", "mps"):
        strategy = "mps" if kind == "mps" else "time-slicing"
        renamed = kind == "renamed"
        labels |= {
            "nvidia.com/gpu.product": "Tesla-T4" if renamed else "Tesla-T4-SHARED",
            "nvidia.com/gpu.count": str(physical),
            "nvidia.com/gpu.replicas": str(replicas),
            "nvidia.com/gpu.sharing-strategy": strategy,
        }
        resource = SHARED if renamed else GPU
        allocatable[resource] = str(physical * replicas)
        shared = (resource, physical)
    elif kind == "mig-single":
        labels |= {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
            "nvidia.com/gpu.count": str(physical * 7),
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
        }
        allocatable[GPU] = str(physical * 7)
    else:
        labels |= {
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": str(physical),
            f"{MIG_SMALL}.count": str(physical * 3),
            f"{MIG_LARGE}.count": str(physical),
        }
        allocatable[MIG_SMALL] = str(physical * 3)
        allocatable[MIG_LARGE] = str(physical)
        whole = draw(st.integers(0, 2))
        if whole:
            allocatable[GPU] = str(whole)
    taints = []
    if draw(st.integers(0, 2)) == 0:
        taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
    if draw(st.integers(0, 6)) == 0:
        taints.append({"key": "dedicated", "value": "ml", "effect": "NoExecute"})
    if draw(st.integers(0, 4)) == 0:
        taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
    cordoned = draw(st.integers(0, 4)) == 0
    if cordoned:
        taints.append({"key": UNSCHEDULABLE, "value": "", "effect": "NoSchedule"})
    ready = True
    if conditions and draw(st.integers(0, 3)) == 0:
        condition = draw(st.sampled_from(["not-ready", "not-ready-tainted", "memory-pressure"]))
        ready = condition == "memory-pressure"
        if condition != "not-ready":
            key = CONDITION_TAINTS[condition]
            taints.append({"key": key, "value": "", "effect": "NoSchedule"})
    return GeneratedNode(name, labels, allocatable, taints, cordoned, shared, ready)


@st.composite
def inventories(draw: st.DrawFn, *, conditions: bool = False) -> list[GeneratedNode]:
    count = draw(st.integers(2, 6))
    nodes = [draw(gpu_node(i, conditions=conditions)) for i in range(count)]
    if draw(st.booleans()):
        nodes.append(
            GeneratedNode(
                "cpu-0",
                {"kubernetes.io/hostname": "cpu-0", "topology.kubernetes.io/zone": "a"},
                {"cpu": "62", "memory": "240Gi", "pods": "110"},
            )
        )
    return nodes


# --- generated pods -----------------------------------------------------------------------


@st.composite
def container(draw: st.DrawFn, name: str, *, init: bool) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for gpu in draw(GPU_SETS if not init else st.sampled_from([[], [], [GPU]])):
        limits[gpu] = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    cpu = draw(st.sampled_from([None, None, None, "500m", "4", "16", "200"]))
    if cpu is not None:
        (requests if draw(st.booleans()) else limits)["cpu"] = cpu
    memory = draw(st.sampled_from([None, None, "1Gi", "16Gi", "64Gi", "512Gi"]))
    if memory is not None:
        (requests if draw(st.booleans()) else limits)["memory"] = memory
    body: dict[str, Any] = {"name": name, "image": "cuda:12"}
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if resources:
        body["resources"] = resources
    if init and draw(st.booleans()):
        body["restartPolicy"] = "Always"
    return body


# Mostly one GPU resource, as real pods ask; sometimes two, which no single node may offer.
GPU_SETS = st.sampled_from(
    [[], [GPU], [GPU], [GPU], [SHARED], [MIG_SMALL], [MIG_LARGE], [GPU, MIG_SMALL], [GPU, SHARED]]
)
TOLERATIONS = [
    {"operator": "Exists"},
    {"key": UNSCHEDULABLE, "operator": "Exists"},
    {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "ml"},
    {"key": "dedicated", "value": "other", "effect": "NoExecute"},
    {"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
]
TERMS = [
    {
        "matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
        ]
    },
    {
        "matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["Tesla-T4-SHARED"]}
        ]
    },
    {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]},
    {"matchExpressions": [{"key": "nvidia.com/mig.strategy", "operator": "DoesNotExist"}]},
]


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [draw(container(f"c{i}", init=False)) for i in range(draw(st.integers(1, 2)))]
    }
    inits = draw(st.integers(0, 2))
    if inits:
        spec["initContainers"] = [draw(container(f"i{i}", init=True)) for i in range(inits)]
    if draw(st.integers(0, 2)):
        spec["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), min_size=1, max_size=3))
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": draw(st.sampled_from(["a", "b"]))}
    if draw(st.integers(0, 3)) == 0:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": draw(
                        st.lists(st.sampled_from(TERMS), min_size=1, max_size=2)
                    )
                }
            }
        }
    if draw(st.integers(0, 4)) == 0:
        spec["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    return json.loads(json.dumps(pod))  # no shared subtrees, as from the API server


# --- policies: the checks that do not judge capacity are audited ---------------------------


def _doc(kind: str, name: str, spec: dict[str, Any]) -> RuleDocument:
    body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": kind, "metadata": {"name": name}}
    return RuleDocument(DocumentRef("differential", 1, kind, name), {**body, "spec": spec})


def policy(*, tolerate: bool, memory: dict[str, Any] | None) -> Policy:
    docs = [
        _doc(
            "GPUSettings",
            "settings",
            {"checks": {"sharedGPURequest": "audit", "multipleMIGDevices": "audit"}},
        )
    ]
    mutate: dict[str, Any] = {}
    if tolerate:
        mutate["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    if memory is not None:
        mutate["memoryLimit"] = memory
    if mutate:
        docs.append(_doc("GPUPolicy", "mutations", {"mutate": mutate}))
    return compile_policy(docs)


memory_rules = st.sampled_from(
    [
        None,
        {"perGPU": "16Gi"},
        {"perGPU": "300Gi"},
        {"perGPU": "300Gi", "whenTooLarge": "skip"},
        {"fixed": "2000Gi"},
        {"inventoryShare": True},
    ]
)
