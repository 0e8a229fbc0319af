"""Rules keyed on GPU labels, read on DRA devices; and the plan for a rule's affinity."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engine.enforcement.mutators import add_required_affinity_or_absent
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import Request
from webhook.engine.kube.patch import Editor
from webhook.engine.resources.cel.deviceselectors import SelectorError, compile_selector
from webhook.engine.resources.devices import DeviceInventory, device_from_json
from webhook.engine.resources.gpufacts import MEMORY_LABEL, PRODUCT_LABEL
from webhook.engine.resources.inventory import Inventory, Node, Placement
from webhook.engine.scheduling.devicepolicy import (
    DEVICE_LABELS,
    REPLICAS_LABEL,
    SHARING_LABEL,
    DeviceRule,
    affinity_plan,
    allowing_selector,
    claim_units,
    device_labels,
    dra_profile,
    gfd_profile,
    holds_gpus,
    is_device_label,
    is_mig,
    label_form,
    mig_label,
    refuses_devices,
)
from webhook.engine.scheduling.dra import pod_claims
from webhook.files.inventoryfile import load_inventory_file
from webhook.files.rulefiles import load_policy

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


DRA_MIXED = load_inventory_file(str(ROOT / "tests/cases/_inventories/dra-mixed.yaml")).view()


@pytest.mark.parametrize(
    ("lands", "refused"),
    [
        pytest.param(None, True, id="a node holding H100s refuses an A100-only rule"),
        pytest.param(lambda _node: True, True, id="where the pod lands there, it refuses"),
        pytest.param(
            lambda _node: False, False, id="where the pod cannot land, it refuses nothing"
        ),
    ],
)
def test_a_dra_node_refuses_devices_only_where_the_pod_could_land_and_fit(
    lands: Any, refused: bool
) -> None:
    """kube-scheduler filters out a node that cannot hold the pod: none of its devices,
    refused or not, is ever given to it."""
    assert DRA_MIXED.devices is not None
    assert DRA_MIXED.snapshot is not None
    (h100,) = [n for n in DRA_MIXED.snapshot.nodes if n.name == "dra-h100-0"]

    judge = refuses_devices(DRA_MIXED.devices, ["gpu.nvidia.com"], lands=lands)

    assert judge(h100, PRODUCT_IN) is refused


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


# --- the claim a denial tells, and the denial where none can be told (issue 31, item 1) -------


def _gpu(name: str, product: str, *, shared: bool = False) -> Any:
    raw: dict[str, Any] = {
        "name": name,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
        "capacity": {"memory": {"value": "80Gi"}},
        "allowMultipleAllocations": shared,
    }
    return device_from_json(raw, driver="gpu.nvidia.com", pool="p")


WHOLE = DeviceRule("r", "wholeGPUsOnly", "deny", "whole GPUs", whole=True)
INVENTORIES = ROOT / "tests" / "cases" / "_inventories"
RULES = ROOT / "tests" / "cases" / "_rules" / "dra-policies"
_TOLD = re.compile(r"create (\{.*\}), give the pod")
A100 = "NVIDIA A100-SXM4-80GB"


def test_a_whole_gpu_rule_selects_the_exclusive_gpus_where_shared_ones_look_alike() -> None:
    whole, shared = _gpu("gpu-0", A100), _gpu("gpu-1", A100, shared=True)

    selector = allowing_selector([whole], [WHOLE], refused=[shared])

    assert "!device.allowMultipleAllocations" in selector
    compiled = compile_selector(selector)
    assert not isinstance(compiled, SelectorError)
    assert compiled.matches(whole.view())
    assert not compiled.matches(shared.view())


def test_the_selector_names_allow_multiple_allocations_only_where_a_slice_sets_it() -> None:
    # Without a shared device in sight the API server may lack DRAConsumableCapacity, and a
    # selector naming the field would not compile there.
    l4 = _gpu("gpu-1", "NVIDIA L4")

    selector = allowing_selector([_gpu("gpu-0", A100)], [WHOLE], refused=[l4])

    assert "allowMultipleAllocations" not in selector


@pytest.mark.parametrize(
    ("holds", "verdict"),
    [
        pytest.param(True, "applyWarn", id="the labelled node holds the pod: kept there"),
        pytest.param(False, "orUnlabelled", id="it does not: the DRA nodes stay open"),
    ],
)
def test_dra_nodes_with_refused_devices_are_kept_out_only_where_labelled_nodes_hold_the_pod(
    holds: bool, verdict: str
) -> None:
    nodes = [node("a", **{PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}), node("d1")]

    plan = affinity_plan(
        PRODUCT_IN,
        placement=TAINT_FREE,
        nodes=Inventory(nodes),
        dra_node=lambda n: n.name == "d1",
        plugin_node=lambda n: n.name == "a",
        refused_on=lambda _node, _requirements: True,
        holds=lambda _node: holds,
    )

    assert plan.verdict == verdict


def test_a_node_holds_the_pod_by_its_allocatable_or_by_the_devices_of_the_class() -> None:
    inventory = load_inventory_file(str(INVENTORIES / "dra-gpucluster-mixed-l4.yaml"))
    devices = inventory.view().devices
    assert devices is not None
    nodes = {n.name: n for n in inventory.view().snapshot.nodes}
    holds = holds_gpus(
        devices, ["gpu.nvidia.com"], [("nvidia.com/gpu", 4)], dra_node=lambda n: "dra" in n.name
    )

    assert not holds(nodes["gpu-plugin-h100-0"])  # 2 in allocatable
    assert holds(nodes["dra-a100-0"])  # 4 devices of the class
    assert not holds_gpus(
        devices, ["gpu.nvidia.com"], [("nvidia.com/gpu", 5)], dra_node=lambda _node: True
    )(nodes["dra-a100-1"])


def _plain_pod(count: int) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"limits": {"nvidia.com/gpu": count}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vis", "namespace": "vision"},
        "spec": {"containers": [container]},
    }


def _judge(inventory: Path, pod: dict[str, Any]) -> Any:
    view = load_inventory_file(str(inventory)).view()
    return evaluate(
        Request(pod, namespace="vision"), policy=load_policy(str(RULES)), inventory=view
    )


@pytest.mark.parametrize(
    "inventory",
    [
        pytest.param("dra-gpucluster-mixed-l4.yaml", id="DRA nodes with A100s and L4s"),
        pytest.param("dra-gpucluster-mixed-shared.yaml", id="exclusive and shared A100s alike"),
    ],
)
def test_a_plain_gpu_pod_the_labelled_nodes_cannot_hold_is_told_the_claim_that_is_admitted(
    inventory: str, tmp_path: Path
) -> None:
    decision = _judge(INVENTORIES / inventory, _plain_pod(4))

    assert not decision.allowed
    told = next((m for f in decision.findings if (m := _TOLD.search(f.message))), None)
    assert told is not None, [f.message for f in decision.findings]
    template = json.loads(told.group(1))
    raw = yaml.safe_load((INVENTORIES / inventory).read_text())
    raw["items"] = [i for i in raw["items"] if i.get("kind") != "ResourceClaimTemplate"] + [
        template
    ]
    rewritten = tmp_path / "inventory.yaml"
    rewritten.write_text(yaml.safe_dump(raw))
    pod = _plain_pod(4)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-policy"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu", "request": "gpu"}]}

    again = _judge(rewritten, pod)

    assert again.allowed, [f.message for f in again.findings]


def test_where_only_refused_devices_are_free_the_denial_says_it_cannot_fit_and_what_it_asked() -> (
    None
):
    decision = _judge(INVENTORIES / "dra-gpucluster-mixed-only-l4.yaml", _plain_pod(4))

    messages = " ".join(f.message for f in decision.denials)
    assert not decision.allowed
    assert "The pod asks 4 nvidia.com/gpu: no device it can get" in messages
    assert "it cannot fit within the policy" in messages
    assert "create {" not in messages


def test_a_plain_gpu_pod_the_labelled_node_holds_is_admitted_there_without_a_claim() -> None:
    decision = _judge(INVENTORIES / "dra-gpucluster-mixed-l4.yaml", _plain_pod(2))

    assert decision.allowed, [f.message for f in decision.findings]
    assert not any("create {" in f.message for f in decision.findings)


DRIVER_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: driver-580
spec:
  order: 30
  match:
    namespaces: [vision]
  mutate:
    tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
    nodeAffinity:
      required:
        - {key: nvidia.com/cuda.driver.major, operator: In, values: ["580"]}
"""


def test_where_no_selector_it_writes_tells_the_devices_apart_the_denial_says_so(
    tmp_path: Path,
) -> None:
    # dra-a100-1's A100s run driver 570, dra-a100-0's 580: alike in product, memory, type
    # and allowMultipleAllocations, all the selector it writes reads.
    text = (INVENTORIES / "dra-gpucluster-mixed-l4.yaml").read_text()
    start = text.index("name: dra-a100-1-gpu.nvidia.com")
    older = text[:start] + text[start:].replace("version: 580.82.7", "version: 570.124.6")
    (tmp_path / "inventory.yaml").write_text(older)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "30-driver.yaml").write_text(DRIVER_RULE)
    view = load_inventory_file(str(tmp_path / "inventory.yaml")).view()
    request = Request(_plain_pod(1), namespace="vision")

    decision = evaluate(request, policy=load_policy(str(rules)), inventory=view)

    messages = " ".join(f.message for f in decision.denials)
    assert not decision.allowed
    assert "No selector this webhook can write" in messages, messages
    assert "create {" not in messages


# --- GFD's per-profile MIG labels, read on MIG devices (issue 31) ----------------------------


def _mig(profile: str, *, shared: bool = False, **capacity: str) -> Any:
    raw: dict[str, Any] = {
        "name": "gpu-0-mig",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {name: {"value": value} for name, value in capacity.items()},
        "allowMultipleAllocations": shared,
    }
    return device_from_json(raw, driver="gpu.nvidia.com", pool="p")


H100_1G = {
    "memory": "9856Mi",
    "multiprocessors": "16",
    "copyEngines": "1",
    "decoders": "1",
    "encoders": "0",
    "jpegEngines": "1",
    "ofaEngines": "0",
}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param(
            "nvidia.com/mig-1g.10gb.product", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", id="product"
        ),
        pytest.param("nvidia.com/mig-1g.10gb.memory", "9856", id="memory in MiB"),
        pytest.param("nvidia.com/mig-1g.10gb.multiprocessors", "16", id="multiprocessors"),
        pytest.param("nvidia.com/mig-1g.10gb.slices.gi", "1", id="GPU-instance slices"),
        pytest.param("nvidia.com/mig-1g.10gb.slices.ci", "1", id="compute-instance slices"),
        pytest.param("nvidia.com/mig-1g.10gb.engines.copy", "1", id="copy engines"),
        pytest.param("nvidia.com/mig-1g.10gb.engines.decoder", "1", id="decoders"),
        pytest.param("nvidia.com/mig-1g.10gb.engines.encoder", "0", id="encoders"),
        pytest.param("nvidia.com/mig-1g.10gb.engines.jpeg", "1", id="jpeg"),
        pytest.param("nvidia.com/mig-1g.10gb.engines.ofa", "0", id="ofa"),
        pytest.param("nvidia.com/mig-1g.10gb.replicas", "1", id="replicas"),
        pytest.param("nvidia.com/mig-1g.10gb.sharing-strategy", "none", id="sharing strategy"),
        pytest.param("nvidia.com/gpu.multiprocessors", "16", id="single strategy: under gpu"),
        pytest.param("nvidia.com/gpu.engines.jpeg", "1", id="single strategy: engines"),
    ],
)
def test_a_mig_device_gives_the_labels_gfd_writes_for_its_profile(key: str, value: str) -> None:
    labels = device_labels(_mig("1g.10gb", **H100_1G))

    assert labels[key] == value
    assert is_device_label(key)


def test_a_nodes_count_of_a_profile_is_no_devices_property() -> None:
    labels = device_labels(_mig("1g.10gb", **H100_1G))

    assert "nvidia.com/mig-1g.10gb.count" not in labels
    assert not is_device_label("nvidia.com/mig-1g.10gb.count")
    assert not is_device_label("nvidia.com/gpu.count")


def test_a_profile_with_media_extensions_is_named_as_gfd_names_its_resource() -> None:
    # go-nvlib's MigProfileInfo.String writes 1g.10gb+me; GFD's nvmlMigDevice.GetName
    # turns the + into a dot for the resource (and so the label) name.
    labels = device_labels(_mig("1g.10gb+me", memory="9856Mi"))

    assert labels["nvidia.com/mig-1g.10gb.me.memory"] == "9856"
    assert labels[PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
    assert not any(k.startswith("nvidia.com/mig-1g.10gb.memory") for k in labels)
    assert mig_label("nvidia.com/mig-1g.10gb.me.memory") == ("1g.10gb.me", "memory")
    assert dra_profile("1g.10gb.me") == "1g.10gb+me"
    assert gfd_profile(dra_profile("1c.2g.20gb")) == "1c.2g.20gb"


def test_a_compute_instance_smaller_than_its_gpu_instance_has_no_sm_count_from_the_profile() -> (
    None
):
    labels = device_labels(_mig("1c.2g.20gb", multiprocessors="32", copyEngines="2"))

    assert labels["nvidia.com/mig-1c.2g.20gb.slices.gi"] == "2"
    assert labels["nvidia.com/mig-1c.2g.20gb.slices.ci"] == "1"
    assert labels["nvidia.com/mig-1c.2g.20gb.engines.copy"] == "2"
    assert "nvidia.com/mig-1c.2g.20gb.multiprocessors" not in labels


def test_a_shared_mig_device_claims_no_replicas_and_a_gpu_no_mig_labels() -> None:
    shared = device_labels(_mig("1g.10gb", shared=True, memory="9856Mi"))
    whole = device_labels(device(type="gpu", productName="NVIDIA A100-SXM4-80GB", memory="80Gi"))

    assert "nvidia.com/mig-1g.10gb.replicas" not in shared
    assert "nvidia.com/mig-1g.10gb.memory" in shared
    assert not any(k.startswith("nvidia.com/mig-") for k in whole)
    assert "nvidia.com/gpu.multiprocessors" not in whole


@pytest.mark.parametrize(
    ("key", "operator", "value", "allowed"),
    [
        pytest.param("nvidia.com/mig-1g.10gb.memory", "Gt", "9000", True, id="its profile"),
        pytest.param("nvidia.com/mig-2g.20gb.memory", "Gt", "9000", False, id="another profile"),
        pytest.param("nvidia.com/mig-1g.10gb.memory", "Gt", "9999", False, id="too little"),
        pytest.param(
            "nvidia.com/mig-1g.10gb.product",
            "In",
            "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
            True,
            id="product",
        ),
    ],
)
def test_a_mig_label_affinity_allows_only_devices_of_its_profile(
    key: str, operator: str, value: str, allowed: bool
) -> None:
    assert _affinity(key, operator, value).allows(device_labels(_mig("1g.10gb", **H100_1G))) is (
        allowed
    )


def _selects(selector: str, devices: list[Any]) -> list[bool]:
    compiled = compile_selector(selector)
    assert not isinstance(compiled, SelectorError), selector
    return [compiled.matches(d.view()) for d in devices]


def test_the_selector_told_for_mig_devices_names_their_profiles_after_their_type() -> None:
    small, large = _mig("1g.10gb", **H100_1G), _mig("3g.40gb", memory="40192Mi")
    whole = _gpu("gpu-1", "NVIDIA H100 80GB HBM3")
    rule = _affinity("nvidia.com/mig-1g.10gb.memory", "Gt", "9000")

    selector = allowing_selector([small], [rule], refused=[large, whole])

    # A whole GPU has no profile: type first, so CEL's && absorbs the missing attribute.
    assert selector.index(".type == 'mig'") < selector.index(".profile in ['1g.10gb']")
    assert "compareTo(quantity('9001Mi'))" in selector
    assert _selects(selector, [small, large, whole]) == [True, False, False]


def test_the_selector_for_whole_gpus_and_mig_devices_of_one_product_keeps_both() -> None:
    small, large = _mig("1g.10gb", **H100_1G), _mig("3g.40gb", memory="40192Mi")
    whole = _gpu("gpu-1", "NVIDIA H100 80GB HBM3")
    rule = DeviceRule(
        "r",
        "allowedProducts",
        "deny",
        "",
        products=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"),
    )

    selector = allowing_selector([small, whole], [rule], refused=[large])

    assert _selects(selector, [small, whole, large]) == [True, True, False]


def test_mig_devices_of_other_products_need_no_profile_in_the_selector() -> None:
    a100 = _gpu("gpu-1", "NVIDIA A100-SXM4-80GB")

    selector = allowing_selector([_mig("1g.10gb", **H100_1G)], [], refused=[a100])

    assert "profile" not in selector


MIG_MEMORY = ({"key": "nvidia.com/mig-1g.10gb.memory", "operator": "Gt", "values": ["9000"]},)


@pytest.mark.parametrize(
    ("nodes", "verdict"),
    [
        pytest.param(
            [
                node("h", **{PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3", MIG_MEMORY[0]["key"]: "9856"}),
                node("a", **{PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}),
            ],
            "apply",
            id="GFD labels every node: one without the profile has none of it, as written",
        ),
        pytest.param([node("h"), node("a")], "skip", id="no GFD: held on the devices"),
        pytest.param(
            [node("h", **{MIG_MEMORY[0]["key"]: "9856"}), node("a")],
            "orUnlabelled",
            id="a node GFD does not label stays open",
        ),
    ],
)
def test_a_mig_label_affinity_judges_a_gfd_labelled_node_without_the_profile_by_its_labels(
    nodes: list[Node], verdict: str
) -> None:
    plan = affinity_plan(
        MIG_MEMORY,
        placement=TAINT_FREE,
        nodes=Inventory(nodes),
        dra_node=lambda _node: True,
        plugin_node=lambda _node: False,
    )

    assert plan.verdict == verdict


# --- what a claim's units are, remembered per snapshot ------------------------------------


def _claim_objects(*, mig_on: str) -> list[dict[str, Any]]:
    """A GPU class, a template for 2 GPUs, and nodes a and b with 2 devices each: MIG
    devices on ``mig_on``, whole GPUs on the other."""
    objects: list[dict[str, Any]] = [
        {
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        },
        {
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two", "namespace": "ns"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpus",
                                "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2},
                            }
                        ]
                    }
                }
            },
        },
    ]
    for name in ("a", "b"):
        kind = "mig" if name == mig_on else "gpu"
        objects.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{name}-gpu.nvidia.com"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": f"node-{name}",
                    "pool": {"name": f"node-{name}", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"{kind}-{i}", "attributes": {"type": {"string": kind}}}
                        for i in range(2)
                    ],
                },
            }
        )
    return objects


def _units(
    devices: DeviceInventory, nodes: Inventory, *, on: str | None
) -> list[tuple[tuple[str, int], ...]]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two"}],
    }
    if on is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": f"node-{on}"}
    claims = pod_claims(
        spec, namespace="ns", devices=devices, is_gpu_class=lambda c: c == "gpu.nvidia.com"
    )
    placement = Placement.of(spec)
    found = claim_units(claims, placement=placement, nodes=nodes, devices=devices)
    return [u.mig for u in found]


def _nodes(*names: str) -> Inventory:
    return Inventory(
        Node(name=f"node-{n}", labels={"kubernetes.io/hostname": f"node-{n}"}) for n in names
    )


def test_a_claims_units_are_asked_again_for_another_placement_nodes_or_snapshot() -> None:
    devices = DeviceInventory.of(_claim_objects(mig_on="a"))
    both = _nodes("a", "b")
    assert _units(devices, both, on="a") == [(("gpus", 2),)]
    assert _units(devices, both, on="a") == [(("gpus", 2),)]  # remembered: the same answer
    assert _units(devices, both, on="b") == []  # another placement
    assert _units(devices, both, on=None) == [(("gpus", 2),)]
    assert _units(devices, _nodes("b"), on=None) == []  # other nodes, the same devices
    changed = DeviceInventory.of(_claim_objects(mig_on="b"))  # a new snapshot
    assert _units(changed, both, on="a") == []
    assert _units(changed, both, on="b") == [(("gpus", 2),)]
