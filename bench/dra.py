"""DRA cost: a pod whose GPUs come from a claim, judged against 10 and 10,000 DRA nodes.

Run: .venv/bin/python bench/dra.py        (exit 1 when a target is missed)

Each node publishes one ResourceSlice of 8 GPUs, as NVIDIA's DRA driver does, with
per-device uuids and bus ids (identity attributes: nodes of one kind still share one
profile). Targets are ratios measured in this run: the warm cost of a claim pod must not
grow with the cluster (10,000 vs 10 nodes, <= 1.2), and stays within a small multiple of
the same pod asking for ``nvidia.com/gpu`` from a device plugin (<= 3.0). Reported, not
targeted: parsing the list (once, in the cache's thread), building a snapshot from parsed
objects (once per change), and the first answer after a new snapshot (once per change and
placement; the very first one also groups every slice's devices).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine import median_seconds  # noqa: E402

from webhook.engine.evaluation.evaluate import evaluate  # noqa: E402
from webhook.engine.evaluation.request import InventoryView, Request  # noqa: E402
from webhook.engine.resources.devices import DeviceInventory, slice_from_json  # noqa: E402
from webhook.engine.resources.inventory import Inventory, Node, Taint  # noqa: E402
from webhook.files.rulefiles import load_policy  # noqa: E402

PRODUCTS = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
GPU_TAINT = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
SELECTOR = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"


def nodes(count: int) -> list[Node]:
    return [
        Node(
            name=f"gpu-{i}",
            labels={"kubernetes.io/hostname": f"gpu-{i}", "nvidia.com/gpu.present": "true"},
            taints=GPU_TAINT,
            allocatable={"cpu": 63000, "memory": 500 * 2**30, "nvidia.com/gpu": 8},
        )
        for i in range(count)
    ]


def dra_objects(count: int) -> list[dict[str, Any]]:
    expression = (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "four-h100", "namespace": "team-a"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpus",
                                "exactly": {
                                    "deviceClassName": "gpu.nvidia.com",
                                    "count": 4,
                                    "selectors": [{"cel": {"expression": SELECTOR}}],
                                },
                            }
                        ]
                    }
                }
            },
        },
    ]
    for i in range(count):
        devices = [
            {
                "name": f"gpu-{g}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": f"GPU-{i:05d}-{g}"},
                    "productName": {"string": PRODUCTS[i % 2]},
                    "pcieBusID": {"string": f"0000:{0x18 + g:02x}:00.0"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for g in range(8)
        ]
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"gpu-{i}-gpu.nvidia.com"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": f"gpu-{i}",
                    "pool": {"name": f"gpu-{i}", "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return objects


def pod(*, claim: bool) -> dict[str, Any]:
    resources: dict[str, Any] = (
        {"claims": [{"name": "gpus"}]} if claim else {"limits": {"nvidia.com/gpu": "4"}}
    )
    spec: dict[str, Any] = {
        "containers": [
            {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": resources},
            {"name": "logs", "image": "fluent/fluent-bit:3.1"},
        ]
    }
    if claim:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four-h100"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "t", "namespace": "team-a"},
        "spec": spec,
    }


def main() -> int:
    policy = load_policy(str(ROOT / "rules"))
    views = {}
    for count in (10, 10_000):
        objects = dra_objects(count)
        base = DeviceInventory.of(o for o in objects if o["kind"] != "ResourceSlice")
        started = time.perf_counter()
        slices = [slice_from_json(o) for o in objects if o["kind"] == "ResourceSlice"]
        parsed = time.perf_counter() - started

        def build(slices: list[Any] = slices, base: DeviceInventory = base) -> DeviceInventory:
            return DeviceInventory(base.classes, slices, base.claims, base.templates)

        started = time.perf_counter()
        devices = build()
        built = time.perf_counter() - started
        node_inventory = Inventory(nodes(count))
        firsts = []
        for snapshot in (devices, build()):
            view = InventoryView(node_inventory, devices=snapshot)
            started = time.perf_counter()
            decision = evaluate(Request(pod(claim=True)), policy=policy, inventory=view)
            firsts.append(time.perf_counter() - started)
            assert decision.allowed, decision
            assert decision.patch, decision
        print(
            f"{count:>6} DRA nodes: list parsed in {parsed * 1e3:.0f} ms, snapshot built in "
            f"{built * 1e3:.1f} ms, first answer {firsts[0] * 1e3:.1f} ms, first answer after "
            f"a rebuild {firsts[1] * 1e3:.1f} ms"
        )
        views[count] = view
    claim_pod, plugin_pod = pod(claim=True), pod(claim=False)
    t10 = median_seconds(lambda: evaluate(Request(claim_pod), policy=policy, inventory=views[10]))
    t10k = median_seconds(
        lambda: evaluate(Request(claim_pod), policy=policy, inventory=views[10_000])
    )
    plugin = median_seconds(
        lambda: evaluate(Request(plugin_pod), policy=policy, inventory=views[10_000])
    )
    growth, share = t10k / t10, t10k / plugin
    print(f"claim pod, warm: 10 nodes {t10 * 1e3:.3f} ms, 10,000 nodes {t10k * 1e3:.3f} ms")
    print(f"  ratio 10,000 / 10 nodes: {growth:.2f} (target <= 1.20)")
    print(
        f"  against the same pod with nvidia.com/gpu from a device plugin ({plugin * 1e3:.3f} ms, "
        f"this run): {share:.2f} x (target <= 3.00)"
    )
    ok = growth <= 1.2 and share <= 3.0
    print("all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
