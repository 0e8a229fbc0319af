"""Policy cost on DRA-only clusters (issue 31): a pod in a namespace whose rule keys on GPU
labels (the vision example: product affinity, allowedProducts, wholeGPUsOnly), asking for a
plain ``nvidia.com/gpu`` that a DeviceClass serves, judged against 10 and 10,000 DRA nodes.

Run: .venv/bin/python bench/dra_policy.py        (exit 1 when a target is missed)

The rule's affinity is planned against every GPU node and its devices are read for the
policy: both are remembered per snapshot, so the warm cost must not grow with the cluster
(10,000 vs 10 nodes, <= 1.2) and stays within a small multiple of the claim pod of
``bench/dra.py`` on the same nodes without a policy (<= 4.0).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dra import dra_objects, pod  # noqa: E402
from engine import median_seconds  # noqa: E402

from webhook.engine.evaluation.evaluate import evaluate  # noqa: E402
from webhook.engine.evaluation.request import InventoryView, Request  # noqa: E402
from webhook.engine.resources.devices import DeviceInventory  # noqa: E402
from webhook.engine.resources.inventory import Inventory, Node, Taint  # noqa: E402
from webhook.files.rulefiles import load_policy  # noqa: E402

GPU_TAINT = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
POLICY = load_policy(str(ROOT / "tests" / "cases" / "_rules" / "dra-policies"))
PLAIN = load_policy(str(ROOT / "rules"))


def view(count: int) -> InventoryView:
    """DRA-only: no nvidia.com/gpu in allocatable, no GFD labels; the class serves it."""
    nodes = [
        Node(
            name=f"gpu-{i}",
            labels={"kubernetes.io/hostname": f"gpu-{i}", "nvidia.com/gpu.present": "true"},
            taints=GPU_TAINT,
            allocatable={"cpu": 63000, "memory": 500 * 2**30},
        )
        for i in range(count)
    ]
    objects = dra_objects(count)
    for obj in objects:
        if obj["kind"] == "DeviceClass":
            obj["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return InventoryView(Inventory(nodes), devices=DeviceInventory.of(objects))


def main() -> int:
    policy_pod = pod(claim=False)
    policy_pod["metadata"]["namespace"] = "vision"
    in_vision = Request(policy_pod, namespace="vision")
    claim_pod = Request(pod(claim=True), namespace="team-a")
    costs = {}
    for count in (10, 10_000):
        inventory = view(count)
        decision = evaluate(in_vision, policy=POLICY, inventory=inventory)
        assert decision.findings, "the vision rule must be judged"
        costs[count] = median_seconds(
            lambda i=inventory: evaluate(in_vision, policy=POLICY, inventory=i), repeat=500
        )
        print(f"{count:>6} DRA nodes: policy pod, warm {costs[count] * 1000:.3f} ms")
    claim = median_seconds(
        lambda: evaluate(claim_pod, policy=PLAIN, inventory=inventory), repeat=500
    )
    growth = costs[10_000] / costs[10]
    against = costs[10_000] / claim
    print(f"  ratio 10,000 / 10 nodes: {growth:.2f} (target <= 1.20)")
    print(
        f"  against a claim pod without a policy ({claim * 1000:.3f} ms): {against:.2f} x "
        "(target <= 4.00)"
    )
    missed = growth > 1.2 or against > 4.0
    print("targets missed" if missed else "all targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
