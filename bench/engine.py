"""Engine cost: decision plus patch for a typical GPU pod, per the issue's targets.

Run: .venv/bin/python bench/engine.py        (exit 1 when a target is missed)

Figures are medians of many repetitions, and the node-count and rule-count targets are
ratios measured in the same run, because these machines are shared and noisy.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.engine.evaluation.evaluate import evaluate  # noqa: E402
from webhook.engine.evaluation.request import InventoryView, Request  # noqa: E402
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy  # noqa: E402
from webhook.engine.resources.inventory import Inventory, Node, Taint  # noqa: E402
from webhook.files.rulefiles import load_policy  # noqa: E402

# The target as a share of the naive pipeline's cost, so that it holds on any machine.
TARGET_SHARE = 0.15 / 0.57
PRODUCTS = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4", "NVIDIA-L4"]
GPU_TAINT = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)


def typical_pod() -> dict[str, Any]:
    """A training pod: one GPU container, one logging sidecar, labels, probes, volumes."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "team-a",
            "labels": {"app": "trainer", "team": "a", "workload-type": "training"},
            "annotations": {"example.com/owner": "alice"},
        },
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "containers": [
                {
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "command": ["torchrun", "--nproc-per-node=4", "train.py"],
                    "env": [{"name": "EPOCHS", "value": "10"}],
                    "resources": {
                        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
                        "limits": {"memory": "64Gi", "nvidia.com/gpu": "4"},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {
                    "name": "log-shipper",
                    "image": "fluent/fluent-bit:3.0",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                },
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }


def nodes(count: int) -> list[Node]:
    """A realistic mix: three quarters GPU nodes of four products, a quarter CPU nodes,
    each with its own hostname and instance id labels."""
    out = []
    for i in range(count):
        labels = {
            "kubernetes.io/hostname": f"node-{i}",
            "kubernetes.io/os": "linux",
            "topology.kubernetes.io/zone": f"zone-{i % 3}",
            "node.kubernetes.io/instance-id": f"i-{i:08x}",
        }
        if i % 4 == 3:
            out.append(Node(f"node-{i}", labels, allocatable={"cpu": 32000, "memory": 128 << 30}))
            continue
        product = PRODUCTS[i % len(PRODUCTS)]
        gpus = 8 if "A100" in product or "H100" in product else 4
        labels |= {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
        out.append(
            Node(
                f"node-{i}",
                labels,
                taints=GPU_TAINT,
                allocatable={"cpu": 96000, "memory": 1024 << 30, "nvidia.com/gpu": gpus},
            )
        )
    return out


def many_rules(count: int) -> Policy:
    docs = []
    for i in range(count):
        body = {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicy",
            "metadata": {"name": f"rule-{i}"},
            "spec": {
                "order": i,
                "match": {"namespaces": [f"team-{i}", "team-a"] if i % 10 == 0 else [f"team-{i}"]},
                "validate": [{"maxGPUsPerPod": 8}],
                "mutate": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
            },
        }
        docs.append(RuleDocument(DocumentRef("bench", i, "GPUPolicy", f"rule-{i}"), body))
    return compile_policy(docs)


def interleaved_medians(
    fns: dict[str, Callable[[], object]], *, rounds: int = 40, batch: int = 50
) -> dict[str, float]:
    """The median seconds of each function, sampled in turns of ``batch`` calls: a slow
    spell of a shared machine then falls on every figure alike, so the ratios between them
    hold (timed one phase after another, a spell during one phase broke them). A turn of
    many calls keeps each warm in the caches, as the phase-by-phase timing did."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for turn in range(rounds + 4):
        for name, fn in fns.items():
            for _ in range(batch):
                start = time.perf_counter()
                fn()
                if turn >= 4:  # the first turns warm up
                    samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def median_seconds(fn: Callable[[], object], *, repeat: int = 2000) -> float:
    for _ in range(200):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    pod = typical_pod()
    default = load_policy(str(ROOT / "rules"))
    views = {n: InventoryView(Inventory(nodes(n))) for n in (10, 5000, 10000)}

    def run(policy: Policy, view: InventoryView) -> Callable[[], object]:
        return lambda: evaluate(Request(pod), policy=policy, inventory=view)

    decision = evaluate(Request(pod), policy=default, inventory=views[5000])
    assert decision.allowed, "the typical pod should be allowed"
    assert decision.patch, "the typical pod should be patched"
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), list(decision.patch))
    assert patched == decision.mutated, "the patch must produce the mutated object"

    mutated = decision.mutated
    timed = interleaved_medians(
        {
            "5000": run(default, views[5000]),
            "10": run(default, views[10]),
            "10000": run(default, views[10000]),
            "make_patch": lambda: jsonpatch.make_patch(pod, mutated),
        }
    )
    t5000, t10, t10000 = timed["5000"], timed["10"], timed["10000"]
    t_make_patch = timed["make_patch"]
    rules = many_rules(1000)
    t_rules = median_seconds(run(rules, views[5000]), repeat=300)

    growth = t10000 / t10
    print(
        f"decision+patch, default rules, 5,000 nodes: {t5000 * 1e3:.3f} ms median (target <= 0.15 ms)"
    )
    print(
        f"  10 nodes {t10 * 1e3:.3f} ms, 10,000 nodes {t10000 * 1e3:.3f} ms: ratio {growth:.2f} (target <= 1.20)"
    )
    print(f"1,000 rules, 5,000 nodes: {t_rules * 1e3:.3f} ms median (target <= 2 ms)")
    share = t5000 / t_make_patch
    print(
        f"baseline in this run: jsonpatch.make_patch alone {t_make_patch * 1e3:.3f} ms; engine = "
        f"{share:.3f} x make_patch (target <= {TARGET_SHARE:.2f}: 0.15 ms against the 0.57 ms "
        "the issue measured for make_patch)"
    )
    ok = t5000 <= 0.15e-3 and share <= TARGET_SHARE and growth <= 1.2 and t_rules <= 2e-3
    print("all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
