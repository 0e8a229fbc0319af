"""A workload's GPUs against all a DRA-served extended resource gives the cluster: the device
plugin's allocatable where a node has it, the class's devices everywhere else, and a warning
instead of a denial where more may exist than the webhook can count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.policy.ruleset import GPUResources
from webhook.engine.resources.fit import Demand, demand_of
from webhook.engine.resources.gpufacts import DEVICE_PLUGIN_DEFAULTS, SlotRefusal
from webhook.engine.resources.inventory import Placement
from webhook.engine.scheduling.dra import NO_CLAIMS, PodClaims, extended_resource_claims
from webhook.engine.scheduling.wholepod import (
    ServedTotal,
    cluster_capacity_finding,
    plugin_fit,
    served_total,
    whole_pod_answer,
    whole_pod_shortfall,
)
from webhook.files.inventoryfile import inventory_from_text, load_inventory_file

INVENTORIES = Path(__file__).resolve().parents[2] / "cases" / "_inventories"
DRIVER = "gpu.nvidia.com"
GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}


def node(name: str, gpus: int = 0) -> dict[str, Any]:
    allocatable = {"cpu": "8", "memory": "64Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def device(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}}, **extra}


def slice_of(where: dict[str, Any], *devices: dict[str, Any], pool: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{pool or where.get('nodeName', 'all')}-slice"},
        "spec": {
            "driver": DRIVER,
            **where,
            "pool": {"name": pool or where.get("nodeName", "all"), "generation": 1},
            "devices": list(devices),
        },
    }


def view(*items: dict[str, Any]) -> InventoryView:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})
    return inventory_from_text(text, "inventory.yaml").view()


def total(*items: dict[str, Any], resource: str = "nvidia.com/gpu") -> ServedTotal:
    cluster = view(*items)
    assert cluster.snapshot is not None
    assert cluster.devices is not None
    answer = served_total(resource, devices=cluster.devices, nodes=cluster.snapshot)
    assert answer is not None
    return answer


def test_plugin_nodes_give_their_allocatable_and_the_others_the_classs_devices() -> None:
    answer = total(
        node("plugin-0", gpus=8),
        node("dra-0"),
        GPU_CLASS,
        slice_of({"nodeName": "dra-0"}, device("gpu-0"), device("gpu-1")),
        # A node with the resource in allocatable uses its device plugin: its slice is not
        # counted again (filterExtendedResources).
        slice_of({"nodeName": "plugin-0"}, device("gpu-0")),
    )
    assert (answer.plugin, answer.devices, answer.have, answer.unknown) == (8, 2, 10, "")


def test_the_implicit_name_is_served_by_the_class_on_every_node() -> None:
    answer = total(
        node("plugin-0", gpus=8),
        node("dra-0"),
        GPU_CLASS,
        slice_of({"nodeName": "dra-0"}, device("gpu-0")),
        slice_of({"nodeName": "plugin-0"}, device("gpu-0")),
        resource="deviceclass.resource.kubernetes.io/gpu.nvidia.com",
    )
    assert (answer.plugin, answer.devices) == (0, 2)


def test_a_tainted_device_is_no_capacity_for_the_schedulers_claim() -> None:
    tainted = device("gpu-1", taints=[{"key": "xid", "value": "79", "effect": "NoSchedule"}])
    answer = total(
        node("dra-0"), GPU_CLASS, slice_of({"nodeName": "dra-0"}, device("gpu-0"), tainted)
    )
    assert answer.devices == 1


def test_a_device_every_node_reaches_counts_once() -> None:
    answer = total(
        node("dra-0"),
        node("dra-1"),
        GPU_CLASS,
        slice_of({"allNodes": True}, device("gpu-0"), pool="fabric"),
    )
    assert answer.devices == 1


@pytest.mark.parametrize(
    ("capacity", "units", "unlimited"),
    [
        pytest.param(
            {"memory": {"value": "80Gi", "requestPolicy": {"default": "10Gi"}}},
            8,
            False,
            id="80Gi in shares of 10Gi by the policy's default",
        ),
        pytest.param({"memory": {"value": "80Gi"}}, 1, False, id="no policy: one takes it all"),
        pytest.param({}, 0, True, id="no capacity: any number of pods"),
    ],
)
def test_a_device_that_allows_multiple_allocations_gives_what_its_capacity_holds(
    capacity: dict[str, Any], units: int, unlimited: bool
) -> None:
    shared = device("gpu-0", allowMultipleAllocations=True, capacity=capacity)
    answer = total(node("dra-0"), GPU_CLASS, slice_of({"nodeName": "dra-0"}, shared))
    assert (answer.devices, answer.unlimited) == (units, unlimited)


def test_a_selector_the_webhook_cannot_evaluate_leaves_the_total_unknown() -> None:
    opaque = {
        **GPU_CLASS,
        "spec": {
            "selectors": [{"cel": {"expression": "isCIDR('10.0.0.0/8')"}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }
    answer = total(node("dra-0"), opaque, slice_of({"nodeName": "dra-0"}, device("gpu-0")))
    assert answer.devices == 0
    assert "isCIDR" in answer.unknown


def test_without_resourceslices_the_total_is_unknown() -> None:
    cluster = view(node("dra-0"), GPU_CLASS)
    assert cluster.snapshot is not None
    assert cluster.devices is not None
    devices = cluster.devices.with_classes([GPU_CLASS])
    incomplete = type(devices)(devices.classes, (), {}, {}, complete=False)
    answer = served_total("nvidia.com/gpu", devices=incomplete, nodes=cluster.snapshot)
    assert answer is not None
    assert "ResourceSlices" in answer.unknown


def test_a_resource_no_class_serves_has_no_dra_total() -> None:
    cluster = view(node("plugin-0", gpus=8), GPU_CLASS)
    assert cluster.snapshot is not None
    assert cluster.devices is not None
    assert served_total("amd.com/gpu", devices=cluster.devices, nodes=cluster.snapshot) is None


SERVED = ServedTotal("nvidia.com/gpu", "gpu.nvidia.com", plugin=8, devices=4)


@pytest.mark.parametrize(
    ("served", "need", "action", "expected"),
    [
        pytest.param(SERVED, 12, "deny", None, id="all pods fit"),
        pytest.param(SERVED, 13, "deny", "deny", id="one pod too many: the configured action"),
        pytest.param(SERVED, 13, "warn", "warn", id="the default action"),
        pytest.param(
            ServedTotal("nvidia.com/gpu", "gpu.nvidia.com", 8, 4, unknown="pool p may add nodes"),
            13,
            "deny",
            "warn",
            id="more may exist: never a denial",
        ),
        pytest.param(
            ServedTotal("nvidia.com/gpu", "gpu.nvidia.com", 0, 1, unlimited=True),
            100,
            "deny",
            None,
            id="a device shared without limit",
        ),
        pytest.param(
            ServedTotal("nvidia.com/gpu", "gpu.nvidia.com", 0, 0),
            1,
            "deny",
            None,
            id="nothing offers it: the pod's own check speaks",
        ),
    ],
)
def test_cluster_capacity_of_a_served_resource(
    served: ServedTotal, need: int, action: str, expected: str | None
) -> None:
    finding = cluster_capacity_finding(served, need=need, action=action)
    assert (finding.action if finding else None) == expected
    if finding is not None:
        assert f"request {need} nvidia.com/gpu" in finding.message
        assert (
            "8 allocatable on nodes with a device plugin and 4 via DeviceClass" in finding.message
        )
        assert ("cannot count all" in finding.message) == bool(served.unknown)


def test_partitions_of_one_gpu_count_as_many_as_fit_together() -> None:
    """dra.yaml: dra-mig-0's four fixed MIG devices, and dra-dynmig-0's one H200 published
    as seven 1g.18gb and a 4g.71gb partition sharing its counters: at most seven of those
    at once (checkAvailableCounters), not eight."""
    cluster = inventory_from_text(
        (INVENTORIES / "dra.yaml").read_text(encoding="utf-8"), "dra.yaml"
    ).view()
    assert cluster.snapshot is not None
    assert cluster.devices is not None
    answer = served_total(
        "deviceclass.resource.kubernetes.io/mig.nvidia.com",
        devices=cluster.devices,
        nodes=cluster.snapshot,
    )
    assert answer is not None
    assert (answer.devices, answer.unknown) == (4 + 7, "")


# --- device-plugin nodes that would refuse a container of a served resource -----------------

REFUSING = load_inventory_file(str(INVENTORIES / "dra-mixed-refusing.yaml")).view()
TIME_SLICING_REFUSES = SlotRefusal(time_slicing=True)


def served_pod(*counts: int, node: str = "") -> tuple[PodClaims, Demand, Placement]:
    """A pod whose containers ask ``counts`` nvidia.com/gpu, which the cluster's class
    serves; tolerating the GPU taint, on ``node`` alone where one is named."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": n}}}
            for i, n in enumerate(counts)
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    resources = GPUResources((("nvidia.com/gpu", False),))
    pod, claims = extended_resource_claims(
        pod_gpus(spec, resources), NO_CLAIMS, devices=REFUSING.devices
    )
    demand = demand_of(spec, pod.vector, pod.per_container, pod.containers)
    return claims, demand, Placement.of(spec)


def refused_names(claims: PodClaims, demand: Demand, placement: Placement, **kw: Any) -> set[str]:
    assert REFUSING.snapshot is not None
    answer = plugin_fit(
        claims,
        demand=demand,
        placement=placement,
        nodes=REFUSING.snapshot,
        refusal=kw.get("refusal", DEVICE_PLUGIN_DEFAULTS),
    )
    return {node.name for shape in answer.refused for node in shape.members}


@pytest.mark.parametrize(
    ("counts", "refusal", "refused"),
    [
        pytest.param((2,), DEVICE_PLUGIN_DEFAULTS, {"gpu-mps-0"}, id="two MPS slots: the MPS node"),
        pytest.param((1, 1), DEVICE_PLUGIN_DEFAULTS, set(), id="one slot per container: none"),
        pytest.param(
            (2,),
            TIME_SLICING_REFUSES,
            {"gpu-mps-0", "gpu-ts-0"},
            id="failRequestsGreaterThanOne for time-slicing: both plugin nodes",
        ),
        pytest.param((9,), DEVICE_PLUGIN_DEFAULTS, set(), id="more than the MPS node holds: none"),
    ],
)
def test_the_plugin_nodes_that_would_fail_a_container_of_a_served_resource_are_refused(
    counts: tuple[int, ...], refusal: SlotRefusal, refused: set[str]
) -> None:
    claims, demand, placement = served_pod(*counts)
    assert refused_names(claims, demand, placement, refusal=refusal) == refused


def whole(claims: PodClaims, demand: Demand, placement: Placement, refusal: SlotRefusal) -> Any:
    assert REFUSING.snapshot is not None
    assert REFUSING.devices is not None
    return whole_pod_answer(
        claims,
        demand=demand,
        placement=placement,
        nodes=REFUSING.snapshot,
        devices=REFUSING.devices,
        refusal=refusal,
    )


@pytest.mark.parametrize(
    ("counts", "node", "refusal", "fits"),
    [
        pytest.param((2,), "gpu-mps-0", DEVICE_PLUGIN_DEFAULTS, False, id="only the MPS node"),
        pytest.param((1, 1), "gpu-mps-0", DEVICE_PLUGIN_DEFAULTS, True, id="one MPS slot each"),
        pytest.param((2,), "gpu-ts-0", DEVICE_PLUGIN_DEFAULTS, True, id="time-slicing by default"),
        pytest.param((2,), "gpu-ts-0", TIME_SLICING_REFUSES, False, id="time-slicing refusing"),
        pytest.param((4,), "", TIME_SLICING_REFUSES, True, id="the DRA node's 4 devices"),
        pytest.param((5,), "", TIME_SLICING_REFUSES, False, id="5: only refusing nodes hold it"),
    ],
)
def test_a_node_whose_device_plugin_fails_a_container_takes_no_part_of_the_pod(
    counts: tuple[int, ...], node: str, refusal: SlotRefusal, fits: bool
) -> None:
    claims, demand, placement = served_pod(*counts, node=node)
    assert whole(claims, demand, placement, refusal).fits is fits


def test_the_denial_names_what_was_asked_and_the_nodes_that_refuse_it() -> None:
    assert REFUSING.snapshot is not None
    assert REFUSING.devices is not None
    claims, demand, placement = served_pod(5)

    message, summary = whole_pod_shortfall(
        claims,
        demand=demand,
        placement=placement,
        nodes=REFUSING.snapshot,
        devices=REFUSING.devices,
        refusal=TIME_SLICING_REFUSES,
    )

    assert message.startswith("the pod requests 5 nvidia.com/gpu, 5 of them in one container")
    assert "(gpu-ts-0, gpu-mps-0)" in message
    assert "at most 4 via DeviceClass gpu.nvidia.com on node dra-h100-0" in message
    assert summary.startswith("5 nvidia.com/gpu asked (5 in one container)")
