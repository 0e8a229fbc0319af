"""The node cache's published snapshots, built with pauses for requests during a burst."""

from __future__ import annotations

import time

import pytest

from webhook.cluster.sources.inventorysource import NodeCache
from webhook.engine.resources.inventory import PAUSE_EVERY, Inventory, Node


def gpu_node(name: str, gpus: int, *, cordoned: bool = False) -> Node:
    return Node(
        name,
        {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": f"GPU-{gpus}"},
        unschedulable=cordoned,
        allocatable={"nvidia.com/gpu": gpus},
    )


def shapes(inventory: Inventory) -> set[tuple[object, ...]]:
    return {
        (
            s.unschedulable,
            tuple(sorted(s.allocatable.items())),
            tuple(sorted(m.name for m in s.members)),
        )
        for s in inventory.shapes
    }


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(1, id="one change"),
        pytest.param(PAUSE_EVERY, id="one step"),
        pytest.param(PAUSE_EVERY * 3 + 5, id="several steps"),
    ],
)
def test_a_burst_is_published_as_the_snapshot_a_full_rebuild_gives(changed):
    cache = NodeCache(clock=time.monotonic, publish_interval_seconds=0.0)
    nodes = {f"n{i}": gpu_node(f"n{i}", 8 if i % 2 else 4) for i in range(100)}
    cache.replace(list(nodes.values()), "1")
    cache.publish()
    for i in range(changed):
        name = f"n{i}"
        nodes[name] = gpu_node(name, 2, cordoned=True) if i % 3 else gpu_node(name, 16)
        cache.apply("MODIFIED", nodes[name], str(2 + i))
    cache.apply("DELETED", Node(name="n99"), "900")
    nodes.pop("n99")

    cache.publish()

    published = cache.published
    assert published is not None
    assert published.resource_version == "900"
    assert shapes(published) == shapes(Inventory(nodes.values()))
    assert len(published) == len(nodes)
