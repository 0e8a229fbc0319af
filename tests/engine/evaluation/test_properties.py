"""Properties of evaluation over generated pods: the patch is exact, mutation is idempotent,
the original is never touched, and a pod is judged the same in every workload kind."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView, Request
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy
from webhook.files.inventoryfile import load_inventory

CLUSTER = Path(__file__).resolve().parents[2] / "cases" / "_inventories" / "cluster.yaml"
INVENTORY = InventoryView(load_inventory(str(CLUSTER)))
WORKLOAD_CHECKS = {"builtin/clusterCapacity", "team/maxGPUsPerWorkload"}


def _doc(kind: str, name: str, spec: dict[str, Any]) -> RuleDocument:
    body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": kind, "metadata": {"name": name}}
    return RuleDocument(DocumentRef("properties", 1, kind, name), {**body, "spec": spec})


PRODUCT = "nvidia.com/gpu.product"
# Every mutation and most checks at once, so that they interact.
POLICY: Policy = compile_policy(
    [
        _doc(
            "GPUPolicy",
            "nvidia-gpu-taint",
            {
                "order": 10,
                "match": {"resources": ["nvidia.com/*"]},
                "mutate": {
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ]
                },
            },
        ),
        _doc(
            "GPUPolicy",
            "placement",
            {
                "order": 20,
                "match": {"resources": ["nvidia.com/gpu"]},
                "mutate": {
                    "nodeAffinity": {
                        "required": [
                            {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
                        ],
                        "preferred": [
                            {
                                "weight": 50,
                                "matchExpressions": [
                                    {"key": PRODUCT, "operator": "In", "values": ["Tesla-T4"]}
                                ],
                            }
                        ],
                    }
                },
            },
        ),
        _doc(
            "GPUPolicy",
            "containers",
            {
                "order": 30,
                "mutate": {
                    "env": {
                        "hideGPUsFromNonGPUContainers": True,
                        "gpuContainers": [
                            {"name": "LOCAL_WORLD_SIZE", "value": "{gpuCount}", "override": True},
                            {"name": "GPUS", "value": "{gpuIndexes}"},
                        ],
                    },
                    "memoryLimit": {"perGPU": "16Gi"},
                    "shm": {"sizeLimit": "8Gi"},
                },
            },
        ),
        _doc(
            "GPUPolicy",
            "access",
            {
                "order": 35,
                "match": {"gpuCount": {"min": 0}},
                "mutate": {
                    "env": {"hideGPUsFromNonGPUContainers": "gpuNodes"},
                    "avoidGPUNodes": {"nodeLabel": "nvidia.com/gpu.present", "value": "true"},
                },
            },
        ),
        _doc(
            "GPUPolicy",
            "runtime",
            {
                "order": 36,
                "match": {"resources": ["nvidia.com/gpu"]},
                "mutate": {"runtimeClassName": "nvidia"},
            },
        ),
        _doc(
            "GPUPolicy",
            "team",
            {
                "order": 40,
                "validate": [
                    {"maxGPUsPerPod": 6, "action": "warn"},
                    {"maxGPUsPerContainer": 3},
                    {"allowedGPUCounts": [1, 2, 4]},
                    {"maxSharedGPUs": 1, "action": "audit"},
                    {"requiredLabels": ["team"], "action": "warn"},
                    {"maxGPUsPerWorkload": 4, "action": "warn"},
                ],
            },
        ),
    ]
)

# --- generated pods -----------------------------------------------------------------------

GPU_NAMES = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"]
quantities = st.one_of(st.integers(0, 4), st.sampled_from(["1", "2", "0.5", "500m", "-1", "x"]))


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any] | None:
    gpus = draw(st.dictionaries(st.sampled_from(GPU_NAMES), quantities, max_size=2))
    shape = draw(st.sampled_from(["limits", "both", "requests", "differ"]))
    out: dict[str, Any] = {}
    if gpus and shape in ("limits", "both", "differ"):
        out["limits"] = dict(gpus)
    if gpus and shape in ("requests", "both"):
        out["requests"] = dict(gpus)
    if gpus and shape == "differ":
        out["requests"] = dict.fromkeys(gpus, 1)
    if draw(st.booleans()):
        out.setdefault("requests", {})["memory"] = draw(st.sampled_from(["1Gi", "40Gi"]))
    if draw(st.booleans()):
        out.setdefault("limits", {})["memory"] = "64Gi"
    return out or draw(st.sampled_from([None, {}]))


env_vars = st.lists(
    st.sampled_from(
        [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
            {"name": "LOCAL_WORLD_SIZE", "value": "8"},
            {"name": "LOG_LEVEL", "value": "debug"},
        ]
    ),
    max_size=3,
    unique_by=lambda e: e["name"],
)


@st.composite
def container(draw: st.DrawFn, name: str, *, init: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox:1.36"}
    res = draw(resources())
    if res is not None:
        body["resources"] = res
    env = draw(st.one_of(st.none(), env_vars))
    if env is not None or draw(st.booleans()):
        body["env"] = env
    if draw(st.booleans()):
        body["volumeMounts"] = [{"name": "scratch", "mountPath": "/dev/shm"}]
    if init and draw(st.booleans()):
        body["restartPolicy"] = "Always"
    if draw(st.integers(0, 5)) == 0:
        body["securityContext"] = {"privileged": True}
    if draw(st.integers(0, 5)) == 0:
        body.setdefault("volumeMounts", []).append({"name": "dev", "mountPath": "/dev"})
    return body


tolerations = st.lists(
    st.sampled_from(
        [
            {"operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
        ]
    ),
    max_size=2,
)
terms = st.lists(
    st.sampled_from(
        [
            {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["Tesla-T4"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]},
        ]
    ),
    min_size=1,
    max_size=2,
)


@st.composite
def pod_template(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    spec: dict[str, Any] = {
        "containers": [draw(container(f"c{i}")) for i in range(count)],
    }
    inits = draw(st.integers(0, 2))
    if inits:
        spec["initContainers"] = [draw(container(f"i{i}", init=True)) for i in range(inits)]
    if draw(st.booleans()):
        spec["tolerations"] = draw(tolerations)
    if draw(st.booleans()):
        spec["nodeSelector"] = {PRODUCT: draw(st.sampled_from(["Tesla-T4", "NVIDIA-B200"]))}
    if draw(st.booleans()):
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": draw(terms)}
            }
        }
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if draw(st.booleans()):
        spec.setdefault("volumes", []).append({"name": "dev", "hostPath": {"path": "/dev"}})
    if draw(st.integers(0, 3)) == 0:
        spec["runtimeClassName"] = draw(st.sampled_from(["nvidia", "kata"]))
    labels = draw(st.sampled_from([{}, {"team": "a"}, {"app": "x"}]))
    # A JSON round trip: objects from the API server never share subtrees, while values
    # drawn from sampled_from do (and jsonpatch's deepcopy would keep them shared).
    return json.loads(json.dumps({"metadata": {"labels": labels}, "spec": spec}))


def as_pod(template: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": "p", **template["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


# --- workload kinds: wrap a template, and find it again --------------------------------------

Wrap = tuple[Callable[[dict[str, Any]], dict[str, Any]], tuple[str | int, ...]]
CPU_TEMPLATE = {"spec": {"containers": [{"name": "head", "image": "busybox:1.36"}]}}


def _obj(api: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "w"}, "spec": spec}


def _replica_specs(field: str, api: str, kind: str) -> Wrap:
    return (
        lambda t: _obj(api, kind, {field: {"Worker": {"replicas": 1, "template": t}}}),
        ("spec", field, "Worker", "template"),
    )


WRAPPERS: dict[str, Wrap] = {
    "Deployment": (
        lambda t: _obj("apps/v1", "Deployment", {"replicas": 1, "template": t}),
        ("spec", "template"),
    ),
    "ReplicaSet": (
        lambda t: _obj("apps/v1", "ReplicaSet", {"replicas": 1, "template": t}),
        ("spec", "template"),
    ),
    "StatefulSet": (
        lambda t: _obj("apps/v1", "StatefulSet", {"replicas": 1, "template": t}),
        ("spec", "template"),
    ),
    "DaemonSet": (lambda t: _obj("apps/v1", "DaemonSet", {"template": t}), ("spec", "template")),
    "ReplicationController": (
        lambda t: _obj("v1", "ReplicationController", {"replicas": 1, "template": t}),
        ("spec", "template"),
    ),
    "Job": (lambda t: _obj("batch/v1", "Job", {"template": t}), ("spec", "template")),
    "CronJob": (
        lambda t: _obj(
            "batch/v1",
            "CronJob",
            {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": t}}},
        ),
        ("spec", "jobTemplate", "spec", "template"),
    ),
    "PyTorchJob": _replica_specs("pytorchReplicaSpecs", "kubeflow.org/v1", "PyTorchJob"),
    "TFJob": _replica_specs("tfReplicaSpecs", "kubeflow.org/v1", "TFJob"),
    "MPIJob": _replica_specs("mpiReplicaSpecs", "kubeflow.org/v2beta1", "MPIJob"),
    "RayCluster worker group": (
        lambda t: _obj(
            "ray.io/v1",
            "RayCluster",
            {
                "headGroupSpec": {"template": CPU_TEMPLATE},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "template": t}],
            },
        ),
        ("spec", "workerGroupSpecs", 0, "template"),
    ),
    "LeaderWorkerSet": (
        lambda t: _obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": t}},
        ),
        ("spec", "leaderWorkerTemplate", "workerTemplate"),
    ),
    "Volcano Job": (
        lambda t: _obj(
            "batch.volcano.sh/v1alpha1",
            "Job",
            {"tasks": [{"name": "worker", "replicas": 1, "template": t}]},
        ),
        ("spec", "tasks", 0, "template"),
    ),
    "JobSet": (
        lambda t: _obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": t}}}]},
        ),
        ("spec", "replicatedJobs", 0, "template", "spec", "template"),
    ),
}


def _at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def _judged(decision: Decision) -> tuple[bool, list[str]]:
    pod_level = [f for f in decision.findings if f.id not in WORKLOAD_CHECKS]
    return not any(f.action == "deny" for f in pod_level), [f.id for f in pod_level]


def _evaluate(obj: dict[str, Any], inventory: InventoryView) -> Decision:
    return evaluate(Request(obj, namespace="team-a"), policy=POLICY, inventory=inventory)


inventories = st.sampled_from(
    [
        INVENTORY,
        NO_INVENTORY,
        dataclasses.replace(INVENTORY, runtime_classes=frozenset({"nvidia", "runc"})),
    ]
)
# DaemonSets are spared what keeps pods off GPU nodes; with that off they are pods like any.
DAEMONSETS_JUDGED = dataclasses.replace(
    POLICY,
    settings=dataclasses.replace(
        POLICY.settings,
        gpu_nodes=dataclasses.replace(POLICY.settings.gpu_nodes, exempt_daemonsets=False),
    ),
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(template=pod_template(), inventory=inventories)
def test_the_patch_applies_and_gives_the_mutated_object(
    template: dict[str, Any], inventory: InventoryView
) -> None:
    pod = as_pod(template)
    decision = _evaluate(pod, inventory)
    assert jsonpatch.apply_patch(pod, list(decision.patch)) == decision.mutated


@SETTINGS
@given(template=pod_template(), inventory=inventories)
def test_mutating_the_mutated_pod_changes_nothing(
    template: dict[str, Any], inventory: InventoryView
) -> None:
    first = _evaluate(as_pod(template), inventory)
    assert first.mutated is not None
    again = _evaluate(dict(first.mutated), inventory)
    assert list(again.patch) == []
    assert again.mutated == first.mutated


@SETTINGS
@given(template=pod_template(), inventory=inventories)
def test_the_original_object_is_never_modified(
    template: dict[str, Any], inventory: InventoryView
) -> None:
    for obj in (as_pod(template), WRAPPERS["PyTorchJob"][0](template)):
        before = copy.deepcopy(obj)
        _evaluate(obj, inventory)
        assert obj == before


@pytest.mark.parametrize("kind", [pytest.param(k, id=k) for k in WRAPPERS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=pod_template(), inventory=inventories)
def test_a_pod_is_judged_and_mutated_alike_in_every_workload_kind(
    kind: str, template: dict[str, Any], inventory: InventoryView
) -> None:
    wrap, path = WRAPPERS[kind]
    as_a_pod = _evaluate(as_pod(template), inventory)
    policy = DAEMONSETS_JUDGED if kind == "DaemonSet" else POLICY
    request = Request(wrap(copy.deepcopy(template)), namespace="team-a")
    wrapped = evaluate(request, policy=policy, inventory=inventory)
    assert _judged(wrapped) == _judged(as_a_pod)
    assert as_a_pod.mutated is not None
    assert wrapped.mutated is not None
    assert _at(wrapped.mutated, path)["spec"] == as_a_pod.mutated["spec"]
