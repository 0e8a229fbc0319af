"""``rules lint --inventory`` on rules keyed on node labels no GPU node carries (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.running import gpu_webhook

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tests" / "cases" / "_rules" / "dra-policies"
INVENTORIES = ROOT / "tests" / "cases" / "_inventories"
pytestmark = pytest.mark.slow


def lint(*args: str | Path) -> tuple[int, str, str]:
    done = gpu_webhook("rules", "lint", *args)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stdout, done.stderr


def test_a_product_and_a_memory_rule_on_a_dra_only_cluster_are_warned_with_the_attribute_to_use() -> (
    None
):
    code, out, err = lint(RULES, "--inventory", INVENTORIES / "dra-gpucluster.yaml")

    assert code == 0, err
    # The rules' values against the devices are policyreach's lines (test_rules_values).
    lines = [line for line in err.splitlines() if "keys on node label" in line]
    assert len(lines) == 2, err
    assert (
        "(GPUPolicy vision-products): spec.mutate.nodeAffinity: rule vision-products keys on node label nvidia.com/gpu.product, which no GPU node carries (4 GPU nodes)"
        in lines[0]
    )
    assert "device.attributes['gpu.nvidia.com'].productName" in lines[0]
    assert "rule llm-gpu-memory keys on node label nvidia.com/gpu.memory" in lines[1]
    assert "device.capacity['gpu.nvidia.com'].memory" in lines[1]
    assert "no problems, " in out


@pytest.mark.parametrize(
    "inventory",
    [
        pytest.param("dra-gpucluster-labelled.yaml", id="DRA nodes that GFD still labels"),
        pytest.param("cluster.yaml", id="a device-plugin cluster"),
    ],
)
def test_rules_on_labels_the_gpu_nodes_carry_are_not_warned(inventory: str) -> None:
    code, out, err = lint(RULES, "--inventory", INVENTORIES / inventory)

    assert code == 0, err
    assert "keys on node label" not in err
    assert "no problems" in out


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        pytest.param(
            "nvidia.com/mig.strategy", "mixed", "select the devices in a ResourceClaim", id="MIG"
        ),
        pytest.param(
            "nvidia.com/gpu.sharing-strategy",
            "none",
            "allowMultipleAllocations",
            id="sharing, read on devices",
        ),
    ],
)
def test_a_label_with_no_device_reading_is_warned_with_what_dra_offers_instead(
    tmp_path: Path, key: str, value: str, said: str
) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: no-mps}\n"
        "spec:\n  match: {namespaces: [a]}\n  mutate:\n    nodeAffinity:\n      required:\n"
        f"        - {{key: {key}, operator: In, values: [{value}]}}\n"
    )

    code, _, err = lint(tmp_path, "--inventory", INVENTORIES / "dra.yaml")

    assert code == 0, err
    assert f"rule no-mps keys on node label {key}" in err
    assert said in err
