"""Autoscaler objects read from a file (and, the same way, from the API server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.engine.resources.nodepools import cluster_autoscaler_groups
from webhook.files.inventoryfile import InventoryFileError, load_inventory_file
from webhook.files.poolobjects import pool_inventory, status_of

INVENTORIES = Path(__file__).resolve().parents[1] / "cases" / "_inventories"
# The text status cluster-autoscaler wrote before 1.30 (clusterstate/utils/status.go).
LEGACY = """Cluster-autoscaler status at 2024-01-01 00:00:00.000000000 +0000 UTC:
Cluster-wide:
  Health:      Healthy (ready=1 unready=0 notStarted=0 longNotStarted=0 registered=1 longUnregistered=0)

NodeGroups:
  Name:        cpu-pool
  Health:      Healthy (ready=1 unready=0 notStarted=0 longNotStarted=0 registered=1 longUnregistered=0 cloudProviderTarget=1 (minSize=1, maxSize=5))
  Name:        gpu-pool
  Health:      Healthy (ready=0 unready=0 notStarted=0 longNotStarted=0 registered=0 longUnregistered=0 cloudProviderTarget=0 (minSize=0, maxSize=3))
"""


def test_the_yaml_status_names_the_node_groups_at_size_zero() -> None:
    found = load_inventory_file(str(INVENTORIES / "cluster-autoscaler.yaml")).pools
    assert found is not None
    assert [(a.kind, a.name) for a in found.autoscalers] == [
        ("cluster-autoscaler", "gpu-a100-pool")
    ]


def test_the_text_status_of_older_autoscalers_names_them_too() -> None:
    configmap = {"data": {"status": LEGACY}}
    groups = cluster_autoscaler_groups(status_of(configmap))
    assert [g.name for g in groups] == ["gpu-pool"]
    assert groups[0].reason == "node group at size 0 (max 3): its nodes' shape is not in the API"


@pytest.mark.parametrize(
    "message",
    [
        # NewStatusMapRecorder, as the autoscaler starts (clusterstate/utils/status.go).
        pytest.param("Initializing", id="starting"),
        # OnEmptyCluster (processors/actionablecluster/actionable_cluster_processor.go).
        pytest.param("Cluster has no ready nodes.", id="waiting for ready nodes"),
        pytest.param("Cluster has no nodes.", id="waiting for nodes"),
    ],
)
def test_a_text_status_that_is_a_message_is_an_autoscaler_of_unknown_groups(message: str) -> None:
    text = f"Cluster-autoscaler status at 2023-06-01 12:00:00.123456789 +0000 UTC:\n{message}"
    (only,) = cluster_autoscaler_groups(status_of({"data": {"status": text}}))
    assert only.reason == f'its status says "{message}", not its node groups: node groups unknown'


def test_a_text_report_without_node_groups_is_an_autoscaler_that_has_none() -> None:
    """GetReadableString leaves ``NodeGroups:`` out only when there are none."""
    report = LEGACY.partition("\nNodeGroups:")[0] + "\n"
    assert cluster_autoscaler_groups(status_of({"data": {"status": report}})) == ()


def test_an_unreadable_status_is_an_autoscaler_of_unknown_groups() -> None:
    (only,) = cluster_autoscaler_groups(status_of({"data": {}}))
    assert "node groups unknown" in only.reason


def test_a_compute_class_is_read_with_its_priorities_labels_and_taints() -> None:
    found = pool_inventory(
        [
            {
                "apiVersion": "cloud.google.com/v1",
                "kind": "ComputeClass",
                "metadata": {"name": "l4"},
                "spec": {
                    "whenUnsatisfiable": "DoNotScaleUp",
                    "priorities": [
                        {"machineFamily": "g2", "gpu": {"type": "nvidia-l4", "count": 2}},
                        {"nodepools": ["existing"]},
                    ],
                    "nodePoolConfig": {
                        "nodeLabels": {"team": "ml"},
                        "taints": [{"key": "ml", "value": "x", "effect": "NoSchedule"}],
                    },
                },
            }
        ]
    )
    assert found
    assert not found.autoscalers
    (only,) = found.compute_classes
    assert only.do_not_scale_up
    assert only.labels == {"team": "ml"}
    assert only.priorities[0].gpu_count == 2
    assert only.priorities[0].machine_family == "g2"
    assert "names node pools" in only.priorities[1].unsized
    assert only.autoscaler("why").selector == {"cloud.google.com/compute-class": "l4"}


def test_node_classes_are_known_only_when_some_are_listed() -> None:
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {},
    }
    cls = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "d"}}
    assert pool_inventory([pool]).node_classes is None
    assert pool_inventory([pool, cls]).node_classes == frozenset(
        {("karpenter.k8s.aws", "EC2NodeClass", "d")}
    )


def test_an_inventory_file_with_objects_it_cannot_read_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        (INVENTORIES / "karpenter-limits.yaml").read_text()
        + "- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: x}\n"
    )
    with pytest.raises(InventoryFileError) as raised:
        load_inventory_file(str(path))
    assert "autoscaler objects (NodePools, node classes, ComputeClasses" in str(raised.value)
    assert str(raised.value).endswith(": Deployment")


def test_a_node_overlay_that_adds_capacity_makes_sizes_unknown_and_one_that_prices_does_not() -> (
    None
):
    """kubernetes-sigs/karpenter pkg/apis/v1alpha1/nodeoverlay.go: spec.capacity, spec.price."""

    def overlay(name: str, spec: dict[str, object]) -> dict[str, object]:
        return {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": spec,
        }

    found = pool_inventory(
        [
            overlay("mig", {"capacity": {"nvidia.com/mig-1g.10gb": "56"}}),
            overlay("discount", {"priceAdjustment": "-10%"}),
        ]
    )
    assert [(a.kind, a.name) for a in found.autoscalers] == [("Karpenter NodeOverlay", "mig")]
    assert "nvidia.com/mig-1g.10gb" in found.autoscalers[0].reason


@pytest.mark.parametrize(
    ("status", "groups"),
    [
        pytest.param(
            LEGACY.replace("Name:        gpu-pool", "Name:        "),
            [("(unnamed node group 2)", "node group at size 0 (max 3)")],
            id="a group with an empty ProviderID",
        ),
        pytest.param(
            LEGACY.replace(
                "Healthy (ready=0 unready=0 notStarted=0 longNotStarted=0 registered=0 "
                "longUnregistered=0 cloudProviderTarget=0 (minSize=0, maxSize=3))",
                "Unhealthy",
            ),
            [("gpu-pool", "no node count or maximum")],
            id="a Health line without counts",
        ),
        pytest.param(
            "some other autoscaler's notes",
            [("cluster-autoscaler", "no format")],
            id="not the text",
        ),
        pytest.param(
            "Cluster-wide:\n  Health:      Healthy (ready=1 registered=1)\n",
            [],
            id="must not fire: no node groups at all",
        ),
        pytest.param(
            {"clusterWide": {"health": {"status": "Healthy"}}},
            [],
            id="must not fire: YAML without nodeGroups",
        ),
    ],
)
def test_a_status_read_in_part_is_an_autoscaler_of_unknown_size(
    status: object, groups: list[tuple[str, str]]
) -> None:
    found = cluster_autoscaler_groups(status)
    assert [g.name for g in found] == [name for name, _ in groups]
    for group, (_, reason) in zip(found, groups, strict=True):
        assert reason in group.reason
