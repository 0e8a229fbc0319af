"""The memoryLimit rule never makes the API server refuse a pod for its pod-level resources.

The refusal is emulated as the API server decides it: defaults first
(pkg/apis/core/v1/defaults.go: a container's missing request is its limit; a missing
pod-level request is the containers' effective request when any asks for memory, else the
pod-level limit, ``defaultPodRequests``), then pkg/apis/core/validation
``validatePodResourceConsistency``: no container limit above the pod-level limit, and the
containers' effective requests within the pod-level request. Defaults run before admission
and again on the patched object, so the pod-level request is the one of the pod as sent.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.rulesets import memory_limit
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, Request
from webhook.engine.kube.quantity import parse_quantity
from webhook.engine.policy.ruleset import Policy
from webhook.files.rulefiles import load_policy

GI = 2**30


def _policy(tmp: Path, amount: int) -> Policy:
    (tmp / "rules.yaml").write_text(memory_limit(f"{amount}Gi", name="memory"))
    return load_policy(str(tmp))


def _bytes(value: object) -> int:
    return int(parse_quantity(value))


def _container_requests(containers: list[dict[str, Any]]) -> int:
    total = 0
    for body in containers:
        resources = body.get("resources") or {}
        request = (resources.get("requests") or {}).get("memory")
        limit = (resources.get("limits") or {}).get("memory")
        total += _bytes(request if request is not None else limit or 0)
    return total


def _pod_request(spec: dict[str, Any]) -> int | None:
    requests = (spec.get("resources") or {}).get("requests") or {}
    limits = (spec.get("resources") or {}).get("limits") or {}
    if "memory" in requests:
        return _bytes(requests["memory"])
    if "memory" not in limits:
        return None
    asks = any(
        "memory" in ((c.get("resources") or {}).get(k) or {})
        for c in spec["containers"]
        for k in ("requests", "limits")
    )
    return _container_requests(spec["containers"]) if asks else _bytes(limits["memory"])


def refusals(sent: dict[str, Any], patched: dict[str, Any]) -> list[str]:
    spec = patched["spec"]
    pod_limit = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    pod_request = _pod_request(sent["spec"])
    found = []
    for body in spec["containers"]:
        limit = ((body.get("resources") or {}).get("limits") or {}).get("memory")
        if pod_limit is not None and limit is not None and _bytes(limit) > _bytes(pod_limit):
            found.append(f"{body['name']}: limit {limit} above the pod's {pod_limit}")
    if pod_request is not None and _container_requests(spec["containers"]) > pod_request:
        found.append(f"containers' requests above the pod's {pod_request}")
    return found


def _container(name: str, gpus: int, request: int | None, limit: int | None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    if request is not None:
        resources.setdefault("requests", {})["memory"] = f"{request}Gi"
    if limit is not None:
        resources.setdefault("limits", {})["memory"] = f"{limit}Gi"
    body: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    if resources:
        body["resources"] = resources
    return body


memory = st.one_of(st.none(), st.integers(min_value=1, max_value=128))


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    containers = []
    for index in range(draw(st.integers(min_value=1, max_value=3))):
        request, limit = draw(memory), draw(memory)
        if request is not None and limit is not None and request > limit:
            request, limit = limit, request  # a container's request within its limit
        containers.append(_container(f"c{index}", draw(st.integers(0, 2)), request, limit))
    spec: dict[str, Any] = {"containers": containers}
    pod_request, pod_limit = draw(memory), draw(memory)
    if pod_request is not None and pod_limit is not None and pod_request > pod_limit:
        pod_request, pod_limit = pod_limit, pod_request
    resources: dict[str, Any] = {}
    if pod_request is not None:
        resources["requests"] = {"memory": f"{pod_request}Gi"}
    if pod_limit is not None:
        resources["limits"] = {"memory": f"{pod_limit}Gi"}
    if resources:
        spec["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


@settings(max_examples=300, deadline=None)
@given(pod=pods(), amount=st.integers(min_value=1, max_value=200))
def test_injected_memory_limits_never_make_the_api_server_refuse_a_valid_pod(
    tmp_path_factory: Any, pod: dict[str, Any], amount: int
) -> None:
    policy = _policy(tmp_path_factory.mktemp("rules"), amount)
    if refusals(pod, pod):
        return  # refused as written: not the webhook's doing
    decision = evaluate(Request(pod), policy=policy, inventory=NO_INVENTORY)
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), list(decision.patch))
    assert refusals(pod, patched) == []


def test_a_pod_level_limit_the_rule_fits_within_gets_the_rules_limit(tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "resources": {"limits": {"memory": "100Gi"}, "requests": {"memory": "100Gi"}},
            "containers": [_container("gpu", 1, None, None)],
        },
    }
    decision = evaluate(Request(pod), policy=_policy(tmp_path, 64), inventory=NO_INVENTORY)
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), list(decision.patch))
    assert patched["spec"]["containers"][0]["resources"]["limits"]["memory"] == "64Gi"
