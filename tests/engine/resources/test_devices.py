"""Which devices a node can use (the allocator's GatherPools), shared answers for alike
nodes, and which containers of a pod hold GPU claims."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook.engine.policy.ruleset import glob_matcher
from webhook.engine.resources.devices import DeviceInventory, device_from_json
from webhook.engine.resources.inventory import Node
from webhook.engine.scheduling.dra import EVERYWHERE, candidates, pod_claims


def rslice(
    name: str, devices: int, *, generation: int = 1, pool: str = "", **where: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": pool or name, "generation": generation, "resourceSliceCount": 1},
            **where,
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "uuid": {"string": f"GPU-{name}-{i}"},
                        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def counts(inventory: DeviceInventory, *nodes: Node) -> dict[str, int]:
    return {n.name: len(inventory.devices_for(n)) for n in nodes}


A = Node(name="a", labels={"rack": "r1"})
B = Node(name="b", labels={"rack": "r2"})


def test_a_node_gets_its_own_slices_and_those_for_all_or_selected_nodes() -> None:
    inventory = DeviceInventory.of(
        [
            rslice("local-a", 2, nodeName="a"),
            rslice("everywhere", 1, allNodes=True),
            rslice(
                "rack-r2",
                3,
                nodeSelector={
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]}
                    ]
                },
            ),
        ]
    )
    assert counts(inventory, A, B) == {"a": 3, "b": 4}


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    inventory = DeviceInventory.of(
        [
            rslice("old", 8, generation=1, pool="p", nodeName="a"),
            rslice("new", 2, generation=2, pool="p", nodeName="a"),
        ]
    )
    assert counts(inventory, A) == {"a": 2}


def test_per_device_node_selection_places_each_device() -> None:
    raw = rslice("mixed", 2, perDeviceNodeSelection=True)
    raw["spec"]["devices"][0]["nodeName"] = "a"
    raw["spec"]["devices"][1]["allNodes"] = True
    inventory = DeviceInventory.of([raw])
    assert counts(inventory, A, B) == {"a": 2, "b": 1}


def test_alike_nodes_share_one_profile_whatever_their_device_uuids() -> None:
    nodes = [Node(name=f"n{i}") for i in range(50)]
    inventory = DeviceInventory.of([rslice(f"n{i}", 8, nodeName=f"n{i}") for i in range(50)])
    assert ("gpu.nvidia.com", "uuid") in inventory.identity
    assert len({inventory.profile(n).key for n in nodes}) == 1


def two_gpus(name: str, *products: str, attribute: str = "productName") -> dict[str, Any]:
    raw = rslice(name, len(products), nodeName=name)
    for device, product in zip(raw["spec"]["devices"], products, strict=True):
        device["attributes"][attribute] = {"string": product}
    return raw


@pytest.mark.parametrize(
    "attribute",
    [
        pytest.param("productName", id="an-h100-beside-an-a100"),
        pytest.param("profile", id="mig-devices-of-two-profiles"),
        pytest.param("driverVersion", id="two-driver-versions"),
    ],
)
def test_what_a_device_is_never_groups_nodes_as_identity_even_when_it_differs_on_every_device(
    attribute: str,
) -> None:
    """A slice of two devices that differ in a describing attribute: the nodes are told
    apart by it (a hypothesis-found false admit grouped such a node with one of two H100s)."""
    inventory = DeviceInventory.of(
        [two_gpus("a", "x", "x", attribute=attribute), two_gpus("b", "x", "y", attribute=attribute)]
    )
    assert ("gpu.nvidia.com", attribute) not in inventory.identity
    assert inventory.profile(A).key != inventory.profile(B).key


@pytest.mark.parametrize(
    ("reference", "holders"),
    [
        pytest.param({"name": "gpu"}, {("containers", 0)}, id="whole-claim"),
        pytest.param({"name": "gpu", "request": "gpu"}, {("containers", 0)}, id="gpu-request"),
        pytest.param({"name": "gpu", "request": "nic"}, set(), id="other-request"),
        pytest.param({"name": "other"}, set(), id="other-claim"),
    ],
)
def test_containers_holding_a_gpu_request_are_known(
    reference: dict[str, str], holders: set[tuple[str, int]]
) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-and-nic", "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                        {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}},
                    ]
                }
            }
        },
    }
    spec = {
        "containers": [{"name": "main", "resources": {"claims": [reference]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-and-nic"}],
    }
    claims = pod_claims(
        spec,
        namespace="ml",
        devices=DeviceInventory.of([template]),
        is_gpu_class=glob_matcher(["gpu.nvidia.com"]),
    )
    assert claims.gpu_count == 1
    assert claims.gpu_classes == ("gpu.nvidia.com",)
    assert set(claims.holders) == holders


def test_a_snapshot_with_other_claims_keeps_the_answers_about_its_devices() -> None:
    nodes = [Node(name=f"n{i}") for i in range(4)]
    first = DeviceInventory.of([rslice(f"n{i}", 8, nodeName=f"n{i}") for i in range(4)])
    answer = candidates(first, None, EVERYWHERE)
    later = first.with_claim_objects({}, {}, resource_version="2")
    assert later is not first
    assert candidates(later, None, EVERYWHERE) is answer
    assert [later.profile(n).key for n in nodes] == [first.profile(n).key for n in nodes]


def _class(name: str, created: str, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"extendedResourceName": resource},
    }


@pytest.mark.parametrize(
    ("classes", "serving"),
    [
        pytest.param(
            [
                _class("new.example.com", "2026-03-01T00:00:00Z"),
                _class("gpu.nvidia.com", "2026-01-01T00:00:00Z"),
            ],
            "new.example.com",
            id="the newer class",
        ),
        pytest.param(
            [
                _class("gpu.nvidia.com", "2026-03-01T00:00:00Z"),
                _class("new.example.com", "2026-01-01T00:00:00Z"),
            ],
            "gpu.nvidia.com",
            id="the newer class, listed first",
        ),
        pytest.param(
            [
                _class("b.example.com", "2026-01-01T00:00:00Z"),
                _class("a.example.com", "2026-01-01T00:00:00Z"),
            ],
            "a.example.com",
            id="created together: the alphabetically first",
        ),
    ],
)
def test_of_two_classes_naming_one_extended_resource_the_schedulers_pick_serves_it(
    classes: list[dict[str, Any]], serving: str
) -> None:
    inventory = DeviceInventory.of(classes)
    assert inventory.extended_class("nvidia.com/gpu") == serving
    # The implicit name is each class's own.
    for c in classes:
        name = c["metadata"]["name"]
        assert inventory.extended_class(f"deviceclass.resource.kubernetes.io/{name}") == name


def _one_device(attributes: dict) -> Any:
    return device_from_json(
        {"name": "gpu-0", "attributes": attributes, "capacity": {"memory": {"value": "80Gi"}}},
        driver="gpu.nvidia.com",
        pool="p",
    )


def test_devices_of_one_kind_share_their_attribute_triples_and_capacities():
    common = {"productName": {"string": "NVIDIA A100-SXM4-80GB"}, "index": {"int": 3}}
    first = _one_device({**common, "uuid": {"string": "GPU-1"}})
    second = _one_device({**common, "uuid": {"string": "GPU-2"}})

    shared_triples = [a for a, b in zip(first.attributes, second.attributes, strict=True) if a is b]
    assert len(shared_triples) == 2  # all but the uuid
    assert first.capacity is second.capacity


def test_a_bool_attribute_is_never_taken_for_an_int_of_equal_value():
    flag = _one_device({"x": {"bool": True}})
    number = _one_device({"x": {"int": 1}})

    assert type(flag.attribute(("gpu.nvidia.com", "x"))) is bool
    assert type(number.attribute(("gpu.nvidia.com", "x"))) is int


def test_a_parsed_device_keeps_no_string_of_the_decoded_file():
    decoded = json.loads('{"uuid": {"string": "GPU-48f165d5-7b00-c7f4-781e-f86f5c8cc1ab"}}')
    device = _one_device(decoded)

    assert device.attribute(("gpu.nvidia.com", "uuid")) == decoded["uuid"]["string"]
    assert device.attribute(("gpu.nvidia.com", "uuid")) is not decoded["uuid"]["string"]
