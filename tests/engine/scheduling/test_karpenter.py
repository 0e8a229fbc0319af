"""Karpenter's compatibility rules, as ported from kubernetes-sigs/karpenter
pkg/scheduling/requirement(s).go, and pools sized through the catalogue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engine.resources.instancetypes import Allowance
from webhook.engine.resources.inventory import Placement
from webhook.engine.resources.nodepools import karpenter_pool_from_json
from webhook.engine.scheduling.karpenter import (
    Requirement,
    compatible,
    describe_pool,
    from_labels,
    intersects,
    pool_nodes,
    resolve_pool,
)
from webhook.files.shipped import shipped_catalogue

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "karpenter"
R = Requirement.of


@pytest.mark.parametrize(
    ("a", "b", "meet"),
    [
        pytest.param(R("k", "In", ["a", "b"]), R("k", "In", ["b"]), True, id="in-in-overlap"),
        pytest.param(R("k", "In", ["a"]), R("k", "In", ["b"]), False, id="in-in-disjoint"),
        pytest.param(R("k", "In", ["a"]), R("k", "NotIn", ["a"]), False, id="in-notin-same"),
        pytest.param(R("k", "In", ["a", "b"]), R("k", "NotIn", ["a"]), True, id="in-notin-other"),
        pytest.param(R("k", "Exists"), R("k", "DoesNotExist"), False, id="exists-doesnotexist"),
        pytest.param(R("k", "Exists"), R("k", "NotIn", ["a"]), True, id="exists-notin"),
        pytest.param(R("k", "Gt", ["2"]), R("k", "In", ["3"]), True, id="gt-in-above"),
        pytest.param(R("k", "Gt", ["2"]), R("k", "In", ["2"]), False, id="gt-is-strict"),
        pytest.param(R("k", "Gt", ["2"]), R("k", "Lt", ["4"]), True, id="gt-lt-room"),
        pytest.param(R("k", "Gt", ["2"]), R("k", "Lt", ["3"]), False, id="gt-lt-no-room"),
        pytest.param(R("k", "Gt", ["2"]), R("k", "In", ["x"]), False, id="gt-non-integer"),
    ],
)
def test_two_requirements_meet_as_karpenters_has_intersection(
    a: Requirement, b: Requirement, meet: bool
) -> None:
    assert a.meets(b) is meet
    assert b.meets(a) is meet


def test_two_negative_requirements_always_intersect() -> None:
    assert intersects({"k": R("k", "DoesNotExist")}, {"k": R("k", "NotIn", ["a"])}) is None


def known(key: str) -> bool:
    return key.startswith("karpenter.k8s.aws/")


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        pytest.param(
            {"team": R("team", "In", ["ml"])}, "the pool sets no label team", id="custom-undefined"
        ),
        pytest.param({"team": R("team", "NotIn", ["ml"])}, None, id="custom-notin-allowed"),
        pytest.param({"team": R("team", "DoesNotExist")}, None, id="custom-doesnotexist-allowed"),
        pytest.param(
            {
                "karpenter.k8s.aws/instance-gpu-name": R(
                    "karpenter.k8s.aws/instance-gpu-name", "In", ["h100"]
                )
            },
            None,
            id="well-known-undefined-allowed",
        ),
        pytest.param(
            {"zone": R("zone", "Exists")}, "the pool sets no label zone", id="exists-undefined"
        ),
    ],
)
def test_a_pod_key_the_pool_does_not_define_is_refused_unless_well_known_or_negative(
    pod: dict[str, Requirement], why: str | None
) -> None:
    assert compatible(from_labels({"pool": "gpu"}), pod, well_known=known) == why


def _pool(raw: dict[str, Any]) -> Any:
    return resolve_pool(
        karpenter_pool_from_json(raw), catalogue=shipped_catalogue(), allowance=Allowance()
    )


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def test_karpenters_general_purpose_example_pool_offers_no_gpu() -> None:
    pool = next(d for d in _docs("aws-general-purpose.yaml") if d["kind"] == "NodePool")
    resolved = _pool(pool)
    assert resolved.unbounded == ""
    assert resolved.types == ()


def test_the_azure_providers_general_purpose_example_pool_offers_no_gpu() -> None:
    pool = next(d for d in _docs("azure-general-purpose.yaml") if d["kind"] == "NodePool")
    resolved = _pool(pool)
    assert resolved.unbounded == ""
    assert resolved.types == ()


def test_karpenters_docs_gpu_pool_is_never_guessed() -> None:
    """The docs' example names no nodeClassRef and p3 types the catalogue lacks."""
    resolved = _pool(_docs("aws-docs-gpu-nodepool.yaml")[0])
    assert "nodeClassRef" in resolved.unbounded
    with_class = _docs("aws-docs-gpu-nodepool.yaml")[0]
    with_class["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": "default",
    }
    assert (
        _pool(with_class).unbounded
        == "its instance type p3.16xlarge, p3.8xlarge is not in the catalogue"
    )


def p5_pool(**limits: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "h100"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "d",
                    },
                    "requirements": [
                        {
                            "key": "karpenter.k8s.aws/instance-family",
                            "operator": "In",
                            "values": ["p5"],
                        }
                    ],
                }
            },
            **({"limits": limits} if limits else {}),
        },
    }


def test_a_pool_is_described_with_its_largest_type_and_gpu_limit() -> None:
    assert describe_pool(_pool(p5_pool(**{"nvidia.com/gpu": 64}))) == (
        "pool h100 (Karpenter on AWS, p5.48xlarge: 8 x NVIDIA H100 80GB, p5.4xlarge: 1 x NVIDIA "
        "H100 80GB, scales from 0, limit 64 GPUs)"
    )


def test_limits_count_nodes_by_capacity_and_exclude_types_larger_than_the_limit() -> None:
    resolved = _pool(p5_pool(**{"nvidia.com/gpu": 4, "cpu": "1000"}))
    assert [(t.instance.name, t.nodes) for t in resolved.types] == [("p5.4xlarge", 4)]
    assert resolved.excluded == (
        ("p5.48xlarge", "one node has 8 nvidia.com/gpu, more than the pool's limit 4"),
    )


def test_a_pool_takes_a_pod_by_karpenters_rules_not_by_labels() -> None:
    resolved = _pool(p5_pool())
    spot = Placement.of({"nodeSelector": {"karpenter.sh/capacity-type": "spot"}})
    custom = Placement.of({"nodeSelector": {"team": "ml"}})
    assert resolved.admits(spot)
    assert not resolved.admits(custom)


@pytest.mark.parametrize(
    ("key", "counted"),
    [
        pytest.param("node.kubernetes.io/instance-type", True, id="instance-type"),
        pytest.param("karpenter.k8s.aws/instance-family", True, id="family"),
        pytest.param("topology.kubernetes.io/zone", False, id="zone-an-offering"),
        pytest.param("karpenter.sh/capacity-type", False, id="capacity-type-an-offering"),
    ],
)
def test_min_values_are_judged_only_on_keys_the_catalogue_models(key: str, counted: bool) -> None:
    raw = p5_pool()
    raw["spec"]["template"]["spec"]["requirements"].append(
        {"key": key, "operator": "Exists", "minValues": 2}
    )
    pool = karpenter_pool_from_json(raw)
    assert pool.requirements[-1].min_values == 2
    nodes = pool_nodes(_pool(raw), pool)
    assert {n.min_values for n in nodes} == ({((key, 2),)} if counted else {()})
    relaxed = pool_nodes(_pool(raw), pool, min_values=False)
    assert {n.min_values for n in relaxed} == {()}


def test_a_static_pool_counts_its_replicas_and_says_it_creates_none_for_pods() -> None:
    raw = p5_pool()
    raw["spec"]["replicas"] = 2
    resolved = _pool(raw)
    assert [(t.instance.name, t.nodes) for t in resolved.types] == [
        ("p5.48xlarge", 2),
        ("p5.4xlarge", 2),
    ]
    assert "static: 2 nodes, none created for pending pods, no GPU limit)" in describe_pool(
        resolved
    )
    raw["spec"]["replicas"] = 0
    assert not _pool(raw).types
