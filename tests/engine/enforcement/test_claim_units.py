"""maxSharedGPUs and multipleMIGDevices on what a pod's DRA claims may get
(``checks.claim_unit_findings``): per container, by the claims and requests it holds, and
only warned where the webhook could not read every device."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.enforcement.checks import Scope, claim_unit_findings
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy
from webhook.engine.resources.inventory import Placement
from webhook.engine.scheduling.devicepolicy import ClaimUnits
from webhook.engine.scheduling.dra import PodClaim


def _policy(action: str) -> Policy:
    body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "r"}}
    spec = {"validate": [{"maxSharedGPUs": 1, "action": action}]}
    return compile_policy(
        [RuleDocument(DocumentRef("t", 1, "GPUPolicy", "r"), {**body, "spec": spec})]
    )


def _scope(policy: Policy, *containers: dict[str, Any]) -> Scope:
    spec = {"containers": list(containers)}
    settings = policy.settings
    pod = pod_gpus(spec, settings.gpu_resources)
    return Scope("spec", spec, {}, pod, Placement.of(spec), settings)


def _holding(name: str, *claims: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": "cuda", "resources": {"claims": list(claims)}}


CLAIM = PodClaim("gpus", "ResourceClaimTemplate t", None, gpu_count=2)


@pytest.mark.parametrize(
    ("units", "containers", "found"),
    [
        pytest.param(
            ClaimUnits(CLAIM, shared=(("a", 1), ("b", 1))),
            [_holding("main", {"name": "gpus"})],
            [("r", "maxSharedGPUs", "deny")],
            id="two shares in one container",
        ),
        pytest.param(
            ClaimUnits(CLAIM, shared=(("a", 1), ("b", 1))),
            [
                _holding("one", {"name": "gpus", "request": "a"}),
                _holding("two", {"name": "gpus", "request": "b"}),
            ],
            [],
            id="one share in each of two containers",
        ),
        pytest.param(
            ClaimUnits(CLAIM, shared=(("a", 2),), unknown=True),
            [_holding("main", {"name": "gpus"})],
            [("r", "maxSharedGPUs", "warn")],
            id="a selector not evaluated: warned, not denied",
        ),
        pytest.param(
            ClaimUnits(CLAIM, mig=(("a", 1), ("b", 1))),
            [_holding("main", {"name": "gpus"})],
            [("builtin", "multipleMIGDevices", "warn")],
            id="two MIG devices in one container",
        ),
        pytest.param(
            ClaimUnits(CLAIM, shared=(("a", 2),)),
            [_holding("main", {"name": "other"})],
            [],
            id="a container that holds another claim",
        ),
    ],
)
def test_shares_and_mig_devices_are_counted_per_container_holding_them(
    units: ClaimUnits, containers: list[dict[str, Any]], found: list[tuple[str, str, str]]
) -> None:
    policy = _policy("deny")

    got = claim_unit_findings(_scope(policy, *containers), [units], policy.rules)

    assert [(f.rule, f.check, f.action) for f in got] == found
