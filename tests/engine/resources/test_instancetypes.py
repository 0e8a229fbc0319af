"""The instance-type catalogue: every row carries its source, and the allowance for a new
node's allocatable never reserves more than Karpenter itself does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from webhook.engine.kube.quantity import parse_quantity
from webhook.engine.policy.ruleset import DocumentRef, PolicyError, RuleDocument, compile_policy
from webhook.engine.resources.instancetypes import (
    MIB,
    Allowance,
    Catalogue,
    CatalogueError,
    instance_type_from_data,
)
from webhook.files.shipped import shipped_catalogue

DATA = Path(__file__).resolve().parents[3] / "webhook" / "data" / "instance-types.json"
ROWS: list[dict[str, Any]] = json.loads(DATA.read_text())["types"]
SPEC_PAGES = (
    "https://aws.amazon.com/ec2/instance-types/",
    "https://learn.microsoft.com/azure/",
    "https://cloud.google.com/compute/docs/gpus",
)


@pytest.mark.parametrize("row", [pytest.param(r, id=r["name"]) for r in ROWS])
def test_every_row_cites_the_providers_published_spec_and_where_its_numbers_were_read(
    row: dict[str, Any],
) -> None:
    assert row["source"].startswith(SPEC_PAGES)
    assert row["numbersFrom"].startswith("https://")
    assert row["gpu"]["count"] >= 1
    assert row["vcpu"] >= 1
    assert row["memoryMiB"] >= 1


def test_the_catalogue_covers_the_main_gpu_families() -> None:
    families = {r["labels"].get("karpenter.k8s.aws/instance-family") for r in ROWS}
    assert {"p4d", "p4de", "p5", "p5e", "p5en", "g4dn", "g5", "g6", "g6e", "gr6", "g5g"} <= families
    names = {r["name"] for r in ROWS if r["provider"] == "azure"}
    assert {
        "Standard_NC40ads_H100_v5",
        "Standard_ND96isr_H100_v5",
        "Standard_NC24ads_A100_v4",
        "Standard_NV36ads_A10_v5",
        "Standard_NC4as_T4_v3",
    } <= names
    assert shipped_catalogue().complete == frozenset({"aws"})


def test_gcp_lists_the_accelerator_optimized_machine_types_with_gkes_labels() -> None:
    gcp = {r["name"]: r for r in ROWS if r["provider"] == "gcp"}
    assert {
        "a2-highgpu-1g",
        "a2-megagpu-16g",
        "a2-ultragpu-8g",
        "a3-highgpu-8g",
        "a3-megagpu-8g",
        "a3-edgegpu-8g",
        "a3-ultragpu-8g",
        "a4-highgpu-8g",
        "g2-standard-4",
        "g2-standard-96",
    } <= set(gcp)
    for row in gcp.values():
        labels = row["labels"]
        assert labels["cloud.google.com/gke-accelerator-count"] == str(row["gpu"]["count"])
        assert labels["cloud.google.com/machine-family"] == row["name"].split("-")[0]
        assert labels["cloud.google.com/gke-accelerator"].startswith("nvidia-")
    # Compute Engine's "GB" is GiB: a2-highgpu-1g, 85 GB, has memoryMb 87040.
    assert gcp["a2-highgpu-1g"]["memoryMiB"] == 87040
    assert gcp["a2-megagpu-16g"]["gpu"]["count"] == 16


@pytest.mark.parametrize(
    ("name", "share"),
    [
        ("Standard_NV6ads_A10_v5", "1/6"),
        ("Standard_NV12ads_A10_v5", "1/3"),
        ("Standard_NV18ads_A10_v5", "1/2"),
    ],
)
def test_a_partial_gpu_azure_size_is_one_gpu_resource_as_karpenter_counts_it(
    name: str, share: str
) -> None:
    (row,) = [r for r in ROWS if r["name"] == name]
    assert row["gpu"]["count"] == 1
    assert row["labels"]["karpenter.azure.com/sku-gpu-count"] == "1"
    assert row["partialGPU"] == share
    assert share in row["gpu"]["model"]


AWS = [r for r in ROWS if r["provider"] == "aws"]


def _published(row: dict[str, Any]) -> dict[str, int]:
    cpu = parse_quantity(row["karpenterAllocatable"]["cpu"]) * 1000
    return {"cpu": int(cpu), "memory": int(parse_quantity(row["karpenterAllocatable"]["memory"]))}


def test_the_default_allowance_never_reserves_more_than_karpenter_publishes() -> None:
    allowance, catalogue = Allowance(), shipped_catalogue()
    exact = 0
    for row in AWS:
        ours = allowance.allocatable(catalogue.get("aws", row["name"]))  # type: ignore[arg-type]
        theirs = _published(row)
        assert ours["cpu"] >= theirs["cpu"], row["name"]
        assert ours["memory"] >= theirs["memory"], row["name"]
        exact += ours["cpu"] == theirs["cpu"] and ours["memory"] == theirs["memory"]
    # g5g (arm64) is published with 59 MiB more reserved; every other type matches exactly.
    assert exact == len(AWS) - sum(r["name"].startswith("g5g.") for r in AWS)


def test_a_fixed_allowance_replaces_the_formulas() -> None:
    p5 = shipped_catalogue().get("aws", "p5.48xlarge")
    assert p5 is not None
    got = Allowance(memory_overhead_percent=0, cpu=2000, memory=10 * 1024 * MIB).allocatable(p5)
    assert got == {"cpu": 190_000, "memory": (2097152 - 10 * 1024) * MIB, "nvidia.com/gpu": 8}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param(
            {"name": "x"},
            "t: types[0].gpu: must be an object with resource, model, count",
            id="no-gpu",
        ),
        pytest.param(
            {
                "provider": "aws",
                "name": "x",
                "gpu": {"resource": "nvidia.com/gpu", "model": "m", "count": "8", "memoryMiB": 1},
            },
            "t: types[0].gpu.count: must be a whole number of at least 1",
            id="count-as-text",
        ),
    ],
)
def test_a_broken_row_is_one_line_naming_the_row_and_field(
    row: dict[str, Any], message: str
) -> None:
    with pytest.raises(CatalogueError) as raised:
        Catalogue.from_data({"types": [row]}, where="t")
    assert str(raised.value) == message


def _instance_type_document(**spec: Any) -> RuleDocument:
    body = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "nc40"},
        "spec": spec,
    }
    return RuleDocument(DocumentRef("rules.yaml", 1, "InstanceType", "nc40"), body)


def test_an_instance_type_rule_document_adds_a_row_to_the_shipped_catalogue() -> None:
    doc = _instance_type_document(
        instanceType="Standard_NCC40ads_H100_v5",
        provider="azure",
        gpu={
            "resource": "nvidia.com/gpu",
            "model": "NVIDIA H100 NVL 94GB",
            "count": 1,
            "memoryMiB": 96256,
        },
        vcpu=40,
        memoryMiB=327680,
        source="https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncadsh100v5-series",
    )
    policy = compile_policy([doc], catalogue=shipped_catalogue())
    row = policy.catalogue.get("azure", "Standard_NCC40ads_H100_v5")
    assert row is not None
    assert row.gpu_count == 1
    assert row.labels["node.kubernetes.io/instance-type"] == "Standard_NCC40ads_H100_v5"
    assert policy.catalogue.get("aws", "p5.48xlarge") is not None


def test_an_instance_type_rule_document_with_a_bad_field_names_its_document() -> None:
    doc = _instance_type_document(
        instanceType="x", provider="aws", gpu={"resource": "r"}, vcpu=1, memoryMiB=1, source="s"
    )
    with pytest.raises(PolicyError) as raised:
        compile_policy([doc])
    assert str(raised.value) == (
        "rules.yaml: doc 1 (InstanceType nc40): spec.gpu.model: must be a non-empty string"
    )


def test_a_row_reads_as_the_data_file_writes_it() -> None:
    row = instance_type_from_data(AWS[0], where="x")
    assert row.provider == "aws"
    assert row.source == AWS[0]["source"]
