"""GKE's ComputeClasses and node auto-provisioning sized through the catalogue's GCP rows,
and left of unknown size wherever GKE's choice is not bounded."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.resources.instancetypes import Allowance, instance_type_from_data
from webhook.engine.resources.inventory import Placement
from webhook.engine.resources.nodepools import Autoscaler, compute_class_from_json
from webhook.engine.scheduling.gke import nap_pools, size_compute_classes
from webhook.files.shipped import shipped_catalogue

CATALOGUE = shipped_catalogue()


def compute_class(spec: dict[str, Any], name: str = "gpu") -> Any:
    return compute_class_from_json(
        {
            "apiVersion": "cloud.google.com/v1",
            "kind": "ComputeClass",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def sized(spec: dict[str, Any]) -> Any:
    return size_compute_classes([compute_class(spec)], catalogue=CATALOGUE, allowance=Allowance())


def selecting(**selector: str) -> Placement:
    return Placement.of({"nodeSelector": selector})


@pytest.mark.parametrize(
    ("priorities", "types"),
    [
        pytest.param(
            [{"gpu": {"type": "nvidia-l4", "count": 1}}],
            {
                "g2-standard-4",
                "g2-standard-8",
                "g2-standard-12",
                "g2-standard-16",
                "g2-standard-32",
            },
            id="gpu-type-and-count",
        ),
        pytest.param([{"machineType": "a3-highgpu-8g"}], {"a3-highgpu-8g"}, id="machine-type"),
        pytest.param(
            [{"machineFamily": "a2", "gpu": {"type": "nvidia-a100-80gb", "count": 8}}],
            {"a2-ultragpu-8g"},
            id="family-and-gpu",
        ),
        pytest.param(
            [{"machineFamily": "g2", "minCores": 48}, {"machineType": "a2-highgpu-1g"}],
            {"g2-standard-48", "g2-standard-96", "a2-highgpu-1g"},
            id="min-cores-and-fallback",
        ),
        pytest.param(
            [{"machineFamily": "n4"}, {"machineType": "g2-standard-4"}],
            {"g2-standard-4"},
            id="a-cpu-family-adds-nothing",
        ),
    ],
)
def test_a_class_that_keeps_gke_to_its_priorities_is_sized_by_them(
    priorities: list[dict[str, Any]], types: set[str]
) -> None:
    found = sized({"whenUnsatisfiable": "DoNotScaleUp", "priorities": priorities})
    assert not found.unbounded
    (pool,) = found.resolved
    assert {t.instance.name for t in pool.types} == types
    assert {n.name.rsplit("/", 1)[1] for n in found.nodes} == types


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        pytest.param(
            {"priorities": [{"machineType": "a3-highgpu-8g"}]},
            "without whenUnsatisfiable: DoNotScaleUp",
            id="scale-up-anyway",
        ),
        pytest.param(
            {"whenUnsatisfiable": "DoNotScaleUp", "priorities": [{"nodepools": ["gpu-pool"]}]},
            "names node pools",
            id="node-pools",
        ),
        pytest.param(
            {"whenUnsatisfiable": "DoNotScaleUp", "priorities": [{"spot": True}]},
            "leaves the machine type to GKE",
            id="machine-left-to-gke",
        ),
        pytest.param(
            {
                "whenUnsatisfiable": "DoNotScaleUp",
                "priorities": [
                    {"machineFamily": "n1", "gpu": {"type": "nvidia-tesla-t4", "count": 4}}
                ],
            },
            "nvidia-tesla-t4 is on machine types the catalogue lacks",
            id="n1-attached-gpus",
        ),
        pytest.param(
            {"whenUnsatisfiable": "DoNotScaleUp", "priorities": [{"machineType": "g4-standard-6"}]},
            "machine type g4-standard-6 is not in the catalogue",
            id="unlisted-gpu-machine-type",
        ),
    ],
)
def test_a_class_whose_machines_gke_may_choose_freely_is_of_unknown_size(
    spec: dict[str, Any], why: str
) -> None:
    found = sized(spec)
    assert not found.nodes
    assert not found.resolved
    (pool,) = found.unbounded
    assert why in pool.reason
    assert pool.admits(selecting(**{"cloud.google.com/compute-class": "gpu"}))
    assert not pool.admits(selecting(**{"cloud.google.com/compute-class": "other"}))


def test_a_sized_class_takes_pods_by_its_labels_and_taints() -> None:
    found = sized(
        {
            "whenUnsatisfiable": "DoNotScaleUp",
            "priorities": [{"machineType": "g2-standard-96"}],
            "nodePoolConfig": {
                "nodeLabels": {"team": "ml"},
                "taints": [{"key": "ml", "value": "yes", "effect": "NoSchedule"}],
            },
        }
    )
    (node,) = found.nodes
    assert node.allocatable["nvidia.com/gpu"] == 8
    tolerant = [{"key": "ml", "operator": "Exists"}]

    def admits(selector: dict[str, str], tolerations: list[dict[str, str]] = tolerant) -> bool:
        return node.admits(Placement.of({"nodeSelector": selector, "tolerations": tolerations}))  # type: ignore[misc]

    assert admits({"cloud.google.com/compute-class": "gpu", "team": "ml"})
    assert admits({"cloud.google.com/gke-accelerator": "nvidia-l4"})
    assert admits({"topology.kubernetes.io/zone": "us-central1-a"}), (
        "an unmodelled GKE label is not judged"
    )
    assert not admits({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"})
    assert not admits({"cloud.google.com/compute-class": "other"})
    assert not admits({"team": "web"})
    assert not admits({"cloud.google.com/compute-class": "gpu"}, tolerations=[])


NAP = Autoscaler("GKE node auto-provisioning", "node auto-provisioning", "auto-provisioned")


@pytest.mark.parametrize(
    ("selector", "pinned"),
    [
        pytest.param(
            {"cloud.google.com/gke-accelerator": "nvidia-l4"}, True, id="listed-accelerator"
        ),
        pytest.param({"cloud.google.com/machine-family": "a3"}, True, id="listed-family"),
        pytest.param({"node.kubernetes.io/instance-type": "a2-highgpu-8g"}, True, id="listed-type"),
        pytest.param({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, False, id="n1-t4"),
        pytest.param({}, False, id="nothing-selected"),
    ],
)
def test_auto_provisioning_is_bounded_only_for_pods_that_select_listed_machines(
    selector: dict[str, str], pinned: bool
) -> None:
    nodes, unknown = nap_pools(NAP, catalogue=CATALOGUE, allowance=Allowance())
    placement = selecting(**selector)
    assert unknown.admits(placement) is not pinned
    taking = {n.name.rsplit("/", 1)[1] for n in nodes if n.admits(placement)}  # type: ignore[misc]
    assert bool(taking) is pinned
    if selector.get("cloud.google.com/gke-accelerator") == "nvidia-l4":
        assert all(name.startswith("g2-") for name in taking)


def test_gke_nodes_keep_back_what_gke_reserves_not_what_karpenter_on_aws_would() -> None:
    row = CATALOGUE.get("gcp", "a3-highgpu-8g")
    assert row is not None
    allocatable = Allowance().allocatable(row)
    gib = 2**30
    # 1,872 GiB: GKE up to 1.36 keeps 1 + 0.8 + 0.8 + 6.72 GiB and 2 % of the other 1,744
    # (34.88 GiB); from 1.37 at most 15 MiB x 110 pods plus a base: the lesser, 1,650 MiB,
    # and 100 MiB for eviction. Karpenter's 7.5 % alone would keep back 140 GiB.
    assert allocatable["memory"] == 1872 * gib - (1650 + 100) * 2**20
    small = CATALOGUE.get("gcp", "g2-standard-4")
    assert small is not None
    # 16 GiB: the tiers keep 1 + 0.8 + 0.8 GiB = 2,662 MiB, more than 1,650: the lesser.
    assert Allowance().allocatable(small)["memory"] == (16384 - 1650 - 100) * 2**20
    assert allocatable["cpu"] == 208_000 - 60 - 10 - 10 - 510


def test_an_instance_type_row_for_an_unlisted_machine_makes_its_rules_sizable() -> None:
    share = instance_type_from_data(
        {
            "provider": "gcp",
            "name": "g4-standard-6",
            "gpu": {
                "resource": "nvidia.com/gpu",
                "model": "NVIDIA RTX PRO 6000 (1/8)",
                "count": 1,
                "memoryMiB": 12288,
            },
            "vcpu": 6,
            "memoryMiB": 22528,
            "labels": {
                "cloud.google.com/machine-family": "g4",
                "cloud.google.com/gke-accelerator": "nvidia-rtx-pro-6000",
                "cloud.google.com/gke-accelerator-count": "1",
            },
            "source": "https://cloud.google.com/compute/docs/gpus",
        },
        where="test",
    )
    spec = {"whenUnsatisfiable": "DoNotScaleUp", "priorities": [{"machineType": "g4-standard-6"}]}
    assert sized(spec).unbounded
    found = size_compute_classes(
        [compute_class(spec)], catalogue=CATALOGUE.extended([share]), allowance=Allowance()
    )
    assert [n.name for n in found.nodes] == ["nodepool/gpu/g4-standard-6"]
