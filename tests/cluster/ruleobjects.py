"""Rule objects (GPUPolicy, ...) as kube-apiserver serves custom resources: discovery of
gpu-webhook.io/v1alpha1, lists whose items carry apiVersion and kind (unstructured
objects do, unlike built-in kinds), and watch events. Shapes as apiextensions-apiserver
answers them (kubernetes staging/src/k8s.io/apiextensions-apiserver, ``crdHandler``)."""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from tests.cluster.replayserver import Body, ReplayServer, Stream
from webhook.cluster.sources.rulesource import DISCOVERY_PATH, collection
from webhook.engine.policy.crds import NAMES

API = "gpu-webhook.io/v1alpha1"
POLICIES = collection("GPUPolicy")


def gpu_policy(
    name: str, spec: dict[str, Any], *, generation: int = 1, rv: str = "10"
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GPUPolicy",
        "metadata": {
            "name": name,
            "uid": f"7d5c1c2e-0000-4000-8000-{name.encode().hex()[:12]:0>12}",
            "generation": generation,
            "resourceVersion": rv,
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": API}
            ],
        },
        "spec": spec,
    }


def discovery(*kinds: str) -> Body:
    return Body(
        json.dumps(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": API,
                "resources": [
                    {
                        "name": NAMES[k].plural,
                        "singularName": k.lower(),
                        "namespaced": False,
                        "kind": k,
                        "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"],
                        "shortNames": [NAMES[k].short_name],
                        "categories": ["gpu-webhook"],
                    }
                    for k in kinds
                ]
                + [
                    {"name": f"{NAMES[k].plural}/status", "namespaced": False, "kind": k}
                    for k in kinds
                ],
            }
        ).encode()
    )


def listing(kind: str, items: list[dict[str, Any]], rv: str) -> Body:
    body = {
        "apiVersion": API,
        "kind": f"{kind}List",
        "metadata": {"continue": "", "resourceVersion": rv},
        "items": items,
    }
    return Body(json.dumps(body).encode())


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def serve_policies(
    replay: ReplayServer, items: list[dict[str, Any]], events: list[bytes | threading.Event]
) -> None:
    """The CRDs installed; GPUPolicies listed, then a watch that sends ``events`` and stays
    open; the other kinds served empty."""
    kinds = list(NAMES)
    replay.routes[DISCOVERY_PATH] = deque([discovery(*kinds)])
    for kind in kinds:
        path = collection(kind)
        replay.collection_lists[path] = deque(
            [listing(kind, items if kind == "GPUPolicy" else [], "10")]
        )
        watch: list[bytes | threading.Event] = events if kind == "GPUPolicy" else []
        replay.collection_watches[path] = deque([Stream(watch, end="hold")])
