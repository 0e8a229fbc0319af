"""What the server reads on a miss in its view (webhook.admission.lookups): only what a
review names and the view lacks, within one budget, and nothing for a static inventory."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests import builders
from webhook.admission.lookups import LOOKUP_BUDGET_SECONDS, looked_up, may_read, worth_a_read
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.references import Reference
from webhook.engine.evaluation.request import NO_INVENTORY, Request, Resource
from webhook.engine.policy.ruleset import Policy
from webhook.files.context import files_view
from webhook.files.rulefiles import load_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY = load_policy(str(ROOT / "rules"))
VIEW = files_view(str(ROOT / "tests" / "cases" / "_inventories" / "dra.yaml"), [])


def claim(name: str, device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    request = {"name": "r", "exactly": {"deviceClassName": device_class}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    }


def pod(*claims: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            "containers": [{"name": "m", "image": "x"}],
        },
    }


class Cluster:
    """An API server holding ``objects``; each read costs ``cost`` seconds of the clock."""

    def __init__(self, *objects: dict[str, Any], cost: float = 0.0) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.cost = cost
        self.now = 0.0
        self.reads: list[Reference] = []
        self.pods: list[Mapping[str, Any]] = []

    def clock(self) -> float:
        return self.now

    def read(self, ref: Reference, *, timeout: float) -> Mapping[str, Any] | None:
        assert timeout > 0
        self.reads.append(ref)
        self.now += self.cost
        return self.objects.get((ref.kind, ref.name))

    def pods_naming(
        self, namespace: str, claim: str, *, timeout: float
    ) -> tuple[list[Mapping[str, Any]], bool]:
        del namespace, timeout
        return [p for p in self.pods if claim in str(p)], True

    def workload(
        self, target: Resource, namespace: str, *, timeout: float
    ) -> tuple[Mapping[str, Any] | None, str]:
        del target, namespace, timeout
        return None, "not scripted"


def test_a_claim_and_then_its_class_are_read_and_added_to_the_view() -> None:
    cluster = Cluster(
        claim("late", "new.example.com"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "new.example.com"},
            "spec": {},
        },
    )

    found = looked_up(
        Request(pod("late")), VIEW, policy=POLICY, reader=cluster, clock=cluster.clock
    )

    assert [r.kind for r in cluster.reads] == ["ResourceClaim", "DeviceClass"]
    assert found is not None
    view = found[1]
    assert ("default", "late") in view.devices.claims  # type: ignore[union-attr]
    assert "new.example.com" in view.devices.classes  # type: ignore[union-attr]


def test_nothing_missing_reads_nothing_and_leaves_the_review_to_the_memo() -> None:
    cluster = Cluster()
    assert (
        looked_up(Request(pod()), VIEW, policy=POLICY, reader=cluster, clock=cluster.clock) is None
    )
    assert cluster.reads == []


def test_a_claim_the_api_server_lacks_leaves_the_view_as_it_was() -> None:
    cluster = Cluster()
    assert (
        looked_up(Request(pod("never")), VIEW, policy=POLICY, reader=cluster, clock=cluster.clock)
        is None
    )
    assert cluster.reads == [Reference("ResourceClaim", "default", "never")]


def test_reads_stop_when_the_budget_is_spent() -> None:
    cluster = Cluster(cost=LOOKUP_BUDGET_SECONDS / 2)
    looked_up(
        Request(pod("a", "b", "c", "d")), VIEW, policy=POLICY, reader=cluster, clock=cluster.clock
    )
    assert len(cluster.reads) == 2


def test_a_static_inventory_and_updates_read_nothing() -> None:
    cluster = Cluster(claim("late"))
    update = Request(pod("late"), operation="UPDATE", old_object=pod("late"))
    assert looked_up(update, VIEW, policy=POLICY, reader=cluster, clock=cluster.clock) is None
    assert (
        looked_up(
            Request(pod("late")), NO_INVENTORY, policy=POLICY, reader=cluster, clock=cluster.clock
        )
        is None
    )
    assert cluster.reads == []


def test_a_new_claim_gets_the_pods_naming_it_and_their_unseen_claims() -> None:
    cluster = Cluster(claim("other"))
    cluster.pods = [pod("new", "other")]

    found = looked_up(
        Request(claim("new")), VIEW, policy=POLICY, reader=cluster, clock=cluster.clock
    )

    assert found is not None
    request, view = found
    assert request.referencing_pods == tuple(cluster.pods)
    assert cluster.reads == [Reference("ResourceClaim", "default", "other")]
    assert ("default", "other") in view.devices.claims  # type: ignore[union-attr]


def _limited(tmp_path: Path) -> Policy:
    (tmp_path / "limit.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: four}\n"
        "spec:\n  validate:\n  - maxGPUsPerPod: 4\n"
    )
    return load_policy(str(tmp_path))


def _owned(obj: dict[str, Any]) -> dict[str, Any]:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}


@pytest.mark.parametrize(
    ("obj", "limited", "worth"),
    [
        pytest.param(pod("late"), False, True, id="a pod whose claim the view misses"),
        pytest.param(pod(), False, False, id="must not fire: a pod without claims"),
        pytest.param(claim("new"), True, True, id="a claim where a pod-total limit applies"),
        pytest.param(claim("new"), False, False, id="must not fire: no pod-total limit"),
        pytest.param(
            _owned(claim("new")), True, False, id="must not fire: made from its pod's template"
        ),
    ],
)
def test_a_review_reads_the_api_server_only_on_a_miss_or_for_a_new_claim(
    tmp_path: Path, obj: dict[str, Any], limited: bool, worth: bool
) -> None:
    policy = _limited(tmp_path) if limited else POLICY
    request = Request(obj)
    decision = evaluate(request, policy=policy, inventory=VIEW)

    assert worth_a_read(request, decision, policy=policy) is worth


@pytest.mark.parametrize(
    ("body", "reads"),
    [
        pytest.param(json.dumps(builders.review(builders.pod())).encode(), False, id="a-plain-pod"),
        pytest.param(
            b'{"metadata":{"annotations":{"last-applied":"{\\"kind\\":\\"Pod\\"}"}}}',
            False,
            id="kubectl-s-escaped-last-applied-annotation",
        ),
        pytest.param(
            b'{"spec":{"resourceClaims":[{"name":"gpu"}]}}', True, id="a-pod-naming-claims"
        ),
        pytest.param(b'{"kind":"ResourceClaim"}', True, id="a-claim"),
        pytest.param(b'{"kind":"ResourceClaimTemplate"}', True, id="a-claim-template"),
        pytest.param(b'{"request":{"subResource":"scale"}}', True, id="a-scale"),
        pytest.param(
            b'{"spec":{"r\\u0065sourceClaims":[{"name":"gpu"}]}}',
            True,
            id="a-name-spelled-by-escapes",
        ),
    ],
)
def test_a_review_that_may_read_the_api_server_is_told_from_its_body_unparsed(
    body: bytes, reads: bool
) -> None:
    assert may_read(body) is reads
