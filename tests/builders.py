"""Builders for test inputs: objects and AdmissionReview bodies as the API server sends."""

from __future__ import annotations

import base64
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import jsonpatch

ROOT = Path(__file__).resolve().parents[1]
# Copies of public manifests and recorded API-server bytes; their origins are in INDEX.tsv beside them.
FIXTURES = ROOT / "tests" / "fixtures" / "admission"
APISERVER = ROOT / "tests" / "fixtures" / "apiserver"
CORPUS = ROOT / "tests" / "corpus"
RULES = ROOT / "rules"
CASES = ROOT / "tests" / "cases"
INVENTORY = ROOT / "examples" / "inventory.yaml"

_GROUPS = {
    "apps/v1": "apps",
    "batch/v1": "batch",
    "v1": "",
}


def pod(
    *, gpus: int | str | None = 1, requests_only: bool = False, name: str = "p"
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if gpus is not None:
        resources = {"requests": {"nvidia.com/gpu": gpus}}
        if not requests_only:
            resources["limits"] = {"nvidia.com/gpu": gpus}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "cuda:12", "resources": resources}]},
    }


def deployment(template: dict[str, Any], *, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": template["metadata"]["labels"]},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
    sub_resource: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    source = obj or old or {}
    api_version = str(source.get("apiVersion", "v1"))
    group = _GROUPS.get(api_version, api_version.partition("/")[0])
    kind = {"group": group, "version": api_version.rpartition("/")[2], "kind": source.get("kind")}
    meta = source.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": kind,
        "resource": {**kind, "resource": str(source.get("kind", "")).lower() + "s"},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", "default"),
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(obj, decoded_patch(response))
    return result


def billion_laughs(levels: int = 9) -> str:
    """YAML whose aliases nest to expand a few lines into 9**levels strings."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    names = "abcdefghijklmnop"[:levels]
    for previous, name in itertools.pairwise(names):
        text += f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n"
    return text


def scale_of(
    parent: dict[str, Any], replicas: int, *, status_replicas: int = 1, selector: str = ""
) -> dict[str, Any]:
    """The ``autoscaling/v1`` Scale the API server makes of ``parent`` with ``replicas``:
    kubernetes pkg/registry/apps/deployment/storage/storage.go ``scaleFromDeployment`` (the
    same for ReplicaSets, StatefulSets, ReplicationControllers), apiextensions-apiserver
    pkg/registry/customresource/etcd.go ``scaleFromCustomResource`` for a custom resource:
    five metadata fields, ``spec.replicas`` (omitted at 0: ``omitempty``), ``status``."""
    meta = parent["metadata"]
    status: dict[str, Any] = {"replicas": status_replicas}
    if selector:  # ``selector,omitempty``; a CRD without labelSelectorPath has none
        status["selector"] = selector
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "uid": meta.get("uid", "9d0d4c3e-6f5e-4f59-9a53-0c8b5f1b2a11"),
            "resourceVersion": meta.get("resourceVersion", "4242"),
            "creationTimestamp": meta.get("creationTimestamp", "2026-12-01T09:00:00Z"),
        },
        "spec": {"replicas": replicas} if replicas else {},
        "status": status,
    }


def scale_review(
    parent: dict[str, Any],
    replicas: int,
    *,
    old_replicas: int,
    resource: str,
    selector: str = "",
) -> dict[str, Any]:
    """The AdmissionReview of a ``kubectl scale`` (or an HPA's update) of ``parent``: kind
    and requestKind ``autoscaling/v1`` Scale, resource and requestResource the parent's,
    subResource ``scale`` (k8s.io/apiserver pkg/admission/plugin/webhook/request
    admissionreview.go ``CreateV1AdmissionReview``: kind, resource and subresource of the
    invocation, request* of the attributes; kubernetes/website
    extensible-admission-controllers.md shows this very request)."""
    api_version = str(parent["apiVersion"])
    group, _, version = api_version.rpartition("/")
    meta = parent["metadata"]
    kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    target = {"group": group, "version": version, "resource": resource}
    new = scale_of(parent, replicas, status_replicas=old_replicas, selector=selector)
    old = scale_of(parent, old_replicas, status_replicas=old_replicas, selector=selector)
    request = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": target,
        "subResource": "scale",
        "requestKind": kind,
        "requestResource": target,
        "requestSubResource": "scale",
        "name": meta["name"],
        "namespace": meta.get("namespace", "default"),
        "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": new,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
