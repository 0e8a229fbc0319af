"""The inventory feed's wire format: a node survives the trip whole, and a long node list
travels in short lines."""

from __future__ import annotations

import pytest

from webhook.cluster.sources import feedwire
from webhook.engine.resources.inventory import Node, Taint

A100 = Node(
    name="gpu-a100-0",
    labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    taints=(Taint("nvidia.com/gpu", "", "NoSchedule"), Taint("dedicated", "ml", "NoExecute")),
    unschedulable=True,
    ready=False,
    allocatable={"nvidia.com/gpu": 8, "cpu": 95_500},
    capacity={"nvidia.com/gpu": 8, "cpu": 96_000, "memory": 1 << 40},
)


def sent_and_received(messages: list[feedwire.Message]) -> list[feedwire.Message]:
    return [feedwire.decode(line) for line in feedwire.encode(*messages).splitlines()]


def test_a_node_arrives_equal_to_the_one_sent() -> None:
    (message,) = sent_and_received([{"t": "upsert", "node": feedwire.node_record(A100)}])
    assert feedwire.node_from_record(message["node"]) == A100


@pytest.mark.parametrize(
    ("count", "lines"),
    [
        pytest.param(0, 0, id="no-nodes"),
        pytest.param(feedwire.NODES_PER_LINE, 1, id="one-full-line"),
        pytest.param(2 * feedwire.NODES_PER_LINE + 5, 3, id="two-lines-and-a-part"),
    ],
)
def test_a_node_list_travels_in_lines_of_a_few_nodes(count: int, lines: int) -> None:
    nodes = [Node(name=f"node-{i}", labels={"i": str(i)}) for i in range(count)]
    head, *chunks = sent_and_received(feedwire.node_list(nodes, resource_version="42"))
    assert head == {"t": "nodes", "rv": "42", "lines": lines}
    assert len(chunks) == lines
    received = [feedwire.node_from_record(r) for chunk in chunks for r in chunk["nodes"]]
    assert received == nodes


def test_a_line_that_is_not_a_feed_message_is_refused() -> None:
    with pytest.raises(ValueError, match="not an inventory feed message"):
        feedwire.decode(b'["t", "state"]\n')
