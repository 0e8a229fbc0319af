"""``check`` with the example policies on a DRA-only inventory (issue 31), as a new user
runs it: no denial of the webhook's own affinity, and the claim a denial asks for passes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.running import gpu_webhook

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "cases" / "_rules" / "dra-policies"
DRA = ROOT / "tests" / "cases" / "_inventories" / "dra.yaml"
pytestmark = pytest.mark.slow


def pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ]
        },
    }


def test_the_example_policies_on_dra_yaml_deny_only_for_true_reasons_and_say_the_claim(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "pods.yaml"
    manifests.write_text(
        yaml.safe_dump_all([pod("vis", "vision"), pod("llm", "default", {"workload-type": "llm"})])
    )

    done = gpu_webhook("check", "-f", manifests, "--rules", RULES, "--inventory", DRA)

    assert done.returncode == 1, done.stderr
    assert "exclude" not in done.stdout  # never the pod's affinity: there is none of its own
    assert re.search(r"Pod default/llm \(.*\): ALLOWED", done.stdout), done.stdout
    assert "2 objects: 1 allowed, 1 denied" in done.stdout
    told = re.search(r"create (\{.*?\}), give the pod", done.stdout)
    assert told is not None, done.stdout
    template = json.loads(told.group(1))
    fixed = tmp_path / "fixed.yaml"
    claimed = pod("vis", "vision")
    claimed["spec"] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-policy"}],
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"claims": [{"name": "gpu", "request": "gpu"}]},
            }
        ],
    }
    fixed.write_text(yaml.safe_dump_all([template, claimed]))

    again = gpu_webhook("check", "-f", fixed, "--rules", RULES, "--inventory", DRA)

    assert again.returncode == 0, again.stdout
    assert "2 objects: 2 allowed, 0 denied" in again.stdout
