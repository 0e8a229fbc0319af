"""The capacity model against the scheduler's own rules, on random pods and inventories.

The webhook must admit a GPU pod exactly when some node passes the scheduler's filters for
it. The reference below judges each node on its own, written straight from the Kubernetes
scheduler's filter plugins (kubernetes v1.36, ``pkg/scheduler/framework/plugins``), and
shares no code with the engine:

- **NodeUnschedulable** (``nodeunschedulable/node_unschedulable.go``, ``Filter``): a node
  with ``spec.unschedulable`` is rejected unless the pod tolerates the taint
  ``node.kubernetes.io/unschedulable:NoSchedule`` (``TolerationsTolerateTaint``).
- **NodeAffinity** (``nodeaffinity/node_affinity.go``, ``Filter`` with
  ``GetRequiredNodeAffinity(pod).Match(node)``): every ``nodeSelector`` label equal, and,
  if the pod has required node affinity, at least one ``nodeSelectorTerm`` whose
  expressions all hold (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` on
  integers; an empty term matches nothing).
- **TaintToleration** (``tainttoleration/taint_toleration.go``, ``Filter`` with
  ``FindMatchingUntoleratedTaint`` and ``DoNotScheduleTaintsFilterFunc``): every
  ``NoSchedule`` and ``NoExecute`` taint is tolerated (``Toleration.ToleratesTaint``: an
  empty effect matches every effect, an empty key with ``Exists`` every key, operator
  ``Equal`` by default compares values).
- **NodeResourcesFit** (``noderesources/fit.go``, ``fitsRequest`` on an empty node): the
  pod's effective request (``computePodResourceRequest``, i.e. ``PodRequests`` in
  ``k8s.io/component-helpers/resource``: app containers plus native sidecars, or the
  largest init container plus the sidecars before it, plus ``spec.overhead``; a missing
  request is the limit, as ``SetDefaults_Pod`` makes it) must not exceed allocatable for
  CPU and memory when requested, and for every extended resource with a non-zero request.

One rule is the webhook's own, documented in ``webhook/engine/fit.py``: on nodes whose GPUs
are shared (time-slicing or MPS), no container may ask for more slots than the node has
physical GPUs. The reference knows each node's configuration from how it was generated; the
webhook reads it from the node's labels, so this also checks that reading.

Condition taints (``node.kubernetes.io/not-ready`` and the like) are not generated: the
webhook deliberately ignores them, since the scheduler only waits for them to go.
The pod judged is the one the webhook lets through: after its mutations (tolerations,
memory limits, which Kubernetes copies into unset requests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from webhook.engine.evaluate import InventoryView, Request, evaluate
from webhook.engine.inventory import Inventory, Placement, node_from_json
from webhook.engine.policy import DocumentRef, Policy, RuleDocument, compile_policy

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_SMALL = "nvidia.com/mig-1g.10gb"
MIG_LARGE = "nvidia.com/mig-3g.40gb"
GPU_NAMES = [GPU, SHARED, MIG_SMALL, MIG_LARGE]
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
CAPACITY_CHECKS = {"capacity", "unknownResource"}

# --- reference: quantities and the pod's request, straight from the definitions ------------

_SUFFIX = {"m": Fraction(1, 1000), "": Fraction(1), "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(text: object) -> Fraction:
    raw = str(text)
    for suffix in ("Ki", "Mi", "Gi", "m"):
        if raw.endswith(suffix):
            return Fraction(raw[: -len(suffix)]) * _SUFFIX[suffix]
    return Fraction(raw)


def request_of(container: dict[str, Any], name: str) -> Fraction:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get(name)
    if value is None:
        value = (resources.get("limits") or {}).get(name)
    return quantity(value) if value is not None else Fraction(0)


def pod_request(spec: dict[str, Any], name: str) -> Fraction:
    app = sum((request_of(c, name) for c in spec.get("containers") or []), Fraction(0))
    sidecars = init = Fraction(0)
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars += request_of(c, name)
            app += request_of(c, name)
            init = max(init, sidecars)
        else:
            init = max(init, request_of(c, name) + sidecars)
    total = max(app, init)
    overhead = (spec.get("overhead") or {}).get(name)
    return total + (quantity(overhead) if overhead is not None else 0)


# --- reference: the scheduler's filters on one node ----------------------------------------


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if key == "" and operator == "Exists":
        return True
    if key != taint["key"]:
        return False
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def expression_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if key not in labels or len(values) != 1:
        return False
    try:
        have, want = int(labels[key]), int(values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def affinity_matches(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    return any(
        term.get("matchExpressions")
        and all(expression_holds(e, labels) for e in term["matchExpressions"])
        for term in required.get("nodeSelectorTerms") or []
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
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }


def node_admits(node: GeneratedNode, spec: dict[str, Any]) -> bool:
    """NodeUnschedulable, NodeAffinity and TaintToleration: may the pod land here at all."""
    tolerations = spec.get("tolerations") or []
    if node.unschedulable and not any(
        tolerates(t, {"key": UNSCHEDULABLE, "effect": "NoSchedule"}) for t in tolerations
    ):
        return False
    if not affinity_matches(spec, node.labels):
        return False
    return all(
        taint["effect"] not in ("NoSchedule", "NoExecute")
        or any(tolerates(t, taint) for t in tolerations)
        for taint in node.taints
    )


def node_passes(node: GeneratedNode, spec: dict[str, Any]) -> bool:
    return node_admits(node, spec) and node_holds(node, spec)


def node_holds(node: GeneratedNode, spec: dict[str, Any]) -> bool:
    """NodeResourcesFit on an empty node, and the webhook's physical-GPU rule."""
    names = {"cpu", "memory"} | {
        n
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        for section in ("requests", "limits")
        for n in ((c.get("resources") or {}).get(section) or {})
        if n in GPU_NAMES
    }
    for name in names:
        need = pod_request(spec, name)
        if need == 0:
            continue
        have = node.allocatable.get(name)
        if have is None:
            return False
        if need > quantity(have):
            return False
    if node.shared is not None:
        resource, physical = node.shared
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            if request_of(c, resource) > physical:
                return False
    return True


# --- generated inventories ----------------------------------------------------------------

# Label sets as GPU feature discovery writes them: see tests/cases/_inventories/*.yaml for
# the sources (NVIDIA/k8s-device-plugin internal/lm).
CPU_AMOUNTS = ["30", "62", "190"]
MEMORY_AMOUNTS = ["120Gi", "240Gi", "1000Gi"]


@st.composite
def gpu_node(draw: st.DrawFn, index: int) -> GeneratedNode:
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
    return GeneratedNode(name, labels, allocatable, taints, cordoned, shared)


@st.composite
def inventories(draw: st.DrawFn) -> list[GeneratedNode]:
    count = draw(st.integers(2, 6))
    nodes = [draw(gpu_node(i)) for i in range(count)]
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


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=inventories(), pod=pods(), tolerate=st.booleans(), memory=memory_rules)
def test_a_gpu_pod_is_admitted_exactly_when_some_node_passes_the_schedulers_filters(
    nodes: list[GeneratedNode],
    pod: dict[str, Any],
    tolerate: bool,
    memory: dict[str, Any] | None,
) -> None:
    assume(any(pod_request(pod["spec"], name) for name in GPU_NAMES))
    inventory = Inventory([node_from_json(n.as_json()) for n in nodes])

    decision = evaluate(
        Request(pod),
        policy=policy(tolerate=tolerate, memory=memory),
        inventory=InventoryView(inventory),
    )

    assert decision.mutated is not None
    spec = dict(decision.mutated)["spec"]
    fits = [n.name for n in nodes if node_passes(n, spec)]
    denied = [f for f in decision.findings if f.check in CAPACITY_CHECKS and f.action == "deny"]
    assert not [f for f in decision.findings if f.check == "memoryLimit" and f.action == "deny"]
    assert bool(fits) != bool(denied), (fits, [f.message for f in decision.findings])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=inventories(), pod=pods())
def test_the_nodes_a_pod_can_land_on_are_the_ones_the_schedulers_filters_keep(
    nodes: list[GeneratedNode], pod: dict[str, Any]
) -> None:
    """``Inventory.placeable``, the filter other capacity checks build on, node by node."""
    inventory = Inventory([node_from_json(n.as_json()) for n in nodes])

    shapes = inventory.placeable(Placement.of(pod["spec"]))

    placeable = {member.name for shape in shapes for member in shape.members}
    assert placeable == {n.name for n in nodes if node_admits(n, pod["spec"])}
