"""The admission service on DRA objects: claims judged on create, claim pods mutated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import patched, review
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.files.rulefiles import RuleStore

DRA = Path(__file__).resolve().parents[1] / "cases" / "_inventories" / "dra.yaml"


@pytest.fixture(scope="module")
def service() -> AdmissionService:
    return AdmissionService(rules=RuleStore("rules"), inventory=StaticInventorySource(str(DRA)))


def answer(service: AdmissionService, body: dict[str, Any], *, mutate: bool) -> dict[str, Any]:
    response: dict[str, Any] = service.review(parse_review(json.dumps(body)), mutate=mutate).body[
        "response"
    ]
    return response


def claim(count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "training", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
    }


def test_a_claim_no_node_can_meet_is_denied_on_create_naming_the_check(service):
    # 17: more than even the cordoned L40S node (16), which a cordon passing opens.
    response = answer(service, review(claim(17)), mutate=False)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "[builtin/deviceClaims]" in response["status"]["message"]
    assert "has 16" in response["status"]["message"]


def test_a_claim_only_a_cordoned_node_can_meet_is_allowed_with_a_warning(service):
    response = answer(service, review(claim(12)), mutate=False)
    assert response["allowed"] is True
    assert any("unavailable now" in w for w in response["warnings"]), response


def test_a_claim_that_fits_is_allowed_and_an_update_is_not_judged_again(service):
    assert answer(service, review(claim(8)), mutate=False)["allowed"] is True
    update = review(claim(12), operation="UPDATE", old=claim(12))
    assert answer(service, update, mutate=False)["allowed"] is True


def test_a_claim_pod_gets_the_gpu_toleration_and_keeps_its_gpu_container_visible(service):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}},
                {"name": "sidecar", "image": "busybox"},
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    response = answer(service, review(pod), mutate=True)
    assert response["allowed"] is True
    mutated = patched(pod, response)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in mutated[
        "spec"
    ]["tolerations"]
    main, sidecar = mutated["spec"]["containers"]
    assert "env" not in main
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in sidecar["env"]
