"""Node classes on a DRA-only inventory are told apart by their devices (issue 31): no
node carries a product label, so labels alone would make A100 and L4 nodes one class."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import RULES
from webhook.cli import main
from webhook.files.inventoryfile import load_inventory_file
from webhook.files.rulefiles import load_policy
from webhook.reports.explain import explain, render_text
from webhook.reports.inventory import summarize

INVENTORY = Path(__file__).resolve().parents[1] / "cases" / "_inventories" / "dra-gpucluster.yaml"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "one", "namespace": "default"},
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


def four_gpus_each(tmp_path: Path) -> str:
    """dra-gpucluster.yaml with the L4 nodes' slices grown to four devices, as many as the
    A100 nodes have: only the devices' products tell the two classes apart."""
    doc: dict[str, Any] = yaml.safe_load(INVENTORY.read_text())
    for item in doc["items"]:
        devices = item["spec"].get("devices") if item["kind"] == "ResourceSlice" else None
        while devices is not None and len(devices) < 4:
            grown = copy.deepcopy(devices[0])
            grown["name"] = f"gpu-{len(devices)}"
            devices.append(grown)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_explain_shows_the_a100_and_the_l4_nodes_as_two_classes(tmp_path: Path) -> None:
    file = load_inventory_file(four_gpus_each(tmp_path))

    text = render_text(
        explain(POD, policy=load_policy(str(RULES)), inventory=file.view(), nodes=file.nodes.nodes)
    )

    assert "NVIDIA A100-SXM4-80GB  2 nodes" in text, text
    assert "NVIDIA L4              2 nodes" in text, text


def test_the_inventory_report_shows_them_as_two_classes(tmp_path: Path) -> None:
    file = load_inventory_file(four_gpus_each(tmp_path))

    report = summarize(file.nodes, file.devices)

    products = sorted((c.product, c.nodes) for c in report.classes)
    assert products == [("(no GPU)", 1), ("NVIDIA A100-SXM4-80GB", 2), ("NVIDIA L4", 2)]


CLAIM_POD = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {name: by-claim, namespace: default}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  containers:
  - name: main
    image: nvcr.io/nvidia/pytorch:24.05-py3
    resources: {claims: [{name: gpu}]}
"""


def test_the_dra_nodes_a_claim_pod_is_shown_are_not_counted_as_nodes_without_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The four DRA nodes are the table's two classes; cpu-0 alone has no GPU."""
    manifest = tmp_path / "claim-pod.yaml"
    manifest.write_text(CLAIM_POD)

    main(["explain", "--rules", str(RULES), "--inventory", str(INVENTORY), "-f", str(manifest)])
    text = capsys.readouterr().out

    assert "NVIDIA A100-SXM4-80GB  2 nodes" in text, text
    assert "NVIDIA L4              2 nodes" in text, text
    assert "and 1 node without GPUs" in text, text
