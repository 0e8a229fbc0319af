"""What offers a resource, and which names nothing offers are misspellings of a GPU's."""

from __future__ import annotations

import pytest

from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, Node
from webhook.engine.resources.offers import VENDOR_GPU_RESOURCES, lookalike, offered

GPU_NODE = Node("gpu-0", allocatable={"nvidia.com/gpu": 8, "cpu": 64_000})
POOL = Node("nodepool/gaudi", allocatable={"habana.ai/gaudi": 8}, pool="gaudi", count=4)
DRA = DeviceInventory.of(
    [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {"extendedResourceName": "example.com/gpu"},
        }
    ]
)


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param("nvidia.com/gpu", True, id="a node advertises it"),
        pytest.param("habana.ai/gaudi", True, id="a declared node pool advertises it"),
        pytest.param("example.com/gpu", True, id="a DRA class serves it (extendedResourceName)"),
        pytest.param(
            "deviceclass.resource.kubernetes.io/gpu.example.com",
            True,
            id="a DRA class serves its implicit name",
        ),
        pytest.param("nvidia.com/gpus", False, id="nothing offers a misspelling"),
    ],
)
def test_a_resource_is_offered_by_nodes_pools_and_dra_classes(
    resource: str, expected: bool
) -> None:
    nodes = Inventory([GPU_NODE]).with_nodes([POOL])

    assert offered(resource, nodes=nodes, devices=DRA) is expected


def test_without_an_inventory_nothing_is_known_to_offer_anything() -> None:
    assert not offered("nvidia.com/gpu", nodes=None, devices=None)


@pytest.mark.parametrize(
    ("resource", "meant"),
    [
        pytest.param("nvidia.com/gpus", "nvidia.com/gpu", id="plural"),
        pytest.param("nvidia.com/GPU", "nvidia.com/gpu", id="case"),
        pytest.param("nvida.com/gpu", "nvidia.com/gpu", id="one letter off the domain"),
        pytest.param("nvidia.io/gpu", "nvidia.com/gpu", id="another vendor domain suffix"),
        pytest.param("amd.com/gpus", "amd.com/gpu", id="another vendor's plural"),
        pytest.param("gpu.intel.com/xee", "gpu.intel.com/xe", id="one letter too many"),
        pytest.param("nvidia.com/gpu.sahred", "nvidia.com/gpu.shared", id="two letters swapped"),
        pytest.param("nvidia.com/gpumem", None, id="HAMi's GPU memory is no typo"),
        pytest.param("nvidia.com/gpucores", None, id="HAMi's GPU cores are no typo"),
        pytest.param("example.com/fpga", None, id="not a GPU at all"),
        pytest.param("lambda.ai/gpu", None, id="another domain's gpu, not amd.com's"),
        pytest.param("intel.com/i915", "gpu.intel.com/i915", id="the vendor's word kept"),
        pytest.param("nvidia.com/hostdev", None, id="the network operator's resource"),
        pytest.param("nvidia.com/mig-2g.20gb", None, id="a real MIG profile is no typo"),
    ],
)
def test_a_misspelt_gpu_resource_is_told_what_it_was_meant_to_be(
    resource: str, meant: str | None
) -> None:
    candidates = [*VENDOR_GPU_RESOURCES, "nvidia.com/mig-1g.10gb"]

    assert lookalike(resource, candidates) == meant


def test_a_mig_profile_typo_finds_the_profile_not_a_whole_gpu() -> None:
    assert (
        lookalike("nvidia.com/mig-1g.10bg", ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"])
        == "nvidia.com/mig-1g.10gb"
    )
