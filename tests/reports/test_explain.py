"""``explain`` against a fixed inventory: one golden output per reason a GPU pod stays
Pending (tests/reports/explain/<case>/), and the per-class answers as data.

Regenerate the goldens with ``GPU_WEBHOOK_UPDATE_GOLDEN=1 ./scripts/test -k explain`` and
read the diff: each is the text a user gets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.builders import RULES, team_policies
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.inventory import Inventory
from webhook.files.inventoryfile import load_inventory
from webhook.files.rulefiles import load_policy
from webhook.reports.explain import Explanation, SchedulerEvent, explain, render_text

CASES = Path(__file__).parent / "explain"
INVENTORY = load_inventory(str(CASES / "inventory.yaml"))
POLICY = load_policy(str(RULES))
UPDATE = os.environ.get("GPU_WEBHOOK_UPDATE_GOLDEN") == "1"
NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


def _explain(name: str, event: SchedulerEvent | None = None) -> Explanation:
    obj = yaml.safe_load((CASES / name / "object.yaml").read_text())
    return explain(
        obj,
        policy=POLICY,
        inventory=InventoryView(INVENTORY),
        nodes=INVENTORY.nodes,
        event=event,
    )


@pytest.mark.parametrize("name", NAMES)
def test_golden_explanation(name: str) -> None:
    text = render_text(_explain(name))
    expected = CASES / name / "expected.txt"
    if UPDATE:
        expected.write_text(text)
    assert text == expected.read_text()


def test_every_case_directory_holds_exactly_its_object_and_golden() -> None:
    for name in NAMES:
        assert sorted(p.name for p in (CASES / name).iterdir()) == ["expected.txt", "object.yaml"]


def _answers(name: str) -> dict[str, str]:
    (template,) = _explain(name).templates
    return {c.product: c.verdict for c in template.classes}


@pytest.mark.parametrize(
    ("name", "product", "verdict"),
    [
        pytest.param("fits", "NVIDIA-A100-SXM4-80GB", "fits 2 of 2 nodes", id="fits"),
        pytest.param(
            "wrong-resource-name",
            "NVIDIA-A100-SXM4-80GB",
            # Not a GPU to the rules, so no toleration: the taint is the scheduler's first word.
            "no: 2 node(s) had untolerated taint {nvidia.com/gpu: present}",
            id="resource-name-not-offered",
        ),
        pytest.param(
            "mig-profile-absent",
            "NVIDIA-H100-80GB-HBM3",
            "no: 1 Insufficient nvidia.com/mig-2g.20gb (MIG profile 2g.20gb absent; profiles here: 1g.10gb, 3g.40gb)",
            id="mig-profile-absent",
        ),
        pytest.param(
            "taint-not-tolerated",
            "Tesla-V100-SXM2-32GB",
            "no: 1 node(s) had untolerated taint {dedicated: research}",
            id="taint-not-tolerated",
        ),
        pytest.param(
            "selector-mismatch",
            "NVIDIA-A100-SXM4-80GB",
            "no: 2 node(s) didn't match Pod's node affinity/selector (required node affinity matches no term)",
            id="affinity-mismatch",
        ),
        pytest.param(
            "more-gpus-than-any-node",
            "NVIDIA-A100-SXM4-80GB",
            "no: 2 Insufficient nvidia.com/gpu (requests 16, a node here has 8)",
            id="count-above-class",
        ),
        pytest.param(
            "cordoned",
            "Tesla-T4",
            "fits when uncordoned (now: 1 node(s) were unschedulable)",
            id="cordoned",
        ),
        pytest.param(
            "not-ready",
            "NVIDIA-A10",
            "fits when the node is ready again "
            "(now: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: })",
            id="not-ready",
        ),
        pytest.param(
            "shared-only",
            "NVIDIA-L4",
            "no: 1 Insufficient nvidia.com/gpu (GPUs here are shared: only nvidia.com/gpu.shared is offered)",
            id="shared-gpus-only",
        ),
        pytest.param(
            "shared-slots",
            "NVIDIA-L4",
            "fits (2 nvidia.com/gpu.shared are 2 time-sliced slots (x4 per GPU), possibly on one GPU, not whole GPUs)",
            id="shared-slots",
        ),
    ],
)
def test_each_pending_cause_is_named_for_the_class_it_concerns(
    name: str, product: str, verdict: str
) -> None:
    assert _answers(name)[product] == verdict


def test_a_resource_no_node_offers_is_named_with_what_it_may_have_meant() -> None:
    (template,) = _explain("wrong-resource-name").templates
    assert template.unoffered == ("no node offers nvidia.com/gpus; did you mean nvidia.com/gpu?",)


def test_the_webhooks_toleration_is_what_lets_the_pod_fit() -> None:
    explanation = _explain("fits")
    assert explanation.allowed
    assert any(op["path"] == "/spec/tolerations" for op in explanation.patch)
    assert "+  - key: nvidia.com/gpu" in explanation.diff


def test_a_denial_names_its_rule() -> None:
    explanation = _explain("mig-profile-absent")
    assert not explanation.allowed
    assert "Webhook on create: DENIED by builtin/unknownResource" in render_text(explanation)


def test_the_schedulers_last_message_is_quoted_next_to_our_reading() -> None:
    event = SchedulerEvent(
        message="0/8 nodes are available: 1 node(s) were unschedulable, 7 node(s) didn't "
        "match Pod's node affinity/selector.",
        time="2026-11-30T12:00:00Z",
        count=12,
    )
    text = render_text(_explain("cordoned", event))
    assert text.endswith(
        f'Scheduler, last FailedScheduling (2026-11-30T12:00:00Z, 12 times):\n  "{event.message}"\n'
    )
    data = _explain("cordoned", event).to_json()
    assert data["scheduler"]["lastFailedScheduling"] == event.message


def _policy_with(tmp_path: Path, name: str, document: str) -> Policy:
    """The project's rules plus one more rule document."""
    for rule in RULES.glob("*.yaml"):
        (tmp_path / rule.name).write_text(rule.read_text())
    (tmp_path / name).write_text(document)
    return load_policy(str(tmp_path))


def test_a_declared_node_pool_is_a_class_of_its_own_that_may_scale_from_zero(
    tmp_path: Path,
) -> None:
    policy = _policy_with(
        tmp_path,
        "95-pool.yaml",
        """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUNodePool
metadata: {name: h100-on-demand}
spec:
  labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  allocatable: {nvidia.com/gpu: "8"}
  maxNodes: 4
""",
    )
    obj = yaml.safe_load((CASES / "fits" / "object.yaml").read_text())
    explanation = explain(
        obj, policy=policy, inventory=InventoryView(INVENTORY), nodes=INVENTORY.nodes
    )
    (template,) = explanation.templates
    (pool,) = [c for c in template.classes if c.pool_nodes]
    assert pool.product == "NVIDIA-H100-80GB-HBM3 (node pool h100-on-demand)"
    assert (pool.node_count, pool.verdict) == ("0-4 nodes", "fits (on a node the pool adds)")


# --- the whole request vector, as the webhook's capacity check judges it --------------------

# One node of 8 whole A100s (190 cpu, 1000Gi) and one of 4 T4s time-sliced x4, advertised as
# nvidia.com/gpu: 16 (62 cpu, 240Gi): the label sets and their sources are in those files.
_INVENTORIES = Path(__file__).parents[1] / "cases" / "_inventories"
_WHOLE_AND_SHARED = Inventory(
    [
        *load_inventory(str(_INVENTORIES / "plain.yaml")).nodes,
        *(
            n
            for n in load_inventory(str(_INVENTORIES / "timesliced.yaml")).nodes
            if n.name != "cpu-0"  # both files have it
        ),
    ]
)
_MEMORY_RULE = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: memory}
spec:
  mutate:
    memoryLimit: {perGPU: 600Gi}
"""


def _pod(resources: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "cuda:12", "resources": resources}]},
    }


_REFUSING_PLUGIN = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUSettings
metadata: {name: cluster}
spec:
  devicePlugin:
    failRequestsGreaterThanOne: {timeSlicing: true}
    keepOffRefusingNodes: KEEP
"""
_REFUSED = (
    "no: 1 node(s) refuse more than one nvidia.com/gpu slot per container (kube-scheduler "
    "places the pod; the NVIDIA device plugin fails it at allocation) (time-slicing x4 "
    "(failRequestsGreaterThanOne): a container asks 2 nvidia.com/gpu; ask for 1 per container, "
    "or for whole GPUs on nodes that do not share them (nvidia.com/gpu.sharing-strategy: none))"
)


@pytest.mark.parametrize(
    ("keep_off", "t4_verdict"),
    [
        pytest.param("false", _REFUSED, id="named as the device plugin's refusal"),
        pytest.param(
            "true",
            "no: 1 node(s) didn't match Pod's node affinity/selector (required node affinity "
            "matches no term)",
            id="kept off them by the webhook's affinity",
        ),
    ],
)
def test_slots_a_device_plugin_refuses_do_not_fit_though_the_scheduler_would_place_them(
    tmp_path: Path, keep_off: str, t4_verdict: str
) -> None:
    settings = _REFUSING_PLUGIN.replace("KEEP", keep_off)
    policy = _policy_with(tmp_path, "00-settings.yaml", settings)

    explanation = explain(
        _pod({"limits": {"nvidia.com/gpu": 2}}),
        policy=policy,
        inventory=InventoryView(_WHOLE_AND_SHARED),
        nodes=_WHOLE_AND_SHARED.nodes,
    )

    (template,) = explanation.templates
    assert {c.product: c.verdict for c in template.classes} == {
        "NVIDIA-A100-SXM4-40GB": "fits",
        "Tesla-T4-SHARED": t4_verdict,
    }
    assert explanation.allowed  # the A100 takes it
    assert any("sharing-strategy" in line for line in explanation.diff) == (keep_off == "true")


@pytest.mark.parametrize(
    ("resources", "memory_rule", "verdicts"),
    [
        pytest.param(
            {"limits": {"nvidia.com/gpu": 1}},
            False,
            {"NVIDIA-A100-SXM4-40GB": "fits", "Tesla-T4-SHARED": "fits"},
            id="a pod that fits both classes is told so, as before",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": 8}},
            False,
            {
                "NVIDIA-A100-SXM4-40GB": "fits",
                "Tesla-T4-SHARED": "fits (8 nvidia.com/gpu are 8 time-sliced slots (x4 per GPU), "
                "possibly on one GPU, not whole GPUs)",
            },
            id="eight slots on four time-sliced GPUs fit: the device plugin allocates them",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": 1}, "requests": {"memory": "2000Gi"}},
            False,
            {
                "NVIDIA-A100-SXM4-40GB": "no: 1 Insufficient memory (requests 2000Gi, a node "
                "here has 1000Gi allocatable (a memory limit is the request where none is set))",
                "Tesla-T4-SHARED": "no: 1 Insufficient memory (requests 2000Gi, a node here "
                "has 240Gi allocatable (a memory limit is the request where none is set))",
            },
            id="a memory request over every node's allocatable memory fits nowhere",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": 1}},
            True,
            {
                "NVIDIA-A100-SXM4-40GB": "fits",
                "Tesla-T4-SHARED": "no: 1 Insufficient memory (requests 600Gi, a node here has "
                "240Gi allocatable (a memory limit is the request where none is set))",
            },
            id="a memory limit the webhook injects is the request on nodes too small for it",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "100"}},
            False,
            {
                "NVIDIA-A100-SXM4-40GB": "fits",
                "Tesla-T4-SHARED": "no: 1 Insufficient cpu (requests 100, a node here has 62 "
                "allocatable)",
            },
            id="a cpu request over a node's allocatable cpu keeps the pod off that node",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": 16, "cpu": "100", "memory": "300Gi"}},
            False,
            {
                "NVIDIA-A100-SXM4-40GB": "no: 1 Insufficient nvidia.com/gpu (requests 16, a "
                "node here has 8)",
                "Tesla-T4-SHARED": "no: 1 Insufficient cpu (requests 100, a node here has 62 "
                "allocatable)",
            },
            id="of several shortages the first the scheduler checks is named: cpu, memory, then GPUs",
        ),
    ],
)
def test_a_class_fits_only_if_the_whole_request_vector_does(
    tmp_path: Path, resources: dict[str, object], memory_rule: bool, verdicts: dict[str, str]
) -> None:
    policy = _policy_with(tmp_path, "95-memory.yaml", _MEMORY_RULE) if memory_rule else POLICY

    explanation = explain(
        _pod(resources),
        policy=policy,
        inventory=InventoryView(_WHOLE_AND_SHARED),
        nodes=_WHOLE_AND_SHARED.nodes,
    )

    (template,) = explanation.templates
    assert {c.product: c.verdict for c in template.classes} == verdicts
    assert template.to_json()["requests"] == {
        k: v
        for k, v in resources["limits"].items()
        if "/" in k  # type: ignore[union-attr]
    }


def test_a_namespace_policy_is_named_as_the_object_that_decided_and_a_waiver_by_its_exception(
    tmp_path: Path,
) -> None:
    """Issue 44 (the exception is given no expiry: explain judges at the clock's time)."""
    policy = load_policy(str(team_policies(tmp_path)))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "labels": {"team": "a", "cost-center": "c"},
        },
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": 3}}}
            ]
        },
    }
    view = InventoryView(INVENTORY)

    denied = render_text(explain(pod, policy=policy, inventory=view, nodes=INVENTORY.nodes))
    pod["metadata"]["labels"]["app"] = "big-train"
    waived = render_text(explain(pod, policy=policy, inventory=view, nodes=INVENTORY.nodes))

    (verdict,) = [line for line in denied.splitlines() if line.startswith("Webhook on create")]
    assert "team-a/limits/maxGPUsPerPod" in verdict.partition("DENIED by ")[2]
    assert (
        "  waived team-a/limits/maxGPUsPerPod (deny) by GPUPolicyException team-a/big-train"
        in waived
    )
