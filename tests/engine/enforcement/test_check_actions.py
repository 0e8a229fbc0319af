"""Every check this engine added can be set to deny, warn and audit, and says how to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView, Request
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy
from webhook.files.inventoryfile import load_inventory

INVENTORIES = Path(__file__).resolve().parents[2] / "cases" / "_inventories"
TOLERATE = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def inventory(name: str) -> InventoryView:
    return InventoryView(load_inventory(str(INVENTORIES / f"{name}.yaml")))


def pod(limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {
            "tolerations": [TOLERATE],
            "containers": [{"name": "main", "image": "cuda:12", "resources": {"limits": limits}}],
            **spec,
        },
    }


def _doc(kind: str, spec: dict[str, Any]) -> RuleDocument:
    body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": kind, "metadata": {"name": "r"}}
    return RuleDocument(DocumentRef("test", 1, kind, "r"), {**body, "spec": spec})


def builtin(check: str, action: str) -> Policy:
    return compile_policy([_doc("GPUSettings", {"checks": {check: action}})])


def rule(check: dict[str, Any], action: str) -> Policy:
    return compile_policy([_doc("GPUPolicy", {"validate": [{**check, "action": action}]})])


def memory(when: str) -> Policy:
    return compile_policy(
        [_doc("GPUPolicy", {"mutate": {"memoryLimit": {"perGPU": "200Gi", "whenTooLarge": when}}})]
    )


CASES = [
    pytest.param(
        lambda a: builtin("sharedGPURequest", a),
        pod({"nvidia.com/gpu": 2}),
        inventory("timesliced"),
        "builtin/sharedGPURequest",
        "Ask for 1 nvidia.com/gpu",
        id="sharedGPURequest",
    ),
    pytest.param(
        lambda a: builtin("multipleMIGDevices", a),
        pod({"nvidia.com/mig-1g.10gb": 2}),
        inventory("mig-mixed"),
        "builtin/multipleMIGDevices",
        "Ask for one MIG device of a larger profile",
        id="multipleMIGDevices",
    ),
    pytest.param(
        lambda a: builtin("capacity", a),
        pod({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}),
        inventory("mig-mixed"),
        "builtin/capacity",
        "ask for one kind of GPU resource, or put the containers in separate pods",
        id="capacity-whole-pod",
    ),
    pytest.param(
        lambda a: rule({"wholeGPUsOnly": True}, a),
        pod({"nvidia.com/gpu": 1}),
        inventory("mig-single"),
        "r/wholeGPUsOnly",
        "Ask for nvidia.com/gpu on nodes with whole GPUs",
        id="wholeGPUsOnly",
    ),
    pytest.param(
        lambda a: rule({"minGPUMemory": "40Gi"}, a),
        pod({"nvidia.com/gpu": 1}, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
        inventory("mixed-cluster"),  # some GPUs have 40Gi: the pod can select them
        "r/minGPUMemory",
        "required node affinity nvidia.com/gpu.memory Gt 40959",
        id="minGPUMemory",
    ),
    pytest.param(
        lambda a: rule({"minGPUMemory": "40Gi"}, a),
        pod({"nvidia.com/gpu": 1}),
        inventory("timesliced"),  # no GPU has 40Gi: the rule is at fault (issue 42)
        "r/minGPUMemory",
        "cannot be met on this cluster: GPU memory 40Gi matches no node, pool or device",
        id="minGPUMemory-that-no-gpu-meets",
    ),
    pytest.param(
        lambda a: rule({"minGPUMemory": "40Gi"}, a),
        pod({"nvidia.com/gpu": 1}),
        NO_INVENTORY,
        "r/minGPUMemory",
        "does not select them",
        id="minGPUMemory-without-inventory",
    ),
]


@pytest.mark.parametrize("action", ["deny", "warn", "audit"])
@pytest.mark.parametrize(("make", "obj", "view", "finding", "fix"), CASES)
def test_a_check_follows_its_action_and_says_how_to_fix(
    *, make: Any, obj: dict[str, Any], view: InventoryView, finding: str, fix: str, action: str
) -> None:
    decision = evaluate(Request(obj), policy=make(action), inventory=view)

    found = [f for f in decision.findings if f.id == finding]
    assert [f.action for f in found] == [action]
    assert fix in found[0].message
    assert decision.allowed is (action != "deny")
    if action == "warn":
        assert any(w.startswith(finding) for w in decision.warnings)
    if action == "audit":
        assert found[0].audit_key in decision.audit


@pytest.mark.parametrize(
    ("when", "allowed", "action", "limit"),
    [
        pytest.param("cap", True, "warn", "1000Gi", id="cap"),
        pytest.param("skip", True, "warn", None, id="skip"),
        pytest.param("deny", False, "deny", None, id="deny"),
    ],
)
def test_memory_limits_that_fit_no_node_are_capped_skipped_or_denied(
    when: str, allowed: bool, action: str, limit: str | None
) -> None:
    decision = evaluate(
        Request(pod({"nvidia.com/gpu": 8})), policy=memory(when), inventory=inventory("plain")
    )

    assert decision.allowed is allowed
    assert [(f.id, f.action) for f in decision.findings] == [("r/memoryLimit", action)]
    assert decision.mutated is not None
    limits = dict(decision.mutated)["spec"]["containers"][0]["resources"]["limits"]
    assert limits.get("memory") == limit
