"""``gpu-webhook check --inventory`` with an inventory file that lists RuntimeClasses
(``kubectl get nodes,runtimeclasses -o yaml``): a class the cluster lacks is a finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import pod
from webhook.cli import main

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "tests" / "cases" / "_inventories"


def gpu_pod(runtime_class: str) -> dict[str, Any]:
    obj = pod(gpus=1)
    obj["spec"]["runtimeClassName"] = runtime_class
    return obj


@pytest.mark.parametrize(
    ("case", "code", "checks"),
    [
        pytest.param(("cluster-with-runtime-classes", "nvidia"), 0, [], id="a class that exists"),
        pytest.param(
            ("cluster-with-runtime-classes", "kata"),
            1,
            ["unknownRuntimeClass"],
            id="a class the cluster lacks",
        ),
        pytest.param(("cluster", "kata"), 0, [], id="an inventory without classes judges none"),
    ],
)
def test_a_runtime_class_is_judged_against_the_classes_the_inventory_lists(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, str],
    code: int,
    checks: list[str],
) -> None:
    inventory, runtime_class = case
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(gpu_pod(runtime_class)))
    args = ["check", "--rules", str(REPO / "rules"), "-f", str(manifest), "-o", "json"]
    args += ["--inventory", str(INVENTORIES / f"{inventory}.yaml")]

    assert main(args) == code
    (result,) = json.loads(capsys.readouterr().out)
    assert [f["check"] for f in result["findings"]] == checks


def test_claims_checked_beside_a_pod_keep_the_inventorys_runtime_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "unused", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump_all([template, gpu_pod("kata")]))
    args = ["check", "--rules", str(REPO / "rules"), "-f", str(manifest), "-o", "json"]
    args += ["--inventory", str(INVENTORIES / "cluster-with-runtime-classes.yaml")]

    assert main(args) == 1
    results = json.loads(capsys.readouterr().out)
    assert [f["check"] for f in results[-1]["findings"]] == ["unknownRuntimeClass"]
