"""The checks of what still fails after admission (gangFit, cudaDriver, gpuQuota): each follows
its action, and rules can exempt pods from the CUDA check and its affinity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.quotas import Quota, Quotas, Scope
from webhook.files.inventoryfile import load_inventory_file
from webhook.files.shipped import cuda_table

INVENTORIES = Path(__file__).resolve().parents[2] / "cases" / "_inventories"
TOLERATE = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def view(name: str = "two-driver-pools-with-quota") -> InventoryView:
    return load_inventory_file(str(INVENTORIES / f"{name}.yaml")).view()


def _doc(kind: str, spec: dict[str, Any], name: str = "r") -> RuleDocument:
    body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": kind, "metadata": {"name": name}}
    return RuleDocument(DocumentRef("test", 1, kind, name), {**body, "spec": spec})


def settings(**spec: Any) -> Policy:
    return compile_policy([_doc("GPUSettings", spec)], cuda_table=cuda_table())


def _spec(gpus: int, image: str = "registry.example.com/x:1", **env: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"tolerations": [TOLERATE], "containers": [container]}


def pod(gpus: int, image: str = "registry.example.com/x:1", **env: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": _spec(gpus, image, **env),
    }


def deployment(replicas: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ml"},
        "spec": {"replicas": replicas, "template": {"spec": _spec(gpus)}},
    }


def pytorchjob(workers: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "team-b"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": workers, "template": {"spec": _spec(gpus)}}
            }
        },
    }


CASES = [
    pytest.param("gangFit", pytorchjob(3, 8), "at most 2 of its 3 pods", id="gangFit"),
    pytest.param(
        "cudaDriver",
        pod(1, NVIDIA_REQUIRE_CUDA="cuda>=12.6"),
        "the newest there is driver 550.90.07 (CUDA 12.4)",
        id="cudaDriver",
    ),
    pytest.param("gpuQuota", deployment(4, 2), "ResourceQuota ml/gpu-quota allows", id="gpuQuota"),
]


@pytest.mark.parametrize("action", ["deny", "warn", "audit"])
@pytest.mark.parametrize(("check", "obj", "text"), CASES)
def test_each_check_follows_its_action(
    check: str, obj: dict[str, Any], text: str, action: str
) -> None:
    decision = evaluate(Request(obj), policy=settings(checks={check: action}), inventory=view())
    found = [f for f in decision.findings if f.check == check]
    assert [f.action for f in found] == [action]
    assert text in found[0].message
    assert decision.allowed is (action != "deny")


def test_a_pod_over_what_is_left_of_its_quota_is_allowed_with_a_notice() -> None:
    decision = evaluate(Request(pod(3)), policy=settings(), inventory=view())
    assert decision.allowed
    assert [f.check for f in decision.findings] == []
    (notice,) = [n for n in decision.notices if "ResourceQuota" in n]
    assert "requests.nvidia.com/gpu hard 4, 2 used now; this pod asks 3 more" in notice


def _scoped(*scopes: Scope, hard: int = 1) -> InventoryView:
    inventory = view()
    inventory.quotas = Quotas.of([Quota("ml", "q", {"requests.nvidia.com/gpu": hard}, {}, scopes)])
    return inventory


@pytest.mark.parametrize(
    ("scopes", "priority", "action"),
    [
        pytest.param((Scope("PriorityClass", "In", ("high",)),), "high", "deny", id="matches"),
        pytest.param((Scope("PriorityClass", "In", ("high",)),), "low", None, id="other-class"),
        pytest.param(
            (Scope("PriorityClass", "In", ("high",)),),
            None,
            "warn",
            id="no-class-yet-may-get-the-default-so-only-warned",
        ),
        pytest.param((Scope("Terminating"),), "high", None, id="not-terminating"),
        pytest.param(
            (Scope("NotTerminating"), Scope("PriorityClass", "Exists")), "x", "deny", id="anded"
        ),
        pytest.param((Scope("BestEffort"),), "high", "warn", id="best-effort-unknown"),
    ],
)
def test_a_scoped_quota_counts_only_the_pods_its_scopes_match(
    scopes: tuple[Scope, ...], priority: str | None, action: str | None
) -> None:
    obj = deployment(4, 2)
    if priority:
        obj["spec"]["template"]["spec"]["priorityClassName"] = priority
    decision = evaluate(
        Request(obj), policy=settings(checks={"gpuQuota": "deny"}), inventory=_scoped(*scopes)
    )
    found = [f.action for f in decision.findings if f.check == "gpuQuota"]
    assert found == ([action] if action else [])


def _claim_template(*requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpus", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def _with_template(*requests: dict[str, Any]) -> InventoryView:
    """The cluster with ``_claim_template`` (claims and templates only, as ``check`` has)."""
    inventory = view()
    inventory.devices = DeviceInventory.of([_claim_template(*requests)], complete=False)
    return inventory


def _dra_deployment(replicas: int) -> dict[str, Any]:
    job = deployment(replicas, 0)
    spec = job["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
    return job


GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"


@pytest.mark.parametrize(
    ("request_", "charged"),
    [
        pytest.param(
            {"name": "g", "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "All"}},
            {GPU_CLASS: 32},
            id="all-is-charged-allocation-results-max-size",
        ),
        pytest.param(
            {
                "name": "g",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": GPU_CLASS, "count": 2},
                    {"name": "small", "deviceClassName": GPU_CLASS, "count": 1},
                    {"name": "mig", "deviceClassName": MIG_CLASS, "count": 3},
                ],
            },
            {GPU_CLASS: 2, MIG_CLASS: 3},
            id="first-available-the-largest-per-class",
        ),
    ],
)
def test_device_quota_counts_claims_as_the_claim_evaluator_charges_them(
    request_: dict[str, Any], charged: dict[str, int]
) -> None:
    inventory = _with_template(request_)
    hard = {f"{c}.deviceclass.resource.k8s.io/devices": n * 2 - 1 for c, n in charged.items()}
    inventory.quotas = Quotas.of([Quota("ml", "dq", hard)])
    decision = evaluate(Request(_dra_deployment(2)), policy=settings(), inventory=inventory)
    messages = [f.message for f in decision.findings if f.check == "gpuQuota"]
    assert len(messages) == len(charged)
    for device_class, n in charged.items():
        wanted = f"request {n * 2} {device_class}.deviceclass.resource.k8s.io/devices"
        assert any(wanted in m for m in messages), messages


def test_a_scoped_quota_never_limits_dra_devices() -> None:
    inventory = _with_template({"name": "g", "exactly": {"deviceClassName": GPU_CLASS, "count": 2}})
    key = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
    inventory.quotas = Quotas.of([Quota("ml", "dq", {key: 1}, {}, (Scope("NotTerminating"),))])
    decision = evaluate(Request(_dra_deployment(2)), policy=settings(), inventory=inventory)
    assert [f.check for f in decision.findings] == []


def test_dra_devices_from_claim_templates_count_against_the_device_class_quota() -> None:
    inventory = _with_template(
        {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": 2}}
    )
    decision = evaluate(Request(_dra_deployment(2)), policy=settings(), inventory=inventory)
    found = [f for f in decision.findings if f.check == "gpuQuota"]
    assert len(found) == 1
    assert "4 gpu.nvidia.com.deviceclass.resource.k8s.io/devices" in found[0].message


@pytest.mark.parametrize(
    ("exempt", "denied", "patched"),
    [
        pytest.param(None, False, True, id="affinity-by-default"),
        pytest.param(["cudaAffinity"], False, False, id="affinity-exempt"),
        pytest.param(["cudaDriver"], False, False, id="check-exempt"),
    ],
)
def test_rules_can_exempt_pods_from_the_cuda_check_and_its_affinity(
    exempt: list[str] | None, denied: bool, patched: bool
) -> None:
    docs = [_doc("GPUSettings", {})]
    if exempt:
        docs.append(_doc("GPUPolicy", {"match": {"namespaces": ["ml"]}, "exempt": exempt}, "ex"))
    policy = compile_policy(docs, cuda_table=cuda_table())
    decision = evaluate(
        Request(pod(1, "nvidia/cuda:12.2.2-runtime-ubuntu22.04")), policy=policy, inventory=view()
    )
    assert decision.allowed is not denied
    affinity = [op for op in decision.patch if "affinity" in op["path"]]
    assert bool(affinity) is patched


def test_env_from_leaves_the_image_unjudged_and_says_why() -> None:
    obj = pod(1, "nvidia/cuda:12.2.2-runtime-ubuntu22.04")
    obj["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "cuda-env"}}]
    decision = evaluate(Request(obj), policy=settings(), inventory=view())
    assert decision.allowed
    assert not [op for op in decision.patch if "affinity" in op["path"]]
    (notice,) = [n for n in decision.notices if "envFrom" in n]
    assert "NVIDIA_REQUIRE_CUDA or NVIDIA_DISABLE_REQUIRE may be set by envFrom" in notice
    assert "(ConfigMap cuda-env)" in notice


def test_an_explicit_requirement_beside_env_from_is_judged() -> None:
    obj = pod(1, NVIDIA_REQUIRE_CUDA="cuda>=12.6", NVIDIA_DISABLE_REQUIRE="false")
    obj["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "cuda-env"}}]
    decision = evaluate(Request(obj), policy=settings(), inventory=view())
    assert [f.check for f in decision.findings] == ["cudaDriver"]
