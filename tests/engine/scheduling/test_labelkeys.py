"""Warnings for rules keyed on labels no GPU node carries, by what stands for the label on
DRA devices (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.admission.inventory import StaticInventorySource
from webhook.engine.scheduling.policyvalues.labelkeys import label_warnings
from webhook.files.rulefiles import load_policy

CASES = Path(__file__).resolve().parents[2] / "cases"
DRA_ONLY = str(CASES / "_inventories" / "dra-gpucluster.yaml")
DRA_MIG = str(CASES / "_inventories" / "dra-gpucluster-mig.yaml")
DRA_MIG_LABELLED = str(CASES / "_inventories" / "dra-gpucluster-mig-labelled.yaml")
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
        pytest.param(
            "nvidia.com/mig-1g.10gb.memory",
            "9856",
            "type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.10gb' && "
            "device.capacity['gpu.nvidia.com'].memory),",
            id="a MIG profile's memory",
        ),
        pytest.param(
            "nvidia.com/mig-1g.10gb.me.engines.copy",
            "1",
            "profile == '1g.10gb+me' && device.capacity['gpu.nvidia.com'].copyEngines",
            id="GFD's dot is the driver's plus",
        ),
        pytest.param(
            "nvidia.com/gpu.multiprocessors",
            "16",
            "type == 'mig' && device.capacity['gpu.nvidia.com'].multiprocessors",
            id="mig strategy single's attributes",
        ),
        pytest.param(
            "nvidia.com/mig-1g.10gb.count",
            "2",
            "is the node's, not any device's",
            id="a node's count of a profile",
        ),
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


@pytest.mark.parametrize(
    ("inventory", "warned"),
    [
        pytest.param(DRA_MIG, True, id="DRA-only: told what stands for it on the devices"),
        pytest.param(DRA_MIG_LABELLED, False, id="GFD still labels the MIG node: no warning"),
    ],
)
def test_a_mig_profile_label_is_warned_only_where_no_gpu_node_carries_it(
    tmp_path: Path, inventory: str, warned: bool
) -> None:
    (tmp_path / "rule.yaml").write_text(
        RULE.format(key="nvidia.com/mig-1g.10gb.memory", value="9856")
    )
    source = StaticInventorySource(inventory)

    warnings = label_warnings(load_policy(str(tmp_path)), source.snapshot(), source.devices())

    assert bool(warnings) is warned
    assert not any("no DRA device attribute stands" in w.message for w in warnings)
