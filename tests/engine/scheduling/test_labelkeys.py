"""Warnings for rules keyed on labels no GPU node carries, by what stands for the label on
DRA devices (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.admission.inventory import StaticInventorySource
from webhook.engine.scheduling.labelkeys import label_warnings
from webhook.files.rulefiles import load_policy

CASES = Path(__file__).resolve().parents[2] / "cases"
DRA_ONLY = str(CASES / "_inventories" / "dra-gpucluster.yaml")
RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: keyed
spec:
  match:
    namespaces: ["team"]
  mutate:
    nodeAffinity:
      required:
        - key: {key}
          operator: In
          values: ["{value}"]
"""


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        pytest.param(
            "nvidia.com/gpu.sharing-strategy", "none", "allowMultipleAllocations", id="sharing"
        ),
        pytest.param("nvidia.com/gpu.replicas", "1", "allowMultipleAllocations", id="replicas"),
        pytest.param(
            "nvidia.com/mig.strategy", "mixed", "no DRA device attribute stands", id="mig strategy"
        ),
        pytest.param(
            "nvidia.com/mig.config", "all-1g.10gb", "no DRA device attribute", id="mig config"
        ),
        pytest.param("nvidia.com/gpu.product", "NVIDIA-L4", "productName", id="product"),
    ],
)
def test_a_label_key_no_dra_node_carries_is_named_with_what_the_devices_hold_instead(
    tmp_path: Path, key: str, value: str, said: str
) -> None:
    (tmp_path / "rule.yaml").write_text(RULE.format(key=key, value=value))
    source = StaticInventorySource(DRA_ONLY)

    warnings = label_warnings(load_policy(str(tmp_path)), source.snapshot(), source.devices())

    assert len(warnings) == 1
    assert f"rule keyed keys on node label {key}" in warnings[0].message
    assert said in warnings[0].message
