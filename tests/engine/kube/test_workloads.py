"""Replica counts by each kind's own semantics, container forms, and layouts per version."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, Request
from webhook.engine.kube.workloads import KindTable
from webhook.engine.policy.ruleset import Policy

TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "cuda:12"}]}}


def lws(size: int | None, *, leader: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"workerTemplate": TEMPLATE}
    if size is not None:
        spec["size"] = size
    if leader:
        spec["leaderTemplate"] = TEMPLATE
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "w"},
        "spec": {"replicas": 3, "leaderWorkerTemplate": spec},
    }


def counts(obj: dict[str, Any]) -> dict[str, int | None]:
    found = KindTable().templates(obj)
    assert found is not None
    return {".".join(map(str, t.path)): t.replicas for t in found}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            lws(4, leader=True),
            {
                "spec.leaderWorkerTemplate.leaderTemplate": 3,
                "spec.leaderWorkerTemplate.workerTemplate": 9,
            },
            id="lws-size-includes-its-leader",
        ),
        pytest.param(
            lws(4, leader=False),
            {"spec.leaderWorkerTemplate.workerTemplate": 12},
            id="lws-worker-template-makes-the-leader-too",
        ),
        pytest.param(
            lws(None, leader=True),
            {
                "spec.leaderWorkerTemplate.leaderTemplate": 3,
                "spec.leaderWorkerTemplate.workerTemplate": 0,
            },
            id="lws-default-size-is-the-leader-alone",
        ),
        pytest.param(
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayService",
                "spec": {
                    "rayClusterConfig": {
                        "headGroupSpec": {"template": TEMPLATE},
                        "workerGroupSpecs": [
                            {"replicas": 2, "numOfHosts": 4, "template": TEMPLATE},
                            {"replicas": 3, "template": TEMPLATE},
                        ],
                    }
                },
            },
            {
                "spec.rayClusterConfig.headGroupSpec.template": 1,
                "spec.rayClusterConfig.workerGroupSpecs.0.template": 8,
                "spec.rayClusterConfig.workerGroupSpecs.1.template": 3,
            },
            id="ray-num-of-hosts",
        ),
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v1alpha1",
                "kind": "MPIJob",
                "spec": {"replicas": 4, "template": TEMPLATE},
            },
            {"spec.template": 4},
            id="mpijob-v1alpha1",
        ),
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 4, "template": TEMPLATE}}},
            },
            {"spec.mpiReplicaSpecs.Worker.template": 4},
            id="mpijob-v2beta1",
        ),
    ],
)
def test_replicas_follow_each_kinds_semantics(
    obj: dict[str, Any], expected: dict[str, int | None]
) -> None:
    assert counts(obj) == expected


def test_a_kserve_model_container_is_judged_and_mutated_at_its_own_path() -> None:
    obj = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm"},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "vllm"},
                    "resources": {"requests": {"nvidia.com/gpu": 1}},
                }
            }
        },
    }
    decision = evaluate(Request(obj), policy=Policy(), inventory=NO_INVENTORY)
    assert [(f.check, f.path) for f in decision.findings] == [
        ("requestsWithoutLimits", "spec.predictor.model")
    ]
    assert 'container "kserve-container"' in decision.findings[0].message


def test_a_known_kind_without_templates_is_passed_through_with_a_notice() -> None:
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {},
    }
    decision = evaluate(Request(obj), policy=Policy(), inventory=NO_INVENTORY)
    assert decision.allowed
    assert not decision.understood
    assert "passed through unchecked" in decision.notices[0]
