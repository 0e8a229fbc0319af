"""Gangs whose GPUs come from DRA claims: the count of pods that can run at once, counted from
the nodes' devices, against a brute-force placement.

The reference tries every assignment of the gang's pods to the nodes (each pod on one node,
its claims taking that many devices of the node's own, never more than the node has) and
says whether one places them all. For pods of one template the engine must agree exactly
(a denial exactly when no assignment exists); for two templates a denial must never be
wrong and a silence must be true.
"""

from __future__ import annotations

from itertools import product
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.ruleset import compile_policy
from webhook.engine.resources.devices import (
    Claim,
    ClaimSpec,
    DeviceInventory,
    DeviceRequest,
    SubRequest,
)
from webhook.engine.resources.inventory import Inventory, Node
from webhook.engine.scheduling.dra import PodClaim, PodClaims
from webhook.engine.scheduling.gangdevices import pod_devices
from webhook.files.shipped import cuda_table

NAMESPACE = "team-b"
CLASS = "gpu.nvidia.com"
POLICY = compile_policy([], cuda_table=cuda_table())


def _objects(devices: list[int], needs: list[int]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{CLASS}'"}}]},
        }
    ]
    for index, count in enumerate(devices):
        name = f"n{index}"
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": CLASS,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{i}"} for i in range(count)],
                },
            }
        )
    for need in set(needs):
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"gpus-{need}", "namespace": NAMESPACE},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "g", "exactly": {"deviceClassName": CLASS, "count": need}}
                            ]
                        }
                    }
                },
            }
        )
    return objects


def _view(devices: list[int], needs: list[int]) -> InventoryView:
    nodes = [
        Node(name=f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"}, allocatable={"cpu": 64000})
        for i in range(len(devices))
    ]
    return InventoryView(
        Inventory(nodes), devices=DeviceInventory.of(_objects(devices, needs), complete=True)
    )


def _replica(replicas: int, need: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "template": {
            "spec": {
                "containers": [
                    {"name": "main", "image": "x", "resources": {"claims": [{"name": "g"}]}}
                ],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": f"gpus-{need}"}],
            }
        },
    }


def _job(groups: list[tuple[int, int]]) -> dict[str, Any]:
    names = ("Worker", "Master")
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": NAMESPACE},
        "spec": {
            "pytorchReplicaSpecs": {
                names[i]: _replica(count, need) for i, (count, need) in enumerate(groups)
            }
        },
    }


def _fits_by_search(devices: list[int], pods: list[int]) -> bool:
    for assignment in product(range(len(devices)), repeat=len(pods)):
        used = [0] * len(devices)
        for need, node in zip(pods, assignment, strict=True):
            used[node] += need
        if all(u <= d for u, d in zip(used, devices, strict=True)):
            return True
    return False


def _gang_findings(devices: list[int], groups: list[tuple[int, int]]) -> list[str]:
    view = _view(devices, [need for _, need in groups])
    decision = evaluate(Request(_job(groups)), policy=POLICY, inventory=view)
    return [f.action for f in decision.findings if f.check == "gangFit"]


NODES = st.lists(st.integers(0, 8), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(devices=NODES, pods=st.integers(1, 5), need=st.integers(1, 4))
def test_identical_pods_are_denied_exactly_when_no_placement_exists(
    devices: list[int], pods: int, need: int
) -> None:
    if max(devices) < need:
        return  # a pod that fits no node: the DRA claim check says so, not the gang
    found = _gang_findings(devices, [(pods, need)])
    fits = _fits_by_search(devices, [need] * pods)
    assert found == ([] if fits else ["deny"])


@settings(max_examples=60, deadline=None)
@given(
    devices=NODES,
    first=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    second=st.tuples(st.integers(1, 2), st.integers(1, 4)),
)
def test_two_templates_are_denied_only_when_no_placement_exists_and_silent_only_when_one_does(
    devices: list[int], first: tuple[int, int], second: tuple[int, int]
) -> None:
    if max(devices) < max(first[1], second[1]):
        return
    found = _gang_findings(devices, [first, second])
    pods = [first[1]] * first[0] + [second[1]] * second[0]
    fits = _fits_by_search(devices, pods)
    if "deny" in found:
        assert not fits
    if not found:
        assert fits


def _pod_claims(*entries: tuple[str, int]) -> PodClaims:
    spec = ClaimSpec((DeviceRequest("g", (SubRequest(name="g", device_class=CLASS, count=1),)),))
    return PodClaims(
        tuple(
            PodClaim("c", source, Claim(NAMESPACE, "c", spec), gpus, frozenset({"g"}), (CLASS,))
            for source, gpus in entries
        )
    )


@pytest.mark.parametrize(
    ("entries", "counted"),
    [
        pytest.param((("ResourceClaimTemplate t", 1),), True, id="own-claims-are-counted"),
        pytest.param((("ResourceClaim shared", 1),), False, id="shared-gpus-are-not-per-pod"),
        pytest.param(
            (("ResourceClaimTemplate t", 1), ("ResourceClaim nic", 0)),
            True,
            id="a-shared-claim-of-other-devices-is-left-out",
        ),
    ],
)
def test_only_claims_each_pod_gets_for_itself_are_counted(
    entries: tuple[tuple[str, int], ...], counted: bool
) -> None:
    inventory = DeviceInventory.of(_objects([8], [1]), complete=True)
    found = pod_devices(_pod_claims(*entries), inventory)
    assert (found is not None) is counted
    if found is not None:
        assert len(found.claims) == 1


def test_an_incomplete_device_inventory_counts_nothing() -> None:
    inventory = DeviceInventory.of(_objects([8], [1]), complete=False)
    assert pod_devices(_pod_claims(("ResourceClaimTemplate t", 1)), inventory) is None
