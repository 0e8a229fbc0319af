"""Rules keyed on GPU labels, read on DRA devices; and the plan for a rule's affinity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.enforcement.mutators import add_required_affinity_or_absent
from webhook.engine.kube.patch import Editor
from webhook.engine.resources.devices import device_from_json
from webhook.engine.resources.gpufacts import MEMORY_LABEL, PRODUCT_LABEL
from webhook.engine.resources.inventory import Inventory, Node, Placement
from webhook.engine.scheduling.devicepolicy import (
    DEVICE_LABELS,
    REPLICAS_LABEL,
    SHARING_LABEL,
    DeviceRule,
    affinity_plan,
    device_labels,
    is_mig,
    label_form,
)

ROOT = Path(__file__).resolve().parents[3]


def device(**attributes: Any) -> Any:
    raw: dict[str, Any] = {
        "name": "gpu-0",
        "attributes": {
            k: ({"version": v} if k.endswith(("Version", "Capability")) else {"string": v})
            for k, v in attributes.items()
            if k != "memory"
        },
    }
    if "memory" in attributes:
        raw["capacity"] = {"memory": {"value": attributes["memory"]}}
    return device_from_json(raw, driver="gpu.nvidia.com", pool="node-0")


@pytest.mark.parametrize(
    ("nvml", "label"),
    [
        pytest.param("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", id="A100"),
        pytest.param("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", id="H100"),
        pytest.param("NVIDIA L4", "NVIDIA-L4", id="L4"),
    ],
)
def test_nvml_names_are_read_as_the_labels_gfd_writes(nvml: str, label: str) -> None:
    assert label_form(nvml) == label


def test_a_devices_attributes_give_the_labels_gfd_would_set_on_its_node() -> None:
    labels = device_labels(
        device(
            type="gpu",
            productName="NVIDIA H100 80GB HBM3",
            architecture="Hopper",
            cudaComputeCapability="9.0.0",
            driverVersion="570.124.6",
            cudaDriverVersion="12.8.0",
            memory="81559Mi",
        )
    )

    assert labels[PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3"
    assert labels[MEMORY_LABEL] == "81559"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/gpu.compute.major"] == "9"
    assert labels["nvidia.com/cuda.driver.major"] == "570"
    assert labels["nvidia.com/cuda.driver-version.revision"] == "6"
    assert labels["nvidia.com/cuda.runtime-version.minor"] == "8"


def test_a_mig_device_is_its_parents_product_with_the_profile_as_gfd_names_it() -> None:
    labels = device_labels(
        device(type="mig", productName="NVIDIA A100-SXM4-80GB", profile="1g.10gb", memory="9856Mi")
    )

    assert labels[PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert labels[MEMORY_LABEL] == "9856"


def _affinity(key: str, operator: str, value: str) -> DeviceRule:
    """A rule whose required node affinity is the one expression ``key operator value``."""
    requirement = {"key": key, "operator": operator, "values": [value]}
    return DeviceRule("r", "nodeAffinity", "deny", "", requirements=(requirement,))


@pytest.mark.parametrize(
    ("rule", "allowed"),
    [
        pytest.param(
            _affinity(PRODUCT_LABEL, "In", "NVIDIA-L4"),
            False,
            id="affinity In another product",
        ),
        pytest.param(
            _affinity(MEMORY_LABEL, "Gt", "40959"),
            True,
            id="affinity Gt on memory",
        ),
        pytest.param(
            DeviceRule("r", "allowedProducts", "deny", "", products=("NVIDIA-A100-*",)),
            True,
            id="allowedProducts glob",
        ),
        pytest.param(
            DeviceRule("r", "minGPUMemory", "deny", "", min_memory_mib=90000),
            False,
            id="minGPUMemory above the device's",
        ),
    ],
)
def test_a_rule_reads_the_device_as_its_labels(rule: DeviceRule, allowed: bool) -> None:
    a100 = device(type="gpu", productName="NVIDIA A100-SXM4-80GB", memory="80Gi")

    assert rule.allows(device_labels(a100)) is allowed


PRODUCT_IN = ({"key": PRODUCT_LABEL, "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},)
TAINT_FREE = Placement(node_selector={}, required_terms=None, tolerations=())


def node(name: str, **labels: str) -> Node:
    return Node(name=name, labels={"kubernetes.io/hostname": name, **labels})


@pytest.mark.parametrize(
    ("nodes", "dra", "refused", "verdict"),
    [
        pytest.param(
            [node("a", **{PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}), node("b")],
            set(),
            False,
            "apply",
            id="a device-plugin cluster: as written",
        ),
        pytest.param([node("d1"), node("d2")], {"d1", "d2"}, False, "skip", id="DRA only"),
        pytest.param(
            [node("a", **{PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}), node("d1")],
            {"d1"},
            False,
            "orUnlabelled",
            id="mixed: the DRA node stays open",
        ),
        pytest.param(
            [node("a", **{PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}), node("d1")],
            {"d1"},
            True,
            "applyWarn",
            id="mixed, DRA node with a refused device: labelled nodes only",
        ),
        pytest.param(
            [node("d1", **{PRODUCT_LABEL: "NVIDIA-L4"})],
            {"d1"},
            False,
            "apply",
            id="a DRA node GFD labels otherwise: its labels decide",
        ),
        pytest.param(
            [node("a", **{PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}), node("p"), node("d1")],
            {"d1"},
            False,
            "applyWarn",
            id="an unlabelled device-plugin node: no alternative that lets it in",
        ),
    ],
)
def test_a_rules_gpu_label_affinity_is_planned_with_and_without_it(
    nodes: list[Node], dra: set[str], refused: bool, verdict: str
) -> None:
    plan = affinity_plan(
        PRODUCT_IN,
        placement=TAINT_FREE,
        nodes=Inventory(nodes),
        dra_node=lambda n: n.name in dra,
        plugin_node=lambda n: n.name not in dra,
        refused_on=lambda _node, _requirements: refused,
    )

    assert plan.verdict == verdict


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="no affinity"),
        pytest.param({"nodeSelector": {"pool": "x"}}, id="a nodeSelector"),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                },
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["b"]}
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            id="two terms of the user's",
        ),
    ],
)
def test_the_affinity_or_unlabelled_is_idempotent_and_keeps_each_term_of_the_user(
    spec: dict[str, Any],
) -> None:
    editor = Editor({"spec": spec})
    add_required_affinity_or_absent(editor, ("spec",), PRODUCT_IN)
    once = editor.get(("spec",))
    again = Editor({"spec": once})
    add_required_affinity_or_absent(again, ("spec",), PRODUCT_IN)

    assert again.ops == []
    terms = once["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    placement = Placement.of(once)
    labelled = {**spec.get("nodeSelector", {}), PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}
    for zone in ["a", "b"] if len(terms) == 4 else [None]:
        extra = {"zone": zone} if zone else {}
        assert placement.admits({**labelled, **extra}, "n", ())
        assert placement.admits({**spec.get("nodeSelector", {}), **extra}, "n", ())
        assert not placement.admits({**labelled, PRODUCT_LABEL: "NVIDIA-L4", **extra}, "n", ())


@pytest.mark.parametrize(
    ("raw", "whole"),
    [
        pytest.param({"type": {"string": "gpu"}}, True, id="a GPU"),
        pytest.param({"type": {"string": "mig"}}, False, id="a MIG device"),
        pytest.param({"type": {"string": "gpu"}, "shared": True}, False, id="a shared GPU"),
    ],
)
def test_whole_gpus_only_is_read_on_the_device_type_and_its_sharing(
    raw: dict[str, Any], whole: bool
) -> None:
    shared = raw.pop("shared", False)
    json = {"name": "d", "attributes": raw, "allowMultipleAllocations": shared}
    rule = DeviceRule("r", "wholeGPUsOnly", "deny", "whole GPUs", whole=True)

    labels = device_labels(device_from_json(json, driver="gpu.nvidia.com", pool="p"))

    assert rule.allows(labels) is whole


def _sharing(shared: bool) -> dict[str, str]:
    json = {"name": "d", "attributes": {"type": {"string": "gpu"}}}
    return device_labels(
        device_from_json(
            {**json, "allowMultipleAllocations": shared}, driver="gpu.nvidia.com", pool="p"
        )
    )


@pytest.mark.parametrize(
    ("key", "operator", "value", "shared", "allowed"),
    [
        pytest.param(SHARING_LABEL, "In", "none", False, True, id="none on a GPU to itself"),
        pytest.param(SHARING_LABEL, "In", "none", True, False, id="none on a shared GPU"),
        pytest.param(SHARING_LABEL, "NotIn", "mps", True, True, id="NotIn mps on a shared GPU"),
        pytest.param(SHARING_LABEL, "NotIn", "none", True, True, id="NotIn none: shared"),
        pytest.param(
            SHARING_LABEL, "NotIn", "none", False, False, id="NotIn none: a GPU to itself"
        ),
        pytest.param(REPLICAS_LABEL, "In", "1", False, True, id="one replica"),
        pytest.param(REPLICAS_LABEL, "In", "1", True, False, id="a shared GPU has no count"),
    ],
)
def test_the_sharing_strategy_is_read_on_whether_a_device_allows_multiple_allocations(
    key: str, operator: str, value: str, shared: bool, allowed: bool
) -> None:
    assert _affinity(key, operator, value).allows(_sharing(shared)) is allowed


def test_a_shared_device_claims_no_strategy_and_mig_strategy_stays_off_devices() -> None:
    assert SHARING_LABEL not in _sharing(True)
    assert {SHARING_LABEL, REPLICAS_LABEL} <= DEVICE_LABELS
    assert not {"nvidia.com/mig.strategy", "nvidia.com/mig.config"} & DEVICE_LABELS


@pytest.mark.parametrize(
    ("raw", "mig"),
    [
        pytest.param({"type": {"string": "mig"}, "profile": {"string": "1g.10gb"}}, True, id="mig"),
        pytest.param({"type": {"string": "gpu"}}, False, id="gpu"),
        pytest.param({}, False, id="no type"),
    ],
)
def test_a_mig_device_is_one_the_driver_types_mig(raw: dict[str, Any], mig: bool) -> None:
    found = device_from_json({"name": "d", "attributes": raw}, driver="gpu.nvidia.com", pool="p")

    assert is_mig(found) is mig
