"""``gpu-webhook check`` on NVIDIA's DRA examples: pods are judged through the claim
templates in the same files, against the DRA inventory given with ``--inventory``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

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


MIXED = REPO / "tests" / "cases" / "_inventories" / "dra-mixed.yaml"
DCGM = REPO / "tests" / "cases" / "dra-admin-access-dcgm-exporter-daemonset" / "object.yaml"


def test_the_dcgm_exporter_with_its_admin_access_template_in_the_same_file_is_allowed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The GPU operator's DCGM exporter for DRA and its admin-access claim template (in
    dra-mixed.yaml as it renders them), in one file; the inventory without the template.
    Admin access takes no device away, and the namespace's labels are not known here."""
    items = yaml.safe_load(MIXED.read_text())["items"]
    template = next(i for i in items if i["metadata"]["name"] == "nvidia-dcgm-exporter-admin")
    inventory = tmp_path / "inventory.yaml"
    rest = [i for i in items if i is not template]
    inventory.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": rest}))
    manifest = tmp_path / "dcgm.yaml"
    manifest.write_text(yaml.safe_dump(template) + "---\n" + DCGM.read_text())

    code, results = check(capsys, "-f", str(manifest), "--inventory", str(inventory))

    assert code == 0, results
    for kind in ("ResourceClaimTemplate", "DaemonSet"):
        result = by_kind(results, kind)
        assert result["allowed"] is True, result
        assert result["findings"] == [], result
    # Applied with its own patch, the DaemonSet is judged the same.
    daemonset = by_kind(results, "DaemonSet")
    patched = jsonpatch.apply_patch(yaml.safe_load(DCGM.read_text()), daemonset["patch"])
    manifest.write_text(yaml.safe_dump(template) + "---\n" + yaml.safe_dump(patched))
    code, again = check(capsys, "-f", str(manifest), "--inventory", str(inventory))
    assert (code, by_kind(again, "DaemonSet")["allowed"], by_kind(again, "DaemonSet")["patch"]) == (
        0,
        True,
        [],
    )
