"""The memoised answers of a snapshot, and how a live cache warms the next one."""

from __future__ import annotations

import json

from tests.builders import APISERVER
from webhook.engine.resources.inventory import Inventory, Node, Placement, Taint, node_from_json

FIXTURES = APISERVER
GPU = "nvidia.com/gpu"
GPU_TAINT = (Taint(GPU, "present", "NoSchedule"),)
TOLERATE_GPU = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


def gpu_node(name: str, gpus: int, product: str) -> Node:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product}
    return Node(name, labels, taints=GPU_TAINT, allocatable={GPU: gpus})


def on(product: str) -> Placement:
    return Placement.of(
        {"tolerations": TOLERATE_GPU, "nodeSelector": {"nvidia.com/gpu.product": product}}
    )


def test_a_list_returned_by_admitted_can_be_changed_without_changing_later_answers() -> None:
    inventory = Inventory([gpu_node("a", 8, "A100"), gpu_node("b", 8, "A100")])
    first = inventory.admitted(GPU, on("A100"))
    first.clear()
    assert len(inventory.admitted(GPU, on("A100"))) == 1
    assert inventory.admitted(GPU, on("A100"))[0].node_count == 2


def test_the_same_placement_asked_for_another_resource_gets_its_own_answer() -> None:
    mig = Node(
        "h100",
        {"nvidia.com/gpu.product": "H100"},
        taints=GPU_TAINT,
        allocatable={GPU: 4, "nvidia.com/mig-1g.10gb": 14},
    )
    inventory = Inventory([mig])
    assert inventory.largest(GPU, on("H100")).amount == 4
    assert inventory.largest("nvidia.com/mig-1g.10gb", on("H100")).amount == 14
    assert inventory.largest("nvidia.com/mig-3g.40gb", on("H100")).node is None


def test_a_new_snapshot_prepared_like_the_last_answers_as_if_built_alone() -> None:
    before = Inventory([gpu_node("a", 8, "A100"), gpu_node("t", 4, "T4")])
    for product in ("A100", "T4", "H100"):
        before.largest(GPU, on(product))
    after = Inventory([gpu_node("a", 16, "A100"), gpu_node("t", 4, "T4")])
    after.prepare_like(before)
    fresh = Inventory([gpu_node("a", 16, "A100"), gpu_node("t", 4, "T4")])
    for product in ("A100", "T4", "H100"):
        assert after.largest(GPU, on(product)) == fresh.largest(GPU, on(product))
        assert after.admitted(GPU, on(product)) == fresh.admitted(GPU, on(product))
    assert after.largest(GPU, on("A100")).amount == 16


def test_nodes_read_from_json_share_one_copy_of_each_label_string() -> None:
    items = json.loads((FIXTURES / "node-list.json").read_text())["items"]
    # Parsed apart, as watch events are: json.loads shares keys only within one document.
    a100 = node_from_json(json.loads(json.dumps(items[1])))
    t4 = node_from_json(json.loads(json.dumps(items[3])))
    key_a = next(k for k in a100.labels if k == "nvidia.com/gpu.present")
    key_t = next(k for k in t4.labels if k == "nvidia.com/gpu.present")
    assert key_a is key_t
    assert a100.labels[key_a] is t4.labels[key_t]
