"""Rules keyed on GPU labels against what the scheduler could give a pod, on random DRA-only
and mixed clusters (issue 31).

Clusters: GPU nodes served by NVIDIA's DRA driver (no nvidia.com/gpu in allocatable, a
ResourceSlice per node, one or several products on one node, as cmd/gpu-kubelet-plugin
publishes them), some of them still labelled by GPU feature discovery, and, in mixed
clusters, nodes of the device plugin labelled by GFD (ClusterPolicy beside GPUCluster). The
class gpu.nvidia.com serves nvidia.com/gpu (KEP-5004). Policies: the two examples of
``rules/90-examples.yaml`` with random values (a product affinity with or without
``allowedProducts``; a ``gpuMemory`` affinity with or without ``minGPUMemory``), in
namespace vision. Pods: a plain nvidia.com/gpu, or a claim template (no selector, a product,
a memory floor).

The reference shares no code with the engine. What the scheduler may give the pod that the
webhook lets through, on each node its mutated affinity and tolerations admit:

- a plain nvidia.com/gpu on a device-plugin node: that node's GPUs, if it has enough
  (NodeResourcesFit);
- a plain nvidia.com/gpu on a DRA node: any device of the class, if the node has enough
  (the scheduler's claim takes the class's selectors only: ``createResourceRequestAndMappings``
  in kubernetes ``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``);
- a claim: any device its selector matches, if the node has enough (the allocator's search
  is exhaustive, so every matching device may be taken).

Then: every admitted pod's possible devices are allowed by the policy; a pod is admitted
wherever the webhook can keep it on allowed devices (a claim whose every device is allowed;
a plain GPU that the labelled nodes the rule admits hold, or that unlabelled DRA nodes hold
with no refused device there or on those labelled nodes: the webhook steers by the rule's
own label requirement, with or without a label-absent alternative); and on DRA-only clusters a plain GPU pod that is denied while allowed devices could
hold it is told the ResourceClaimTemplate to write, which, written, is admitted; and on mixed
clusters so is one that allowed DRA devices of one node hold (the labelled nodes lacking
room, or the DRA nodes holding refused devices too, shared GPUs among them), unless labelled
device-plugin nodes the rule admits hold it, where the denial names them to select.

MIG devices (the last test): DRA nodes with whole GPUs and MIG devices, GFD-labelled or not,
under rules keyed on GFD's per-profile MIG labels or ``-MIG-<profile>`` products: admitted
claims get only allowed devices, a claim whose every device is allowed is admitted, and a
denied claim is told the selector that, added, gets it admitted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.dra_inventory import GPU_CLASS
from tests.engine.evaluation.test_fit_differential import (
    affinity_matches,
    node_slice,
    tolerates,
)
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, node_from_json

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
# NVML's names (what the DRA driver publishes) and memory in MiB.
PRODUCTS = [
    ("NVIDIA A100-SXM4-80GB", 81920),
    ("NVIDIA H100 80GB HBM3", 81559),
    ("NVIDIA L4", 23034),
    ("NVIDIA L40S", 46068),
]
NAMESPACE = "vision"
CLASS = {**GPU_CLASS, "spec": {**GPU_CLASS["spec"], "extendedResourceName": GPU}}


def label(product: int) -> str:
    """GFD's product label: NVML's name with dashes for spaces (internal/lm/resource.go)."""
    return PRODUCTS[product][0].replace(" ", "-")


# --- clusters --------------------------------------------------------------------------------


@dataclass
class GPUNode:
    name: str
    kind: str  # "dra" (no GFD labels), "dra-labelled", "plugin"
    devices: list[int]  # product index per GPU
    # DRA devices that allow multiple allocations (consumable capacity): part of a GPU.
    shared: frozenset[int] = frozenset()

    @property
    def labels(self) -> dict[str, str]:
        labels = {"kubernetes.io/hostname": self.name, "nvidia.com/gpu.present": "true"}
        if self.kind != "dra":
            labels[PRODUCT] = label(self.devices[0])
            labels[MEMORY] = str(PRODUCTS[self.devices[0]][1])
        return labels

    def as_json(self) -> dict[str, Any]:
        allocatable = {"cpu": "63", "memory": "500Gi", "pods": "110"}
        if self.kind == "plugin":
            allocatable[GPU] = str(len(self.devices))
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": {"taints": [TAINT]},
            "status": {
                "allocatable": allocatable,
                "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def slice(self) -> dict[str, Any]:
        return node_slice(
            self.name,
            [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": f"GPU-{self.name}-{i}"},
                        "productName": {"string": PRODUCTS[p][0]},
                    },
                    "capacity": {"memory": {"value": f"{PRODUCTS[p][1]}Mi"}},
                    **({"allowMultipleAllocations": True} if i in self.shared else {}),
                }
                for i, p in enumerate(self.devices)
            ],
        )


@st.composite
def gpu_node(draw: st.DrawFn, index: int, *, mixed: bool) -> GPUNode:
    kinds = ["dra", "dra", "dra-labelled", "plugin"] if mixed else ["dra", "dra", "dra-labelled"]
    kind = draw(st.sampled_from(kinds))
    devices = draw(st.lists(st.integers(0, len(PRODUCTS) - 1), min_size=1, max_size=4))
    if kind != "dra":  # GFD labels a node of one product
        devices = [devices[0]] * len(devices)
    shared: frozenset[int] = frozenset()
    if kind != "plugin":
        shared = draw(st.frozensets(st.integers(0, len(devices) - 1), max_size=1))
    return GPUNode(f"gpu-{index}", kind, devices, shared)


@st.composite
def clusters(draw: st.DrawFn) -> list[GPUNode]:
    mixed = draw(st.booleans())
    count = draw(st.integers(1, 4))
    return [draw(gpu_node(i, mixed=mixed)) for i in range(count)]


# --- policies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DevicePolicy:
    products: tuple[int, ...] = ()  # allowed product indexes, or () for a memory policy
    min_mib: int = 0
    check: bool = False  # with allowedProducts / minGPUMemory beside the affinity
    whole: bool = False  # with wholeGPUsOnly: a shared device is part of a GPU

    def allows(self, product: int, shared: bool = False) -> bool:
        if self.whole and shared:
            return False
        if self.products:
            return product in self.products
        return PRODUCTS[product][1] >= self.min_mib

    def compiled(self) -> Policy:
        def doc(kind: str, name: str, spec: dict[str, Any]) -> RuleDocument:
            body = {
                "apiVersion": "gpu-webhook.io/v1alpha1",
                "kind": kind,
                "metadata": {"name": name},
            }
            return RuleDocument(DocumentRef("differential", 1, kind, name), {**body, "spec": spec})

        tolerate = {"tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
        rule: dict[str, Any] = {"order": 30, "match": {"namespaces": [NAMESPACE]}}
        if self.products:
            labels = [label(p) for p in self.products]
            required = [{"key": PRODUCT, "operator": "In", "values": labels}]
            rule["mutate"] = {"nodeAffinity": {"required": required}}
            rule["validate"] = [{"allowedProducts": labels, "action": "deny"}] if self.check else []
        else:
            rule["mutate"] = {"nodeAffinity": {"gpuMemory": {"min": f"{self.min_mib}Mi"}}}
            rule["validate"] = [{"minGPUMemory": f"{self.min_mib}Mi"}] if self.check else []
        if self.whole:
            rule["validate"].append({"wholeGPUsOnly": True})
        return compile_policy(
            [
                doc("GPUPolicy", "tolerations", {"order": 10, "mutate": tolerate}),
                doc("GPUPolicy", "vision", rule),
            ]
        )


device_policies = st.one_of(
    st.builds(
        DevicePolicy,
        products=st.lists(st.integers(0, len(PRODUCTS) - 1), min_size=1, unique=True).map(
            lambda p: tuple(sorted(p))
        ),
        check=st.booleans(),
        whole=st.booleans(),
    ),
    st.builds(
        DevicePolicy,
        min_mib=st.sampled_from([20480, 40960, 81920]),
        check=st.booleans(),
        whole=st.booleans(),
    ),
)


# --- pods ----------------------------------------------------------------------------------


def claim_template(exactly: dict[str, Any], selectors: list[str]) -> dict[str, Any]:
    """The template "gpus" of one request, its CEL selectors ANDed as the scheduler does."""
    if selectors:
        exactly = {**exactly, "selectors": [{"cel": {"expression": e}} for e in selectors]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpus", "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


@dataclass(frozen=True)
class Ask:
    count: int
    claim: bool
    product: int | None = None  # the claim's selector: productName ==
    min_mib: int | None = None  # the claim's selector: memory >=

    def selects(self, product: int) -> bool:
        if self.product is not None and product != self.product:
            return False
        return self.min_mib is None or PRODUCTS[product][1] >= self.min_mib

    def template(self) -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": self.count}
        selectors = []
        if self.product is not None:
            name = PRODUCTS[self.product][0]
            selectors.append(f"device.attributes['gpu.nvidia.com'].productName == '{name}'")
        if self.min_mib is not None:
            selectors.append(
                "device.capacity['gpu.nvidia.com'].memory.compareTo("
                f"quantity('{self.min_mib}Mi')) >= 0"
            )
        return claim_template(exactly, selectors)

    def pod(self) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base"}
        spec: dict[str, Any] = {"containers": [container]}
        if self.claim:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
            container["resources"] = {"claims": [{"name": "gpu", "request": "gpu"}]}
        else:
            container["resources"] = {"limits": {GPU: self.count}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": NAMESPACE},
            "spec": spec,
        }


asks = st.one_of(
    st.builds(Ask, count=st.integers(1, 4), claim=st.just(False)),
    st.builds(
        Ask,
        count=st.integers(1, 4),
        claim=st.just(True),
        product=st.none() | st.integers(0, len(PRODUCTS) - 1),
        min_mib=st.none() | st.sampled_from([40960, 81920]),
    ),
)


# --- reference -----------------------------------------------------------------------------


def admits(node: GPUNode, spec: dict[str, Any]) -> bool:
    """NodeAffinity and TaintToleration for the pod as the webhook leaves it."""
    tolerations = spec.get("tolerations") or []
    return affinity_matches(spec, node.labels) and any(tolerates(t, TAINT) for t in tolerations)


def offered(node: GPUNode, ask: Ask) -> list[tuple[int, bool]]:
    """The devices (product, shared) the scheduler may give the pod on this node (empty: it
    cannot land)."""
    devices = [(p, i in node.shared) for i, p in enumerate(node.devices)]
    if ask.claim:
        if node.kind == "plugin":
            return []
        matching = [(p, s) for p, s in devices if ask.selects(p)]
        return matching if len(matching) >= ask.count else []
    return devices if len(devices) >= ask.count else []


def possible(
    nodes: list[GPUNode], ask: Ask, spec: dict[str, Any]
) -> dict[str, list[tuple[int, bool]]]:
    return {n.name: offered(n, ask) for n in nodes if admits(n, spec) and offered(n, ask)}


def steerable(nodes: list[GPUNode], ask: Ask, rule: DevicePolicy) -> bool:
    """Whether the webhook has a way to keep the pod on allowed devices and it fits there."""
    every = replace(ask, count=0)  # every device the pod's ask may take, enough or not
    if ask.claim:
        matching = [d for n in nodes for d in offered(n, every)]
        fits = any(offered(n, ask) for n in nodes)
        return fits and all(rule.allows(*d) for d in matching)
    # Labelled nodes whose labels the rule admits: all the pod may get there is allowed,
    # and one of them holds it.
    admitted = [n for n in nodes if n.kind != "dra" and rule.allows(n.devices[0])]
    if any(offered(n, ask) for n in admitted) and all(
        rule.allows(*d) for n in admitted for d in offered(n, every)
    ):
        return True
    # Or with the label absent as well: the webhook steers by the rule's own requirement
    # only, so the labelled nodes it admits stay open beside the unlabelled ones. A node
    # that cannot hold the pod gives it nothing (the scheduler filters it out), so only
    # the refused devices of nodes that hold it count.
    unlabelled = [n for n in nodes if n.kind == "dra"]
    refused = any(not rule.allows(*d) for n in [*unlabelled, *admitted] for d in offered(n, ask))
    return not refused and any(offered(n, ask) for n in unlabelled)


def judge(
    nodes: list[GPUNode], rule: DevicePolicy, pod: dict[str, Any], extra: list[dict[str, Any]]
) -> Decision:
    objects = [CLASS, *(n.slice() for n in nodes if n.kind != "plugin"), *extra]
    view = InventoryView(
        Inventory([node_from_json(n.as_json()) for n in nodes]),
        devices=DeviceInventory.of(objects),
    )
    return evaluate(Request(pod, namespace=NAMESPACE), policy=rule.compiled(), inventory=view)


_TEMPLATE = re.compile(r"create (\{.*\}), give the pod")


def written_as_told(message: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The ResourceClaimTemplate a denial asks for, and the pod rewritten to use it."""
    found = _TEMPLATE.search(message)
    if found is None:
        return None
    template = json.loads(found.group(1))
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/cuda:12.4.1-base",
        "resources": {"claims": [{"name": "gpu", "request": "gpu"}]},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NAMESPACE},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-policy"}],
        },
    }
    return template, pod


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=clusters(), rule=device_policies, ask=asks)
# An L4 node too small for the pod holds no device it could be given: the DRA nodes stay open.
@example(
    nodes=[
        GPUNode("gpu-0", "plugin", [0, 0]),
        GPUNode("gpu-1", "dra", [2]),
        GPUNode("gpu-2", "dra", [0, 0]),
    ],
    rule=DevicePolicy(products=(0,)),
    ask=Ask(2, claim=False),
)
def test_an_admitted_pod_gets_only_allowed_devices_and_a_placeable_pod_is_admitted(
    nodes: list[GPUNode], rule: DevicePolicy, ask: Ask
) -> None:
    extra = [ask.template()] if ask.claim else []

    decision = judge(nodes, rule, ask.pod(), extra)

    assert decision.mutated is not None
    spec = dict(decision.mutated)["spec"]
    messages = [f"{f.id} {f.action}: {f.message}" for f in decision.findings]
    # DRA nodes are kept out for their refused devices only where the pod could land on one
    # of them and be given one: a node that cannot hold it gives it nothing.
    if any("hold devices the rule refuses" in f.message for f in decision.findings):
        unlabelled = [n for n in nodes if n.kind == "dra"]
        assert any(not rule.allows(*d) for n in unlabelled for d in offered(n, ask)), messages
    if decision.allowed:
        gets = possible(nodes, ask, spec)
        assert all(rule.allows(*d) for ds in gets.values() for d in ds), (gets, messages)
    if steerable(nodes, ask, rule):
        assert decision.allowed, messages


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 4).flatmap(
        lambda n: st.tuples(*(gpu_node(i, mixed=False) for i in range(n)))
    ),
    rule=device_policies,
    count=st.integers(1, 4),
)
def test_on_a_dra_only_cluster_a_denied_plain_gpu_pod_is_told_the_claim_that_is_admitted(
    nodes: tuple[GPUNode, ...], rule: DevicePolicy, count: int
) -> None:
    cluster = [n for n in nodes if n.kind == "dra"]  # no GFD labels at all
    # A shared GPU and a whole one of one product differ in allowMultipleAllocations only,
    # which a selector sees (k8s.io/dynamic-resource-allocation/cel compile.go,
    # ``device.allowMultipleAllocations``): the claim told keeps to the whole ones.
    if not cluster:
        return
    ask = Ask(count, claim=False)

    decision = judge(cluster, rule, ask.pod(), [])

    messages = [f.message for f in decision.findings]
    allowed_fit = any(
        sum(rule.allows(p, i in n.shared) for i, p in enumerate(n.devices)) >= count
        for n in cluster
    )
    if decision.allowed or not allowed_fit:
        return
    told = next((t for m in messages if (t := written_as_told(m)) is not None), None)
    assert told is not None, messages
    template, pod = told
    again = judge(cluster, rule, pod, [template])
    assert again.allowed, [f.message for f in again.findings]
    # What the template selects, read from its CEL: products by NVML name, a memory floor.
    expression = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]
    text = expression["cel"]["expression"]
    names = re.findall(r"'(NVIDIA[^']*)'", text)
    floor = re.search(r"quantity\('(\d+)Mi'\)", text)
    selected = [
        i
        for i, (name, mib) in enumerate(PRODUCTS)
        if name in names and (floor is None or mib >= int(floor.group(1)))
    ]
    assert selected, text
    assert all(rule.allows(p) for p in selected), text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 4).flatmap(
        lambda n: st.tuples(*(gpu_node(i, mixed=True) for i in range(n)))
    ),
    rule=device_policies,
    count=st.integers(1, 4),
)
# The labelled H100 node holds two, the DRA nodes hold A100s beside L4s: the claim is told.
@example(
    nodes=(GPUNode("gpu-0", "plugin", [1, 1]), GPUNode("gpu-1", "dra", [0, 0, 0, 2])),
    rule=DevicePolicy(products=(0, 1), check=True),
    count=3,
)
# Exclusive and shared A100s alike but for allowMultipleAllocations: the claim is told.
@example(
    nodes=(GPUNode("gpu-0", "dra", [0, 0, 0]), GPUNode("gpu-1", "dra", [0], frozenset({0}))),
    rule=DevicePolicy(products=(0,), whole=True),
    count=2,
)
# A labelled device-plugin node holds it beside a labelled DRA node with a shared GPU: the
# denial names the node to select.
@example(
    nodes=(
        GPUNode("gpu-0", "plugin", [0, 0, 0, 0]),
        GPUNode("gpu-1", "dra", [0], frozenset({0})),
        GPUNode("gpu-2", "dra-labelled", [0, 0], frozenset({1})),
        GPUNode("gpu-3", "dra", [0, 3, 1], frozenset({1})),
    ),
    rule=DevicePolicy(min_mib=20480, check=True, whole=True),
    count=2,
)
def test_on_a_mixed_cluster_a_denied_plain_gpu_pod_that_allowed_dra_devices_hold_is_told_the_claim(
    nodes: tuple[GPUNode, ...], rule: DevicePolicy, count: int
) -> None:
    """ClusterPolicy beside GPUCluster: where the denied pod's GPUs fit on allowed DRA devices
    of one node, the denial tells the ResourceClaimTemplate, and the pod written with it is
    admitted (the labelled nodes lacking room, or the DRA nodes also holding refused devices)."""
    cluster = list(nodes)
    decision = judge(cluster, rule, Ask(count, claim=False).pod(), [])

    allowed_fit = any(
        sum(rule.allows(p, i in n.shared) for i, p in enumerate(n.devices)) >= count
        for n in cluster
        if n.kind != "plugin"
    )
    if decision.allowed or not allowed_fit:
        return
    messages = [f.message for f in decision.findings]
    told = next((t for m in messages if (t := written_as_told(m)) is not None), None)
    # Or, where labelled device-plugin nodes the rule admits hold it while labelled DRA
    # nodes beside them hold refused devices, the nodeSelector that keeps it on the former.
    plugin_holds = any(
        n.kind == "plugin" and rule.allows(n.devices[0]) and len(n.devices) >= count
        for n in cluster
    )
    if told is None and plugin_holds:
        assert any("select them (a nodeSelector" in m for m in messages), messages
        return
    assert told is not None, messages
    template, pod = told
    again = judge(cluster, rule, pod, [template])
    assert again.allowed, [f.message for f in again.findings]


# --- MIG devices and rules keyed on GFD's per-profile MIG labels -----------------------------
#
# DRA nodes holding whole GPUs and static MIG devices (cmd/gpu-kubelet-plugin/mig.go,
# ``CommonAttributesMig``: type mig, profile, the parent's productName; capacity memory), some
# still labelled by GFD with mig.strategy mixed (nvidia.com/mig-<profile>.count, .product,
# .memory, ...: NVIDIA/k8s-device-plugin internal/lm/resource.go, NewMIGResourceLabeler). The
# class mig.nvidia.com selects type mig. Policies: a required affinity on
# ``nvidia.com/mig-<profile>.memory Gt`` or ``.product In``, or ``allowedProducts`` of whole and
# ``-MIG-<profile>`` products. Pods: a claim on mig.nvidia.com (no selector, a profile, a
# product), or a plain nvidia.com/gpu (whole GPUs only).

MIG_PRODUCTS = [("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA A100-SXM4-80GB", 81920)]
# GPU-instance memory per profile (MiB), as nvidia-smi mig -lgip has it per product.
MIG_PROFILES = {
    "1g.10gb": (9856, 9728),
    "2g.20gb": (19968, 19968),
    "3g.40gb": (40192, 40192),
}
MIG_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "mig.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'mig'"
                }
            }
        ]
    },
}
MigDevice = tuple[int, str]  # (product index, profile; "" for a whole GPU)


def mig_memory(device: MigDevice) -> int:
    product, profile = device
    return MIG_PROFILES[profile][product] if profile else MIG_PRODUCTS[product][1]


def product_label(device: MigDevice) -> str:
    """GFD's product label of the resource the device would be (``getProductName``)."""
    product, profile = device
    name = MIG_PRODUCTS[product][0].replace(" ", "-")
    return f"{name}-MIG-{profile}" if profile else name


@dataclass
class MigNode:
    name: str
    labelled: bool  # GFD still labels it (mig.strategy mixed)
    devices: list[MigDevice]

    @property
    def labels(self) -> dict[str, str]:
        labels = {"kubernetes.io/hostname": self.name, "nvidia.com/gpu.present": "true"}
        if not self.labelled:
            return labels
        labels[PRODUCT] = product_label((self.devices[0][0], ""))
        labels["nvidia.com/mig.strategy"] = "mixed"
        for device in self.devices:
            if device[1]:
                prefix = f"nvidia.com/mig-{device[1]}"
                count = sum(d == device for d in self.devices)
                labels[f"{prefix}.count"] = str(count)
                labels[f"{prefix}.product"] = product_label(device)
                labels[f"{prefix}.memory"] = str(mig_memory(device))
        return labels

    def as_json(self) -> dict[str, Any]:
        return replace(GPUNode(self.name, "dra", [0]), kind="dra").as_json() | {
            "metadata": {"name": self.name, "labels": self.labels}
        }

    def slice(self) -> dict[str, Any]:
        devices = []
        for i, (product, profile) in enumerate(self.devices):
            attributes: dict[str, Any] = {
                "type": {"string": "mig" if profile else "gpu"},
                "productName": {"string": MIG_PRODUCTS[product][0]},
            }
            if profile:
                attributes["profile"] = {"string": profile}
            memory = f"{mig_memory((product, profile))}Mi"
            devices.append(
                {
                    "name": f"dev-{i}",
                    "attributes": attributes,
                    "capacity": {"memory": {"value": memory}},
                }
            )
        return node_slice(self.name, devices)


mig_devices = st.tuples(st.integers(0, 1), st.sampled_from(["", *MIG_PROFILES]))


@st.composite
def mig_clusters(draw: st.DrawFn) -> list[MigNode]:
    nodes = []
    for index in range(draw(st.integers(1, 3))):
        labelled = draw(st.booleans())
        devices = draw(st.lists(mig_devices, min_size=1, max_size=5))
        if labelled:  # GFD labels a node of one product
            devices = [(devices[0][0], profile) for _, profile in devices]
        nodes.append(MigNode(f"gpu-{index}", labelled, devices))
    return nodes


@dataclass(frozen=True)
class MigPolicy:
    kind: str  # "memory", "product" (affinities) or "allowed" (allowedProducts)
    profile: str = "1g.10gb"
    floor: int = 0  # memory Gt, MiB
    product: int = 0
    allowed: tuple[str, ...] = ()

    def allows(self, device: MigDevice) -> bool:
        if self.kind == "allowed":
            return product_label(device) in self.allowed
        if device[1] != self.profile:
            return False
        if self.kind == "memory":
            return mig_memory(device) > self.floor
        return device[0] == self.product

    def compiled(self) -> Policy:
        tolerate = {"tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
        rule: dict[str, Any] = {"order": 30, "match": {"namespaces": [NAMESPACE]}}
        key = f"nvidia.com/mig-{self.profile}"
        if self.kind == "memory":
            required = [{"key": f"{key}.memory", "operator": "Gt", "values": [str(self.floor)]}]
        elif self.kind == "product":
            label = product_label((self.product, self.profile))
            required = [{"key": f"{key}.product", "operator": "In", "values": [label]}]
        else:
            required = []
            rule["validate"] = [{"allowedProducts": list(self.allowed), "action": "deny"}]
        if required:
            rule["mutate"] = {"nodeAffinity": {"required": required}}

        def doc(name: str, spec: dict[str, Any]) -> RuleDocument:
            body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": "GPUPolicy"}
            ref = DocumentRef("differential", 1, "GPUPolicy", name)
            return RuleDocument(ref, {**body, "metadata": {"name": name}, "spec": spec})

        return compile_policy(
            [doc("tolerations", {"order": 10, "mutate": tolerate}), doc("vision", rule)]
        )


_LABELS = [product_label((p, profile)) for p in (0, 1) for profile in ["", *MIG_PROFILES]]
mig_policies = st.one_of(
    st.builds(
        MigPolicy,
        kind=st.just("memory"),
        profile=st.sampled_from(list(MIG_PROFILES)),
        floor=st.sampled_from([9000, 9800, 19000]),
    ),
    st.builds(
        MigPolicy,
        kind=st.just("product"),
        profile=st.sampled_from(list(MIG_PROFILES)),
        product=st.integers(0, 1),
    ),
    st.builds(
        MigPolicy,
        kind=st.just("allowed"),
        allowed=st.lists(st.sampled_from(_LABELS), min_size=1, max_size=3, unique=True).map(tuple),
    ),
)


@dataclass(frozen=True)
class MigAsk:
    count: int
    claim: bool
    profile: str | None = None  # the claim's selector: profile ==
    product: int | None = None  # the claim's selector: productName ==

    def selects(self, device: MigDevice) -> bool:
        if not self.claim:
            return not device[1]
        if not device[1]:
            return False
        if self.profile is not None and device[1] != self.profile:
            return False
        return self.product is None or device[0] == self.product

    def selectors(self) -> list[str]:
        out = []
        if self.profile is not None:
            out.append(f"device.attributes['gpu.nvidia.com'].profile == '{self.profile}'")
        if self.product is not None:
            name = MIG_PRODUCTS[self.product][0]
            out.append(f"device.attributes['gpu.nvidia.com'].productName == '{name}'")
        return out

    def template(self, extra: str | None = None) -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": "mig.nvidia.com", "count": self.count}
        selectors = [*self.selectors(), *([extra] if extra else [])]
        return claim_template(exactly, selectors)

    def pod(self) -> dict[str, Any]:
        return Ask(self.count, self.claim).pod()


mig_asks = st.one_of(
    st.builds(MigAsk, count=st.integers(1, 3), claim=st.just(False)),
    st.builds(
        MigAsk,
        count=st.integers(1, 3),
        claim=st.just(True),
        profile=st.none() | st.sampled_from(list(MIG_PROFILES)),
        product=st.none() | st.integers(0, 1),
    ),
)


def mig_offered(node: MigNode, ask: MigAsk) -> list[MigDevice]:
    """The devices the scheduler may give the pod on this node (empty: it cannot land)."""
    matching = [d for d in node.devices if ask.selects(d)]
    return matching if len(matching) >= ask.count else []


def mig_judge(
    nodes: list[MigNode], rule: MigPolicy, pod: dict[str, Any], extra: list[dict[str, Any]]
) -> Decision:
    objects = [CLASS, MIG_CLASS, *(n.slice() for n in nodes), *extra]
    view = InventoryView(
        Inventory([node_from_json(n.as_json()) for n in nodes]),
        devices=DeviceInventory.of(objects),
    )
    return evaluate(Request(pod, namespace=NAMESPACE), policy=rule.compiled(), inventory=view)


_SELECTOR = re.compile(r'selectors: \[\{cel: \{expression: "(.*?)"\}\}\]')


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=mig_clusters(), rule=mig_policies, ask=mig_asks)
# Other profiles of an allowed product beside the allowed one: the selector names the profile.
@example(
    nodes=[MigNode("gpu-0", False, [(0, "1g.10gb"), (0, "2g.20gb"), (0, "")])],
    rule=MigPolicy("memory", "1g.10gb", floor=9000),
    ask=MigAsk(1, claim=True),
)
# The same profile on two products, told apart by memory alone.
@example(
    nodes=[MigNode("gpu-0", False, [(0, "1g.10gb"), (1, "1g.10gb")])],
    rule=MigPolicy("memory", "1g.10gb", floor=9800),
    ask=MigAsk(1, claim=True, profile="1g.10gb"),
)
# A GFD-labelled node without the profile beside one with it: judged by their labels.
@example(
    nodes=[
        MigNode("gpu-0", True, [(0, "1g.10gb"), (0, "3g.40gb")]),
        MigNode("gpu-1", True, [(1, "2g.20gb")]),
    ],
    rule=MigPolicy("product", "1g.10gb", product=0),
    ask=MigAsk(1, claim=True, profile="1g.10gb"),
)
# Products that differ on every device of a slice are no identity attribute (found by CI).
@example(
    nodes=[
        MigNode("gpu-0", False, [(0, "2g.20gb"), (0, "2g.20gb")]),
        MigNode("gpu-1", False, [(0, "2g.20gb"), (1, "2g.20gb")]),
    ],
    rule=MigPolicy("product", "2g.20gb", product=0),
    ask=MigAsk(1, claim=True),
)
# Products allowed in different profiles: each product's profiles, not every pair (found by CI).
@example(
    nodes=[
        MigNode("gpu-0", False, [(0, "2g.20gb")]),
        MigNode("gpu-1", True, [(1, "2g.20gb"), (1, "3g.40gb")]),
    ],
    rule=MigPolicy(
        "allowed",
        allowed=("NVIDIA-H100-80GB-HBM3-MIG-2g.20gb", "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"),
    ),
    ask=MigAsk(1, claim=True),
)
def test_mig_rules_on_dra_mig_devices_admit_only_allowed_devices_and_tell_the_claim(
    nodes: list[MigNode], rule: MigPolicy, ask: MigAsk
) -> None:
    """Every admitted pod's possible devices are allowed; a claim whose every matching device
    is allowed is admitted; a denied claim that allowed devices of one node could hold is
    told the selector that, added to the claim, gets it admitted."""
    extra = [ask.template()] if ask.claim else []

    decision = mig_judge(nodes, rule, ask.pod(), extra)

    assert decision.mutated is not None
    spec = dict(decision.mutated)["spec"]
    messages = [f"{f.id} {f.action}: {f.message}" for f in decision.findings]
    if decision.allowed:
        tolerations = spec.get("tolerations") or []
        gets = {
            n.name: mig_offered(n, ask)
            for n in nodes
            if affinity_matches(spec, n.labels) and any(tolerates(t, TAINT) for t in tolerations)
        }
        assert all(rule.allows(d) for ds in gets.values() for d in ds), (gets, messages)
    every = replace(ask, count=0)
    matching = [d for n in nodes for d in mig_offered(n, every)]
    if any(mig_offered(n, ask) for n in nodes) and all(rule.allows(d) for d in matching):
        assert decision.allowed, messages
    if decision.allowed or not ask.claim:
        return
    holds = any(
        sum(ask.selects(d) and rule.allows(d) for d in n.devices) >= ask.count for n in nodes
    )
    if not holds:
        return
    told = next((m for f in decision.findings if (m := _SELECTOR.search(f.message))), None)
    assert told is not None, messages
    again = mig_judge(nodes, rule, ask.pod(), [ask.template(told.group(1))])
    assert again.allowed, [f.message for f in again.findings]
