"""What a review names that the inventory has not seen: the claims, templates and classes
the shell may read directly (webhook.engine.evaluation.references)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.evaluation.references import (
    MAX_REFERENCES,
    Reference,
    unseen_references,
)
from webhook.engine.evaluation.request import Request
from webhook.files.inventoryfile import load_inventory_file
from webhook.files.rulefiles import load_policy

ROOT = Path(__file__).resolve().parents[3]
DEVICES = load_inventory_file(str(ROOT / "tests" / "cases" / "_inventories" / "dra.yaml")).devices
POLICY = load_policy(str(ROOT / "rules"))


def pod(*entries: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"resourceClaims": list(entries), "containers": [{"name": "c", "image": "x"}]},
    }


def claim(device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team"},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }


@pytest.mark.parametrize(
    ("obj", "unseen"),
    [
        pytest.param(
            pod({"name": "a", "resourceClaimName": "late"}),
            [Reference("ResourceClaim", "team", "late")],
            id="a claim the pod names by name",
        ),
        pytest.param(
            pod({"name": "a", "resourceClaimTemplateName": "late"}),
            [Reference("ResourceClaimTemplate", "team", "late")],
            id="a template the pod names",
        ),
        pytest.param(
            claim("new.example.com"),
            [Reference("DeviceClass", "", "new.example.com")],
            id="a class a claim names",
        ),
        pytest.param(claim("gpu.nvidia.com"), [], id="must not fire: a class the inventory has"),
        pytest.param(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": []},
            },
            [],
            id="must not fire: a pod without claims",
        ),
    ],
)
def test_a_review_names_what_the_inventory_lacks(
    obj: dict[str, Any], unseen: list[Reference]
) -> None:
    assert list(unseen_references(Request(obj), policy=POLICY, devices=DEVICES)) == unseen


def test_a_cluster_without_dra_has_nothing_to_read() -> None:
    obj = pod({"name": "a", "resourceClaimName": "late"})
    assert unseen_references(Request(obj), policy=POLICY, devices=None) == ()


def test_a_pod_naming_many_claims_asks_for_a_bounded_number() -> None:
    obj = pod(*({"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(32)))
    assert len(unseen_references(Request(obj), policy=POLICY, devices=DEVICES)) == MAX_REFERENCES
