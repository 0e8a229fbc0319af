"""Workloads and the GPU limit that the tests of scale subresources share (issue 41):
engine (tests/engine/evaluation/test_scale.py), service over the replayed API server
(tests/cluster/test_liveobjects_scale.py) and real gunicorn
(tests/commands/test_serve_scale.py)."""

from __future__ import annotations

from typing import Any

NAMESPACE = "team-a"
# The rule every scale is judged against: 64 GPUs per workload.
LIMIT = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: team-quotas}
spec:
  order: 50
  validate:
    - maxGPUsPerWorkload: 64
      action: deny
"""


def gpu_template(gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ]
        },
    }


def meta(name: str) -> dict[str, Any]:
    """As a GET answers it: uid, resourceVersion and creationTimestamp, which the Scale
    the API server makes of it copies."""
    return {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"uid-{name}",
        "resourceVersion": "4242",
        "creationTimestamp": "2026-12-01T09:00:00Z",
    }


def deployment(name: str = "serve", replicas: int = 1, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "x"}},
            "template": gpu_template(gpus),
        },
        "status": {"replicas": replicas},
    }


def pytorchjob(
    name: str = "elastic", workers: int = 1, *, most: int | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": gpu_template(8)}}
    }
    if most is not None:
        spec["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": most}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta(name),
        "spec": spec,
    }
