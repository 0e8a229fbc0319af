"""What one unit of a GPU resource is, read from the labels GPU feature discovery sets.

The label sets are those of tests/cases/_inventories/*.yaml, which cite their sources in
NVIDIA/k8s-device-plugin (internal/lm/resource.go, internal/lm/mig-strategy.go and its tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.engine.resources.gpufacts import DeviceFacts, gpu_facts, mig_profile_gpus
from webhook.files.inventoryfile import load_inventory

INVENTORIES = Path(__file__).resolve().parents[2] / "cases" / "_inventories"


def facts_of(inventory: str, node: str, resource: str) -> DeviceFacts:
    nodes = {n.name: n for n in load_inventory(str(INVENTORIES / f"{inventory}.yaml")).nodes}
    found = nodes[node]
    return gpu_facts(found.labels, found.allocatable).device(resource, found.allocatable[resource])


@pytest.mark.parametrize(
    ("inventory", "node", "resource", "expected"),
    [
        pytest.param(
            "plain",
            "gpu-a100-0",
            "nvidia.com/gpu",
            DeviceFacts("nvidia.com/gpu", 8, "whole", "none", 1, 8, "NVIDIA-A100-SXM4-40GB", 40960),
            id="plain",
        ),
        pytest.param(
            "timesliced",
            "gpu-ts-0",
            "nvidia.com/gpu",
            DeviceFacts(
                "nvidia.com/gpu", 16, "shared", "time-slicing", 4, 4, "Tesla-T4-SHARED", 15360
            ),
            id="time-sliced",
        ),
        pytest.param(
            "timesliced-renamed",
            "gpu-ts-renamed-0",
            "nvidia.com/gpu.shared",
            DeviceFacts(
                "nvidia.com/gpu.shared",
                16,
                "shared",
                "time-slicing",
                4,
                4,
                "Tesla-T4-SHARED",
                15360,
            ),
            id="time-sliced-renamed",
        ),
        pytest.param(
            "mps",
            "gpu-mps-0",
            "nvidia.com/gpu",
            DeviceFacts("nvidia.com/gpu", 8, "shared", "mps", 4, 2, "NVIDIA-L4-SHARED", 23034),
            id="mps",
        ),
        pytest.param(
            "mig-single",
            "gpu-a100-mig-single-0",
            "nvidia.com/gpu",
            DeviceFacts(
                "nvidia.com/gpu",
                56,
                "mig",
                "none",
                1,
                None,
                "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                4864,
                "1g.5gb",
            ),
            id="mig-single",
        ),
        pytest.param(
            "mig-mixed",
            "gpu-h100-mig-mixed-0",
            "nvidia.com/mig-3g.40gb",
            DeviceFacts(
                "nvidia.com/mig-3g.40gb",
                8,
                "mig",
                "none",
                1,
                None,
                "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
                40192,
                "3g.40gb",
            ),
            id="mig-mixed",
        ),
    ],
)
def test_one_unit_of_a_gpu_resource_is_what_the_labels_say(
    inventory: str, node: str, resource: str, expected: DeviceFacts
) -> None:
    assert facts_of(inventory, node, resource) == expected


def test_a_node_without_gpu_feature_discovery_labels_has_whole_gpus() -> None:
    facts = gpu_facts({}, {"nvidia.com/gpu": 4, "amd.com/gpu": 2})
    assert facts.device("nvidia.com/gpu", 4) == DeviceFacts("nvidia.com/gpu", 4, physical=4)
    assert facts.device("amd.com/gpu", 2).kind == "whole"
    assert facts.physical == 4


def test_mig_single_counts_slices_not_physical_gpus() -> None:
    nodes = load_inventory(str(INVENTORIES / "mig-single.yaml")).nodes
    mig = next(n for n in nodes if n.name == "gpu-a100-mig-single-0")
    # gpu.count is 56 there: the number of MIG devices, which is no count of GPUs.
    assert gpu_facts(mig.labels, mig.allocatable).physical is None


def test_an_invalid_mig_single_configuration_is_not_read_as_slices() -> None:
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID",
        "nvidia.com/gpu.count": "0",
    }
    assert gpu_facts(labels, {"nvidia.com/gpu": 1}).device("nvidia.com/gpu", 1).kind == "whole"


@pytest.mark.parametrize(
    ("profile", "gpus"),
    [
        pytest.param(
            "1g.10gb", ["A100-40GB", "A100-80GB / H100-80GB / H800-80GB"], id="shared-name"
        ),
        pytest.param("3g.20gb", ["A100-40GB"], id="a100-40gb-slice"),
        pytest.param("1g.10bg", [], id="typo"),
    ],
)
def test_known_mig_profiles_name_their_gpus(profile: str, gpus: list[str]) -> None:
    assert mig_profile_gpus(profile) == gpus
