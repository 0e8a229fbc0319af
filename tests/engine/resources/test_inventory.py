import json

import pytest

from tests.builders import APISERVER
from webhook.engine.resources.inventory import (
    PAUSE_EVERY,
    Inventory,
    Node,
    Placement,
    Taint,
    node_from_json,
)

FIXTURES = APISERVER
GPU_TAINT = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def gpu_node(name: str, gpus: int, product: str, **extra: object) -> Node:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product}
    return Node(name, labels, taints=GPU_TAINT, allocatable={"nvidia.com/gpu": gpus}, **extra)  # type: ignore[arg-type]


def placement(**spec: object) -> Placement:
    return Placement.of({"tolerations": TOLERATE_GPU, **spec})


def test_nodes_are_read_from_the_api_servers_own_bytes() -> None:
    items = json.loads((FIXTURES / "node-list.json").read_text())["items"]
    nodes = {n.name: n for n in map(node_from_json, items)}
    mig = nodes["gpu-h100-mig-0"]
    assert mig.allocatable["nvidia.com/mig-1g.10gb"] == 14
    assert mig.allocatable["memory"] == 2000 * 2**30
    assert mig.allocatable["cpu"] == 190_000
    assert Taint("nvidia.com/gpu", "present", "NoSchedule") in mig.taints
    assert mig.ready
    assert "pods" not in mig.allocatable, "resources policy never asks about are dropped"


def test_the_largest_node_is_the_largest_the_placement_admits() -> None:
    inventory = Inventory(
        [gpu_node("a100", 8, "A100"), gpu_node("t4", 4, "T4"), gpu_node("h100", 16, "H100")]
    )
    t4_only = placement(nodeSelector={"nvidia.com/gpu.product": "T4"})
    assert inventory.largest("nvidia.com/gpu", t4_only).amount == 4
    assert inventory.largest("nvidia.com/gpu", placement()).node.name == "h100"  # type: ignore[union-attr]
    assert inventory.largest("nvidia.com/gpu").amount == 16


def test_untolerated_taints_and_cordons_exclude_nodes_but_condition_taints_do_not() -> None:
    not_ready = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
    inventory = Inventory(
        [
            Node("flaky", {}, taints=(*GPU_TAINT, not_ready), allocatable={"nvidia.com/gpu": 8}),
            gpu_node("cordoned", 16, "H100", unschedulable=True),
        ]
    )
    assert inventory.largest("nvidia.com/gpu", Placement.of({})).amount == 0
    assert inventory.largest("nvidia.com/gpu", placement()).amount == 8


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"nodeSelector": {"kubernetes.io/hostname": "node-7"}}, 8, id="hostname-selector"
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": ["node-2"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            4,
            id="match-fields",
        ),
    ],
)
def test_placements_that_name_nodes_are_judged_per_node_within_a_shape(
    spec: dict[str, object], expected: int
) -> None:
    nodes = [gpu_node(f"node-{i}", 8 if i % 2 else 4, "A100" if i % 2 else "T4") for i in range(40)]
    inventory = Inventory(nodes)
    assert len(inventory.shapes) == 2, "nodes differing only by hostname share a shape"
    assert inventory.largest("nvidia.com/gpu", placement(**spec)).amount == expected


def test_totals_count_declared_pool_nodes_up_to_their_size() -> None:
    pool = Node("nodepool/h100", {}, allocatable={"nvidia.com/gpu": 8}, pool="h100", count=4)
    inventory = Inventory([gpu_node("a", 8, "A100")]).with_nodes([pool])
    assert inventory.total("nvidia.com/gpu") == 40
    assert inventory.resource_names == {"nvidia.com/gpu"}


def shape_view(inventory: Inventory) -> set[tuple[object, ...]]:
    return {
        (
            tuple(sorted(s.labels.items())),
            s.taints,
            s.unschedulable,
            tuple(sorted(m.name for m in s.members)),
        )
        for s in inventory.shapes
    }


def test_an_updated_snapshot_equals_one_built_from_scratch() -> None:
    nodes = {
        f"n{i}": gpu_node(f"n{i}", 8 if i % 3 else 4, "A100" if i % 3 else "T4") for i in range(30)
    }
    first = Inventory(nodes.values(), resource_version="1")
    changes: dict[str, Node | None] = {
        "n0": None,
        "n1": gpu_node("n1", 16, "H100"),
        "n2": gpu_node("n2", 8, "A100", unschedulable=True),
        "new": gpu_node("new", 4, "L4"),
    }
    updated = first.updated(changes, resource_version="2")
    for name, node in changes.items():
        if node is None:
            nodes.pop(name)
        else:
            nodes[name] = node
    rebuilt = Inventory(nodes.values(), resource_version="2")
    assert shape_view(updated) == shape_view(rebuilt)
    assert updated.total("nvidia.com/gpu") == rebuilt.total("nvidia.com/gpu")
    assert updated.largest("nvidia.com/gpu", placement()).amount == 16
    assert updated.resource_version == "2"
    assert len(updated) == len(rebuilt)
    assert first.largest("nvidia.com/gpu", placement()).amount == 8, "the old snapshot is untouched"


def test_a_shape_whose_last_member_leaves_disappears() -> None:
    first = Inventory([gpu_node("a", 8, "A100"), gpu_node("t", 4, "T4")])
    updated = first.updated({"t": None}, resource_version="2")
    assert len(updated.shapes) == 1
    assert (
        updated.largest(
            "nvidia.com/gpu", placement(nodeSelector={"nvidia.com/gpu.product": "T4"})
        ).amount
        == 0
    )


def names(inventory: Inventory) -> set[str]:
    return {node.name for node in inventory.nodes}


def test_updating_an_older_snapshot_branches_without_touching_the_newer_one() -> None:
    first = Inventory([gpu_node("a", 8, "A100"), gpu_node("t", 4, "T4")], resource_version="1")
    newer = first.updated({"h": gpu_node("h", 16, "H100")}, resource_version="2")

    branch = first.updated({"t": None}, resource_version="2b")
    newest = newer.updated({"l": gpu_node("l", 4, "L4")}, resource_version="3")

    assert names(first) == {"a", "t"}
    assert names(newer) == {"a", "t", "h"}
    assert names(branch) == {"a"}
    assert names(newest) == {"a", "t", "h", "l"}
    assert len(newest) == 4
    assert branch.largest("nvidia.com/gpu", placement()).amount == 8
    assert newest.largest("nvidia.com/gpu", placement()).amount == 16


def test_pools_added_for_a_policy_never_leak_into_the_next_update() -> None:
    pool = Node("nodepool/h100", {}, allocatable={"nvidia.com/gpu": 8}, pool="h100", count=4)
    first = Inventory([gpu_node("a", 8, "A100")], resource_version="1")
    with_pool = first.with_nodes([pool])

    updated = first.updated({"b": gpu_node("b", 4, "T4")}, resource_version="2")

    assert names(with_pool) == {"a", "nodepool/h100"}
    assert names(updated) == {"a", "b"}
    assert updated.total("nvidia.com/gpu") == 12
    assert with_pool.total("nvidia.com/gpu") == 40


def test_an_update_pauses_every_few_changes_and_gives_what_an_unpaused_one_gives() -> None:
    first = Inventory([gpu_node(f"n{i}", 8, "A100") for i in range(40)], resource_version="1")
    changes: dict[str, Node | None] = {
        f"n{i}": gpu_node(f"n{i}", 4, "T4", unschedulable=True) for i in range(20)
    }
    pauses: list[None] = []

    paused = first.updated(changes, resource_version="2", pause=lambda: pauses.append(None))
    unpaused = Inventory(first.nodes, resource_version="1").updated(changes, resource_version="2")

    assert len(pauses) >= len(changes) // PAUSE_EVERY
    assert shape_view(paused) == shape_view(unpaused)


@pytest.mark.parametrize(
    ("node", "cordons"),
    [
        pytest.param(gpu_node("a", 8, "A100"), False, id="schedulable"),
        pytest.param(
            Node("n", {}, taints=(Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)),
            False,
            id="not-ready-taint",
        ),
        pytest.param(gpu_node("a", 8, "A100", unschedulable=True), True, id="spec-unschedulable"),
        pytest.param(
            Node("n", {}, taints=(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),)),
            True,
            id="unschedulable-taint",
        ),
    ],
)
def test_a_snapshot_says_whether_a_node_is_cordoned(node: Node, cordons: bool) -> None:
    inventory = Inventory([gpu_node("other", 4, "T4"), node])
    assert inventory.cordons is cordons
    healed = placement().healed()
    # Only a cordon tells a placement's nodes from those of its healed one.
    same = inventory.placeable(placement()) == inventory.placeable(healed)
    assert same is not cordons
    updated = Inventory([gpu_node("other", 4, "T4")]).updated(
        {node.name: node}, resource_version="2"
    )
    assert updated.cordons is cordons
    assert updated.updated({node.name: None}, resource_version="3").cordons is False
