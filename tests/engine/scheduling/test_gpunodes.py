"""Whether a pod can land on a GPU node, and only there: from the real nodes of an inventory,
or from how GPUSettings describes GPU nodes when there is none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.policy.ruleset import (
    DEFAULT_GPU_DEVICE_CLASSES,
    GPUNodes,
    GPUResources,
    GPUTaint,
    NodeLabel,
    glob_matcher,
)
from webhook.engine.resources.inventory import Inventory, Placement
from webhook.engine.scheduling.gpunodes import (
    DRAGPUs,
    Reach,
    bound_node_reach,
    gpu_node_reach,
    pinned_to_a_node,
)
from webhook.files.inventoryfile import load_inventory, load_inventory_file

INVENTORIES = Path(__file__).resolve().parents[2] / "cases" / "_inventories"
TAINTED = load_inventory(str(INVENTORIES / "cluster.yaml"))
UNTAINTED = load_inventory(str(INVENTORIES / "untainted-gpu-nodes.yaml"))
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _required_term(term: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }


def _required(*exprs: dict[str, Any]) -> dict[str, Any]:
    return _required_term({"matchExpressions": list(exprs)})


def reach(
    spec: dict[str, Any], inventory: Inventory | None, nodes: GPUNodes | None = None
) -> Reach:
    return gpu_node_reach(
        spec,
        Placement.of(spec),
        nodes=nodes or GPUNodes(),
        resources=GPUResources(),
        inventory=inventory,
    ).reach


@pytest.mark.parametrize(
    ("spec", "inventory", "expected"),
    [
        pytest.param({}, TAINTED, Reach.NONE, id="tainted GPU nodes, no toleration"),
        pytest.param({"tolerations": [GPU_TOLERATION]}, TAINTED, Reach.SOME, id="tolerated"),
        pytest.param({}, UNTAINTED, Reach.SOME, id="untainted GPU nodes"),
        pytest.param(
            {
                "tolerations": [GPU_TOLERATION],
                "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"},
            },
            TAINTED,
            Reach.ONLY,
            id="selects a GPU product",
        ),
        pytest.param(
            _required({"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}),
            UNTAINTED,
            Reach.NONE,
            id="kept off by affinity",
        ),
        pytest.param(
            {"nodeSelector": {"kubernetes.io/hostname": "cpu-0"}},
            UNTAINTED,
            Reach.NONE,
            id="pinned to the CPU node by hostname",
        ),
        pytest.param(
            {"nodeSelector": {"kubernetes.io/hostname": "gpu-t4-0"}},
            UNTAINTED,
            Reach.ONLY,
            id="pinned to a GPU node by hostname",
        ),
    ],
)
def test_with_an_inventory_the_scheduler_filters_decide(
    spec: dict[str, Any], inventory: Inventory, expected: Reach
) -> None:
    assert reach(spec, inventory) is expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, Reach.NONE, id="no toleration of the GPU taint"),
        pytest.param({"tolerations": [{"operator": "Exists"}]}, Reach.SOME, id="blanket"),
        pytest.param(
            {"tolerations": [{"key": "nvidia.com/gpu", "value": "present"}]},
            Reach.SOME,
            id="Equal with some value, empty effect",
        ),
        pytest.param(
            {"tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu"}]},
            Reach.SOME,
            id="the AKS taint",
        ),
        pytest.param(
            {
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}
                ]
            },
            Reach.NONE,
            id="the wrong effect",
        ),
        pytest.param(
            {
                "tolerations": [GPU_TOLERATION],
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            },
            Reach.ONLY,
            id="selects GKE accelerators",
        ),
        pytest.param(
            {"tolerations": [GPU_TOLERATION], "nodeSelector": {"nvidia.com/gpu.present": "false"}},
            Reach.NONE,
            id="selects a value GPU nodes do not have",
        ),
        pytest.param(
            {"tolerations": [GPU_TOLERATION], "nodeSelector": {"pool": "batch"}},
            Reach.SOME,
            id="another label: may be a GPU node",
        ),
        pytest.param(
            {
                "tolerations": [GPU_TOLERATION],
                **_required({"key": "nvidia.com/gpu.product", "operator": "Exists"}),
            },
            Reach.ONLY,
            id="requires the product label",
        ),
        pytest.param(
            {
                "tolerations": [GPU_TOLERATION],
                **_required({"key": "nvidia.com/gpu.product", "operator": "DoesNotExist"}),
            },
            Reach.SOME,
            id="no product label: GKE nodes may still be GPU nodes",
        ),
    ],
)
def test_without_an_inventory_the_described_gpu_nodes_decide(
    spec: dict[str, Any], expected: Reach
) -> None:
    assert reach(spec, None) is expected


def test_a_cluster_whose_gpu_nodes_carry_no_taint_admits_every_pod_there() -> None:
    untainted = GPUNodes(taints=(), labels=(NodeLabel("nvidia.com/gpu.present", "true"),))
    assert reach({}, None, untainted) is Reach.SOME
    kept_off = _required({"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]})
    assert reach(kept_off, None, untainted) is Reach.NONE


def test_a_prefer_no_schedule_taint_does_not_filter() -> None:
    soft = GPUNodes(taints=(GPUTaint("nvidia.com/gpu", effect="PreferNoSchedule"),))
    assert reach({}, None, soft) is Reach.SOME


@pytest.mark.parametrize(
    ("spec", "pinned"),
    [
        pytest.param({"nodeName": "gpu-a100-0"}, True, id="nodeName"),
        pytest.param(
            _required_term(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
            ),
            True,
            id="as the DaemonSet controller pins its pods",
        ),
        pytest.param({"nodeSelector": {"kubernetes.io/hostname": "x"}}, False, id="a label"),
    ],
)
def test_pods_pinned_to_a_node_by_name(spec: dict[str, Any], pinned: bool) -> None:
    assert pinned_to_a_node(spec, Placement.of(spec)) is pinned


@pytest.mark.parametrize(
    ("node", "reach"),
    [
        pytest.param("gpu-a100-0", Reach.ONLY, id="a-gpu-node"),
        pytest.param("cpu-0", Reach.NONE, id="a-cpu-node"),
        pytest.param("gone-7", None, id="a-node-the-inventory-lacks"),
    ],
)
def test_a_bound_pod_is_where_its_node_is(node: str, reach: Reach | None) -> None:
    found = bound_node_reach(node, TAINTED, nodes=GPUNodes(), resources=GPUResources())

    assert (found.reach if found else None) is reach


# --- nodes whose GPUs only a DRA driver serves ---------------------------------------------

DRA_ONLY = load_inventory_file(str(INVENTORIES / "dra-driver-only.yaml")).view()
assert DRA_ONLY.devices is not None
DRA = DRAGPUs(DRA_ONLY.devices, glob_matcher(DEFAULT_GPU_DEVICE_CLASSES))


def dra_reach(spec: dict[str, Any], dra: DRAGPUs | None) -> Reach:
    assert DRA_ONLY.snapshot is not None
    return gpu_node_reach(
        spec,
        Placement.of(spec),
        nodes=GPUNodes(),
        resources=GPUResources(),
        inventory=DRA_ONLY.snapshot,
        dra=dra,
    ).reach


def on(name: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": name}}


@pytest.mark.parametrize(
    ("spec", "dra", "expected"),
    [
        pytest.param({}, DRA, Reach.SOME, id="anywhere: the DRA GPU node and others"),
        pytest.param(on("dra-h100-0"), DRA, Reach.ONLY, id="its ResourceSlice holds GPUs"),
        pytest.param(on("nic-0"), DRA, Reach.NONE, id="a DRA node without GPUs (dranet NICs)"),
        pytest.param(on("dra-h100-0"), None, Reach.NONE, id="allocatable and labels alone"),
        pytest.param(
            on("dra-h100-0"),
            DRAGPUs(DRA.devices, glob_matcher(["multinic"])),
            Reach.NONE,
            id="only gpuDeviceClasses make GPU nodes",
        ),
    ],
)
def test_nodes_whose_resourceslices_hold_gpus_are_gpu_nodes(
    spec: dict[str, Any], dra: DRAGPUs | None, expected: Reach
) -> None:
    assert dra_reach(spec, dra) is expected


def test_a_pod_bound_to_a_dra_gpu_node_is_on_a_gpu_node() -> None:
    assert DRA_ONLY.snapshot is not None
    args: dict[str, Any] = {"nodes": GPUNodes(), "resources": GPUResources()}
    bound = bound_node_reach("dra-h100-0", DRA_ONLY.snapshot, dra=DRA, **args)
    assert bound is not None
    assert bound.reach is Reach.ONLY
    unseen = bound_node_reach("dra-h100-0", DRA_ONLY.snapshot, **args)
    assert unseen is not None
    assert unseen.reach is Reach.NONE
    nic = bound_node_reach("nic-0", DRA_ONLY.snapshot, dra=DRA, **args)
    assert nic is not None
    assert nic.reach is Reach.NONE
