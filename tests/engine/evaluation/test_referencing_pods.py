"""A ResourceClaim created after the pods that name it is judged with them (issue 35): a
pod-total GPU limit only the new claim breaks denies the claim; nothing else does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import Request
from webhook.engine.policy.ruleset import Policy
from webhook.files.context import files_view
from webhook.files.rulefiles import load_policy

ROOT = Path(__file__).resolve().parents[3]
DRA = str(ROOT / "tests" / "cases" / "_inventories" / "dra.yaml")


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    rules = tmp_path_factory.mktemp("rules")
    (rules / "limit.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: four}\n"
        "spec:\n  match: {namespaces: [team]}\n  validate:\n  - maxGPUsPerPod: 4\n"
        "    action: deny\n"
    )
    return load_policy(str(rules))


def claim(name: str, count: int, device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    request = {"name": "r", "exactly": {"deviceClassName": device_class, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"devices": {"requests": [request]}},
    }


def pod(*claims: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "team"},
        "spec": {
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            "containers": [
                {
                    "name": "m",
                    "image": "cuda",
                    "resources": {"claims": [{"name": c} for c in claims]},
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("existing", "new", "pods", "denied"),
    [
        pytest.param(
            [claim("a", 4)],
            claim("b", 4),
            [pod("a", "b", "c")],
            True,
            id="the second 4-GPU claim of a 4-GPU pod",
        ),
        pytest.param(
            [],
            claim("a", 4),
            [pod("a", "b", "c")],
            False,
            id="must not fire: the first brings it to 4",
        ),
        pytest.param(
            [claim("a", 1)],
            claim("b", 1),
            [pod("a", "b", "c")],
            False,
            id="must not fire: 1-GPU claims stay within",
        ),
        pytest.param(
            [claim("a", 4)], claim("b", 4), [], False, id="must not fire: no pod names it"
        ),
        pytest.param(
            [claim("a", 4)],
            claim("b", 4, "nic.example.com"),
            [pod("a", "b")],
            False,
            id="must not fire: a claim of no GPU class",
        ),
    ],
)
def test_a_new_claim_is_denied_only_when_it_takes_a_pod_that_names_it_over_its_limit(
    policy: Policy,
    existing: list[dict[str, Any]],
    new: dict[str, Any],
    pods: list[dict[str, Any]],
    denied: bool,
) -> None:
    view = files_view(DRA, existing)
    request = Request(new, namespace="team", referencing_pods=tuple(pods))

    decision = evaluate(request, policy=policy, inventory=view)

    assert decision.allowed is not denied, decision.findings
    if denied:
        (finding,) = decision.denials
        assert finding.id == "four/maxGPUsPerPod"
        assert finding.message.startswith("pod trainer, which names this ResourceClaim")


def test_pods_not_read_leave_the_claim_judged_on_its_own(policy: Policy) -> None:
    view = files_view(DRA, [claim("a", 4)])
    request = Request(
        claim("b", 4), namespace="team", referencing_pods=(), referencing_complete=False
    )

    decision = evaluate(request, policy=policy, inventory=view)

    assert decision.allowed
    assert any("not every pod that names this claim was read" in n for n in decision.notices)


def test_without_a_read_of_pods_the_claim_is_judged_as_before(policy: Policy) -> None:
    view = files_view(DRA, [claim("a", 4)])
    alone = evaluate(Request(claim("b", 4), namespace="team"), policy=policy, inventory=view)
    assert alone.allowed
    assert alone.notices == ()
