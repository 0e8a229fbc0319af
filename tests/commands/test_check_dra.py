"""``gpu-webhook check`` on NVIDIA's DRA examples: pods are judged through the claim
templates in the same files, against the DRA inventory given with ``--inventory``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webhook.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "tests" / "fixtures" / "dra"
DRA = REPO / "tests" / "cases" / "_inventories" / "dra.yaml"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    code = main(["check", "--rules", str(REPO / "rules"), "-o", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def by_kind(results: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (result,) = [r for r in results if r["kind"] == kind]
    return result


def test_a_pod_sharing_one_claimed_gpu_between_containers_is_allowed_untouched(capsys):
    code, results = check(capsys, "-f", str(EXAMPLES / "gpu-test2.yaml"), "--inventory", str(DRA))
    pod = by_kind(results, "Pod")
    assert code == 0
    assert pod["allowed"] is True
    # It tolerates the GPU taint itself, and both containers hold the claim: nothing to hide.
    assert pod["patch"] == []


def test_mig_devices_that_no_node_has_are_denied_for_the_template_and_the_deployment(capsys):
    code, results = check(capsys, "-f", str(EXAMPLES / "gpu-test4.yaml"), "--inventory", str(DRA))
    assert code == 1
    for kind in ("ResourceClaimTemplate", "Deployment"):
        result = by_kind(results, kind)
        assert result["allowed"] is False, kind
        (finding,) = result["findings"]
        assert finding["check"] == "deviceClaims"
        assert "profile == '1g.5gb'" in finding["message"], finding["message"]


def test_without_an_inventory_claim_pods_are_gpu_pods_but_their_fit_is_not_judged(capsys):
    code, results = check(capsys, "-f", str(EXAMPLES / "gpu-test2.yaml"))
    pod = by_kind(results, "Pod")
    assert code == 0
    assert pod["allowed"] is True
    assert any("DRA claims not checked" in n for n in pod["notices"])


def test_a_gpu_served_by_a_device_class_is_judged_against_devices(capsys):
    code, results = check(capsys, "-f", str(EXAMPLES / "gpu-full.yaml"), "--inventory", str(DRA))
    assert code == 0
    assert by_kind(results, "Pod")["allowed"] is True
