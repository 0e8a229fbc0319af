"""Ill-typed objects reach /mutate before the API server checks a custom resource's schema:
the engine must answer for any JSON, never raise."""

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.ruleset import Policy
from webhook.files.inventoryfile import load_inventory
from webhook.files.rulefiles import load_policy

ROOT = Path(__file__).resolve().parents[3]
NODES = ROOT / "examples" / "inventory.yaml"
EVERY_FEATURE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: every-feature}
spec:
  match: {gpuCount: {min: 0}}
  validate:
    - maxGPUsPerPod: 8
    - allowedGPUCounts: [1, 2, 4, 8]
    - allowedProducts: ["NVIDIA-*"]
    - maxSharedGPUs: 1
    - requiredLabels: [team]
    - maxGPUsPerWorkload: 10
    - requireProbes: [liveness, startup]
    - allowedPriorityClasses: ["gpu-*"]
  mutate:
    runtimeClassName: nvidia
    avoidGPUNodes: {nodeLabel: nvidia.com/gpu.present, value: "true"}
    tolerations: [{key: example.com/x, operator: Exists}]
    nodeAffinity:
      required: [{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-A100-SXM4-80GB]}]
      preferred: [{weight: 5, matchExpressions: [{key: zone, operator: In, values: [a]}]}]
    env:
      hideGPUsFromNonGPUContainers: true
      gpuContainers: [{name: WORLD, value: "{gpuCount}", override: true}]
    memoryLimit: {inventoryShare: true}
    shm: {sizeLimit: 1Gi}
"""
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"team": "a"}},
    "spec": {
        "nodeSelector": {"zone": "a"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                    }
                ],
            }
        },
        "initContainers": [
            {
                "name": "side",
                "restartPolicy": "Always",
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ],
        "runtimeClassName": "kata",
        "priorityClassName": "gpu-high",
        "containers": [
            {
                "name": "cpu",
                "env": [
                    {"name": "D", "value": "0"},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(D)"},
                    {
                        "name": "NVIDIA_DRIVER_CAPABILITIES",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}},
                    },
                ],
                "envFrom": [{"configMapRef": {"name": "c"}}],
                "securityContext": {"privileged": True},
                "volumeMounts": [{"name": "dev", "mountPath": "/d", "subPath": "nvidia0"}],
                "livenessProbe": {"exec": {"command": ["nvidia-smi"]}},
                "resources": {"claims": [{"name": "gpu"}]},
            },
            {
                "name": "main",
                "resources": {
                    "requests": {"nvidia.com/gpu": "1", "memory": "1Gi"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
                "env": [{"name": "B", "value": "1"}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}],
            },
            {"name": "helper", "env": None},
        ],
        "volumes": [
            {"name": "v", "emptyDir": {}},
            {"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
        ],
    },
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "d"},
    "spec": {"replicas": 3, "template": {"metadata": POD["metadata"], "spec": POD["spec"]}},
}
JUNK = [5, "text", None, [], {}, [1], [None], {"a": 1}, True, -1, 1.5, [{"key": 5}]]


def paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if at:
        yield at
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*at, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, (*at, index))


def spoiled(obj: dict[str, Any], path: tuple[Any, ...], junk: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = copy.deepcopy(junk)
    return out


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    directory = tmp_path_factory.mktemp("rules")
    for rule in (ROOT / "rules").glob("*.yaml"):
        (directory / rule.name).write_text(rule.read_text())
    (directory / "50-every-feature.yaml").write_text(EVERY_FEATURE)
    return load_policy(str(directory))


@pytest.mark.parametrize(
    "original", [pytest.param(POD, id="pod"), pytest.param(DEPLOYMENT, id="deployment")]
)
def test_any_ill_typed_field_gets_a_decision_and_a_patch_that_applies(
    policy: Policy, original: dict[str, Any]
) -> None:
    inventory = InventoryView(load_inventory(str(NODES)), runtime_classes=frozenset({"nvidia"}))
    for path in list(paths(original)):
        for junk in JUNK:
            obj = spoiled(original, path, junk)
            for operation, old in (("CREATE", None), ("UPDATE", original)):
                decision = evaluate(
                    Request(obj, operation=operation, old_object=old),
                    policy=policy,
                    inventory=inventory,
                )
                patched = jsonpatch.apply_patch(copy.deepcopy(obj), list(decision.patch))
                assert patched == decision.mutated, (path, junk)
