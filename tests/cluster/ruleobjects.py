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
from webhook.engine.policy.schema import NAMESPACED_KINDS

API = "gpu-webhook.io/v1alpha1"
POLICIES = collection("GPUPolicy")


def gpu_policy(
    name: str, spec: dict[str, Any], *, generation: int = 1, rv: str = "10"
) -> dict[str, Any]:
    return rule_object("GPUPolicy", name, spec, generation=generation, rv=rv)


def rule_object(
    kind: str,
    name: str,
    spec: dict[str, Any],
    *,
    namespace: str = "",
    generation: int = 1,
    rv: str = "10",
) -> dict[str, Any]:
    """A rule object as the API server stores it (a namespaced kind's in ``namespace``)."""
    where = {"namespace": namespace} if namespace else {}
    return {
        "apiVersion": API,
        "kind": kind,
        "metadata": {
            "name": name,
            **where,
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
                        "namespaced": k in NAMESPACED_KINDS,
                        "kind": k,
                        "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"],
                        "shortNames": [NAMES[k].short_name],
                        "categories": ["gpu-webhook"],
                    }
                    for k in kinds
                ]
                + [
                    {
                        "name": f"{NAMES[k].plural}/status",
                        "namespaced": k in NAMESPACED_KINDS,
                        "kind": k,
                    }
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
    serve_rule_objects(replay, {"GPUPolicy": items}, {"GPUPolicy": events})


def serve_rule_objects(
    replay: ReplayServer,
    items: dict[str, list[dict[str, Any]]],
    events: dict[str, list[bytes | threading.Event]],
) -> None:
    """The CRDs installed; each kind listed with its ``items`` (across all namespaces, as a
    namespaced kind is listed at its collection), then a watch that sends its ``events``
    and stays open."""
    kinds = list(NAMES)
    replay.routes[DISCOVERY_PATH] = deque([discovery(*kinds)])
    for kind in kinds:
        path = collection(kind)
        replay.collection_lists[path] = deque([listing(kind, items.get(kind, []), "10")])
        replay.collection_watches[path] = deque([Stream(events.get(kind, []), end="hold")])
