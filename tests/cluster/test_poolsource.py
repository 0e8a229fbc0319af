"""Autoscaler objects of a live cluster, replayed: discovery, list, watch, a 403 and the
cluster-autoscaler status, through the in-process source and through the watcher's feed."""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.feeding import fed_worker, running_watcher
from tests.cluster.replayserver import Body, ReplayServer, Stream, eventually, fixture, status_body
from webhook.cluster.apiclient import ApiEndpoint
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources.inventorysource import LiveInventorySource
from webhook.cluster.sources.poolsource import CA_STATUS_PATH, KINDS, PoolCache, trim
from webhook.engine.resources.nodepools import PoolInventory
from webhook.files.poolobjects import pool_inventory

NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"


def nodepool(name: str, family: str, rv: str) -> dict[str, Any]:
    """A NodePool as the API server lists it (no kind on items), in the shape of Karpenter's
    docs (aws/karpenter-provider-aws website/content/en/docs/concepts/nodepools.md)."""
    return {
        "metadata": {"name": name, "resourceVersion": rv, "uid": f"uid-{name}"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {
                            "key": "karpenter.k8s.aws/instance-family",
                            "operator": "In",
                            "values": [family],
                        }
                    ],
                }
            },
            "limits": {"nvidia.com/gpu": 64},
        },
    }


def discovery(group_version: str, resource: str) -> Body:
    return Body(
        json.dumps(
            {
                "kind": "APIResourceList",
                "groupVersion": group_version,
                "resources": [{"name": resource, "namespaced": False, "kind": "NodePool"}],
            }
        ).encode()
    )


def listing(items: list[dict[str, Any]], rv: str) -> Body:
    body = {
        "kind": "NodePoolList",
        "apiVersion": "karpenter.sh/v1",
        "metadata": {"resourceVersion": rv},
        "items": items,
    }
    return Body(json.dumps(body).encode())


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return (
        json.dumps(
            {"type": kind, "object": {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", **obj}}
        ).encode()
        + b"\n"
    )


def serve_karpenter(server: ReplayServer, *, gate: threading.Event) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    server.routes["/apis/karpenter.sh/v1"] = deque([discovery("karpenter.sh/v1", "nodepools")])
    server.collection_lists[NODEPOOLS] = deque([listing([nodepool("h100", "p5", "10")], "10")])
    server.collection_watches[NODEPOOLS] = deque(
        [
            Stream(
                [
                    gate,
                    event("ADDED", nodepool("l40s", "g6e", "11")),
                    event("DELETED", nodepool("h100", "p5", "12")),
                ],
                end="hold",
            )
        ]
    )


def live(server: ReplayServer) -> LiveInventorySource:
    return LiveInventorySource(
        api=ApiEndpoint(host=server.url),
        backoff=lambda: Backoff(initial_seconds=0.01, cap_seconds=0.05),
        publish_interval_seconds=0.01,
        watch_timeout_seconds=lambda: 30,
    )


def status_configmap(status: str) -> dict[str, Any]:
    """cluster-autoscaler's status ConfigMap (kube-system/cluster-autoscaler-status)."""
    return {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"},
        "data": {"status": status},
    }


def ready_pools(source: LiveInventorySource) -> PoolInventory:
    """The pools a started source holds once it is ready."""
    source.start()
    eventually(source.ready, timeout=10)
    pools = source.pools()
    assert pools is not None
    return pools


def pool_names(source: LiveInventorySource) -> list[str]:
    pools = source.pools()
    return [] if pools is None else sorted(p.name for p in pools.pools)


def test_nodepools_are_listed_then_watched_and_readiness_waits_for_them() -> None:
    server = ReplayServer().start()
    gate = threading.Event()
    serve_karpenter(server, gate=gate)
    source = live(server)
    try:
        source.start()
        eventually(source.ready, timeout=10)
        assert pool_names(source) == ["h100"]
        gate.set()
        eventually(lambda: pool_names(source) == ["l40s"], timeout=10)
    finally:
        source.stop()
        server.stop()
    asked = {r.path for r in server.requests}
    assert {f"/apis/{k.group_version}" for k in KINDS} <= asked
    assert CA_STATUS_PATH in asked
    lists = [r for r in server.collection_requests(NODEPOOLS) if not r.query.get("watch")]
    watches = [r for r in server.collection_requests(NODEPOOLS) if r.query.get("watch")]
    assert [r.query.get("limit") for r in lists] == ["1", "500"]  # the 403 probe, then the list
    assert watches[0].query["resourceVersion"] == "10"


def test_nodepools_the_webhook_may_not_list_are_a_pool_of_unknown_size() -> None:
    server = ReplayServer().start()
    serve_karpenter(server, gate=threading.Event())
    server.collection_lists[NODEPOOLS] = deque(
        [Body(status_body(403, "Forbidden", "nodepools.karpenter.sh is forbidden"), 403)]
    )
    source = live(server)
    try:
        pools = ready_pools(source)
        (blind,) = pools.autoscalers
        assert blind.kind == "Karpenter"
        assert "may not list them (403)" in blind.reason
    finally:
        source.stop()
        server.stop()


@pytest.mark.parametrize("status", [200, 404])
def test_the_cluster_autoscaler_status_is_read_by_name(status: int) -> None:
    server = ReplayServer().start()
    server.lists.append(Body(fixture("node-list.json")))
    configmap = status_configmap(
        "nodeGroups:\n- name: gpu\n  health:\n    nodeCounts:\n      registered: {total: 0}\n    maxSize: 2\n"
    )
    answer = (
        Body(json.dumps(configmap).encode())
        if status == 200
        else Body(status_body(404, "NotFound", "x"), 404)
    )
    server.routes[CA_STATUS_PATH] = deque([answer])
    source = live(server)
    try:
        pools = ready_pools(source)
        assert [a.name for a in pools.autoscalers] == (["gpu"] if status == 200 else [])
    finally:
        source.stop()
        server.stop()


# What cluster-autoscaler before 1.30 writes (clusterstate/utils/status.go
# WriteStatusConfigMap): its header, then GetReadableString's report or a message.
TEXT_HEADER = "Cluster-autoscaler status at 2023-06-01 12:00:00.123456789 +0000 UTC:\n"
TEXT_REPORT = (
    "Cluster-wide:\n  Health:      Healthy (ready=1 registered=1)\n\nNodeGroups:\n"
    "  Name:        gpu-pool\n  Health:      Healthy (ready=0 unready=0 (resourceUnready=0) "
    "notStarted=0 longNotStarted=0 registered=0 longUnregistered=0 cloudProviderTarget=0 "
    "(minSize=0, maxSize=3))\n"
)


@pytest.mark.parametrize(
    ("text", "autoscalers"),
    [
        pytest.param(TEXT_REPORT, ["gpu-pool"], id="a node group at size 0"),
        pytest.param("Initializing", ["cluster-autoscaler"], id="starting: groups unknown"),
    ],
)
def test_the_text_status_of_an_older_autoscaler_is_read_from_the_api_server(
    text: str, autoscalers: list[str]
) -> None:
    server = ReplayServer().start()
    server.lists.append(Body(fixture("node-list.json")))
    configmap = status_configmap(TEXT_HEADER + text)
    server.routes[CA_STATUS_PATH] = deque([Body(json.dumps(configmap).encode())])
    source = live(server)
    try:
        pools = ready_pools(source)
        assert [a.name for a in pools.autoscalers] == autoscalers
    finally:
        source.stop()
        server.stop()


def test_a_worker_sees_the_nodepools_the_watcher_lists_and_watches(tmp_path: Path) -> None:
    """The production path: the pod's watcher process reads the pools, workers follow it."""
    server = ReplayServer().start()
    gate = threading.Event()
    serve_karpenter(server, gate=gate)
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    try:
        with running_watcher(server, tmp_path) as watcher, fed_worker(watcher) as worker:
            eventually(worker.ready, timeout=30)
            pools = worker.pools()
            assert pools is not None
            assert [p.name for p in pools.pools] == ["h100"]
            gate.set()
            eventually(
                lambda: [p.name for p in (worker.pools() or PoolInventory()).pools] == ["l40s"],
                timeout=30,
            )
    finally:
        server.stop()


def test_a_status_rewrite_that_changes_only_its_timestamp_is_no_change() -> None:
    changes: list[object] = []
    cache = PoolCache(on_change=changes.append)

    def status(time: str, total: int) -> dict[str, Any]:
        text = f"time: {time}\nnodeGroups:\n- name: gpu\n  health:\n    nodeCounts:\n      registered: {{total: {total}}}\n    maxSize: 2\n"
        return {"data": {"status": text}}

    cache.set_status(status("12:00:00", 0))
    cache.set_status(status("12:00:10", 0))
    assert len(changes) == 1
    cache.set_status(status("12:00:20", 1))
    assert len(changes) == 2


def test_what_is_kept_of_each_object_is_what_the_engine_reads() -> None:
    kinds = {kind.kind: kind for kind in KINDS}
    pool = trim(
        kinds["NodePool"],
        {
            "metadata": {"name": "gpu", "uid": "u", "managedFields": [{}]},
            "spec": {"limits": {"nvidia.com/gpu": "16"}},
            "status": {"resources": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready"}]},
        },
    )
    assert pool == {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {"limits": {"nvidia.com/gpu": "16"}},
        "status": {"resources": {"nvidia.com/gpu": "8"}},
    }
    node_class = trim(
        kinds["EC2NodeClass"],
        {
            "metadata": {"name": "reserved"},
            "spec": {"role": "KarpenterNodeRole"},
            "status": {
                "capacityReservations": [
                    {"id": "cr-1", "instanceType": "p5.48xlarge", "ownerID": "1"},
                    {"id": "cr-2", "instanceType": "p5.4xlarge", "state": "expiring"},
                ]
            },
        },
    )
    found = pool_inventory([pool, node_class])
    assert found.pools[0].usage == {"nvidia.com/gpu": 8}
    assert found.reservations == {
        ("karpenter.k8s.aws", "EC2NodeClass", "reserved"): frozenset({"p5.48xlarge"})
    }
    unread = trim(kinds["EC2NodeClass"], {"metadata": {"name": "other"}})
    assert pool_inventory([unread]).reservations == {}


COMPUTECLASSES = "/apis/cloud.google.com/v1/computeclasses"


def compute_class(name: str, machine: str, rv: str) -> dict[str, Any]:
    """A ComputeClass as the API server lists it, shaped as GKE's CRD reference
    (cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass)."""
    return {
        "metadata": {"name": name, "resourceVersion": rv, "uid": f"uid-{name}"},
        "spec": {
            "whenUnsatisfiable": "DoNotScaleUp",
            "nodePoolAutoCreation": {"enabled": True},
            "priorities": [{"machineType": machine}],
        },
    }


def test_compute_classes_are_listed_then_watched_and_sized() -> None:
    server = ReplayServer().start()
    gate = threading.Event()
    server.lists.append(Body(fixture("node-list.json")))
    server.routes["/apis/cloud.google.com/v1"] = deque(
        [discovery("cloud.google.com/v1", "computeclasses")]
    )
    server.collection_lists[COMPUTECLASSES] = deque(
        [listing([compute_class("h100", "a3-highgpu-8g", "20")], "20")]
    )
    added = {
        "type": "ADDED",
        "object": {
            "apiVersion": "cloud.google.com/v1",
            "kind": "ComputeClass",
            **compute_class("l4", "g2-standard-96", "21"),
        },
    }
    server.collection_watches[COMPUTECLASSES] = deque(
        [Stream([gate, json.dumps(added).encode() + b"\n"], end="hold")]
    )
    source = live(server)

    def classes() -> list[tuple[str, str]]:
        pools = source.pools()
        return sorted(
            (c.name, c.priorities[0].machine_type) for c in (pools.compute_classes if pools else ())
        )

    try:
        source.start()
        eventually(source.ready, timeout=10)
        assert classes() == [("h100", "a3-highgpu-8g")]
        gate.set()
        eventually(lambda: len(classes()) == 2, timeout=10)
    finally:
        source.stop()
        server.stop()
    assert classes() == [("h100", "a3-highgpu-8g"), ("l4", "g2-standard-96")]
