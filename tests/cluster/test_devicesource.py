"""DRA objects listed and watched like nodes, from a loopback server.

The lists are the DRA objects of ``tests/cases/_inventories/dra.yaml`` (shaped after
NVIDIA's DRA driver and the resource.k8s.io/v1 types) served as the API server serves
list items: without ``kind`` and ``apiVersion``. Tests assert on what the engine reads
(``devices()``, ``ready()``), in process and through the pod's watcher to a worker.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.cluster.feeding import fed_worker, live_source, running_watcher
from tests.cluster.replayserver import Body, ReplayServer, Stream, eventually
from webhook.admission.inventory import InventorySource
from webhook.cluster.sources import feedwire
from webhook.cluster.sources.devicesource import PATHS, TAINT_RULE_VERSIONS, DeviceCache, trim
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Node

DRA_FILE = Path(__file__).resolve().parents[1] / "cases" / "_inventories" / "dra.yaml"
RESOURCES = {kind: path.rsplit("/", 1)[1] for kind, path in PATHS.items()}
NODE_LIST = json.dumps(
    {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": []}
).encode()
NAMESPACE_LIST = NODE_LIST.replace(b"NodeList", b"NamespaceList")


def dra_objects(kind: str) -> list[dict[str, Any]]:
    items = yaml.safe_load(DRA_FILE.read_text())["items"]
    return [
        {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}
        for item in items
        if item["kind"] == kind
    ]


def list_body(kind: str, resource_version: str = "100") -> bytes:
    return json.dumps(
        {
            "kind": f"{kind}List",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "items": dra_objects(kind),
        }
    ).encode()


def event(kind: str, obj: dict[str, Any], event_type: str, resource_version: str) -> bytes:
    body = {"kind": kind, "apiVersion": "resource.k8s.io/v1", **obj}
    body["metadata"] = {**obj["metadata"], "resourceVersion": resource_version}
    return json.dumps({"type": event_type, "object": body}).encode() + b"\n"


B200_SLICE = {
    "metadata": {"name": "dra-b200-0-gpu.nvidia.com-9xq2w"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "dra-b200-0",
        "pool": {"name": "dra-b200-0", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "productName": {"string": "NVIDIA B200"},
                    "architecture": {"string": "Blackwell"},
                },
                "capacity": {"memory": {"value": "180Gi"}},
            }
            for i in range(2)
        ],
    },
}


CLAIM = {
    "metadata": {"name": "trainer-gpu", "namespace": "default"},
    "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": "dra-a100-0",
                        "device": "gpu-0",
                    }
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["dra-a100-0"]}
                        ]
                    }
                ]
            },
        }
    },
}


def script(replay: ReplayServer, *, gate: threading.Event | None = None) -> None:
    """A DRA cluster: every kind listed; a slice added and a template deleted by watch."""
    replay.dra_served = True
    replay.lists.append(Body(NODE_LIST))
    replay.namespace_lists.append(Body(NAMESPACE_LIST))
    for kind, resource in RESOURCES.items():
        held = gate if kind == "ResourceClaimTemplate" else None
        replay.dra_lists[resource] = deque([Body(list_body(kind), gate=held)])
    one_gpu = next(
        t for t in dra_objects("ResourceClaimTemplate") if t["metadata"]["name"] == "one-gpu"
    )
    replay.dra_watches["resourceslices"] = deque(
        [Stream([event("ResourceSlice", B200_SLICE, "ADDED", "101")], end="hold")]
    )
    replay.dra_watches["resourceclaims"] = deque(
        [Stream([event("ResourceClaim", CLAIM, "ADDED", "103")], end="hold")]
    )
    replay.dra_watches["resourceclaimtemplates"] = deque(
        [Stream([event("ResourceClaimTemplate", one_gpu, "DELETED", "102")], end="hold")]
    )


def seen(source: InventorySource) -> tuple[Any, ...] | None:
    devices = source.devices()
    if devices is None:
        return None
    allocated = [c.allocation_terms is not None for c in devices.claims.values()]
    assert all(allocated), "an allocated claim keeps the nodes its allocation names"
    return (
        sorted(devices.classes),
        sorted(devices.templates),
        sorted(devices.claims),
        {n: len(devices.devices_for(Node(name=n))) for n in devices.node_names()},
    )


def expected_after_watch() -> tuple[Any, ...]:
    templates = sorted(
        ("default", t["metadata"]["name"])
        for t in dra_objects("ResourceClaimTemplate")
        if t["metadata"]["name"] != "one-gpu"
    )
    return (
        ["gpu.nvidia.com", "mig.nvidia.com"],
        templates,
        [("default", "trainer-gpu")],
        {
            "dra-a100-0": 4,
            "dra-a100-1": 4,
            "dra-b200-0": 2,
            "dra-h100-0": 8,
            "dra-dynmig-0": 9,
            "dra-l40s-cordoned": 16,
            "dra-mig-0": 4,
        },
    )


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    yield replay
    replay.stop()


def test_dra_objects_are_listed_then_watched_and_readiness_waits_for_them(
    server: ReplayServer,
) -> None:
    gate = threading.Event()
    script(server, gate=gate)
    live = live_source(server)
    live.start()
    try:
        eventually(lambda: live.snapshot() is not None, timeout=10)
        # Discovery answered and the templates' list is on its way (held by the gate).
        eventually(
            lambda: any(r.path == PATHS["ResourceClaimTemplate"] for r in server.dra_requests()),
            timeout=10,
        )
        assert not live.ready(), "ready before the DRA lists arrived"
        assert live.devices() is None
        gate.set()
        eventually(live.ready, timeout=10)
        with contextlib.suppress(AssertionError):
            eventually(lambda: seen(live) == expected_after_watch(), timeout=10)
        assert seen(live) == expected_after_watch()
        snapshot = live.devices()
        assert isinstance(snapshot, DeviceInventory)
        assert live.devices() is snapshot, "a new snapshot without a change"
    finally:
        live.stop()
    lists = [r.path for r in server.dra_requests() if not r.query.get("watch")]
    # Discovery of resource.k8s.io/v1, then of the versions that may serve DeviceTaintRules.
    discovery = ["/apis/resource.k8s.io/v1", *TAINT_RULE_VERSIONS]
    assert sorted(lists) == sorted([*discovery, *PATHS.values()])


def test_a_cluster_without_dra_costs_one_discovery_request(server: ReplayServer) -> None:
    server.lists.append(Body(NODE_LIST))
    live = live_source(server)
    live.start()
    try:
        eventually(live.ready, timeout=10)
        eventually(server.dra_requests, timeout=10)
        assert live.devices() is None
    finally:
        live.stop()
    assert [r.path for r in server.dra_requests()] == ["/apis/resource.k8s.io/v1"]


def test_a_worker_sees_the_dra_objects_the_watcher_lists_and_watches(tmp_path: Path) -> None:
    replay = ReplayServer().start()
    script(replay)
    try:
        with running_watcher(replay, tmp_path) as watcher, fed_worker(watcher) as worker:
            with contextlib.suppress(AssertionError):
                eventually(lambda: seen(worker) == expected_after_watch(), timeout=30)
            assert seen(worker) == expected_after_watch()
            # Readiness also waits for the autoscaler objects' discovery (issue 23).
            eventually(worker.ready, timeout=10)
    finally:
        replay.stop()


def test_device_taint_rules_are_listed_where_served_and_taint_the_devices(
    server: ReplayServer,
) -> None:
    script(server)
    rule = {
        "metadata": {"name": "dra-a100-0-gpu-1-xid-79"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "dra-a100-0", "device": "gpu-1"},
            "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},
        },
    }
    discovery = {"kind": "APIResourceList", "resources": [{"name": "devicetaintrules"}]}
    rules = {"kind": "DeviceTaintRuleList", "metadata": {"resourceVersion": "9"}, "items": [rule]}
    server.routes["/apis/resource.k8s.io/v1beta2"] = deque([Body(json.dumps(discovery).encode())])
    path = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
    server.routes[path] = deque([Body(json.dumps(rules).encode())])
    live = live_source(server)
    live.start()

    def taints() -> list[tuple[str, tuple[Any, ...]]] | None:
        devices = live.devices()
        if devices is None:
            return None
        node = [d for d in devices.devices_for(Node(name="dra-a100-0")) if d.taints]
        return [(d.name, d.taints) for d in node] or None

    try:
        eventually(lambda: taints() is not None, timeout=10)
        assert taints() == [("gpu-1", (("gpu.nvidia.com/xid", "79", "NoSchedule"),))]
    finally:
        live.stop()
    assert any(r.path == path for r in server.requests)


def test_the_watchers_cache_keeps_objects_as_the_json_it_sends_and_workers_read_them_back():
    """Issue 35: the watcher held every trimmed object as dicts (about 3 KB a device)."""
    raw = {
        "metadata": {"name": "n-gpu", "resourceVersion": "7", "managedFields": [{}]},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n", "devices": [{"name": "gpu-0"}]},
    }
    cache = DeviceCache(parse=False)
    cache.replace("ResourceSlice", [trim("ResourceSlice", raw)], "7")

    (kept,) = cache.objects("ResourceSlice")
    assert isinstance(kept, orjson.Fragment)
    (line,) = feedwire.encode(
        *feedwire.dra_list("ResourceSlice", cache.objects("ResourceSlice"), resource_version="7")
    ).splitlines()
    assert feedwire.decode(line)["objects"] == [trim("ResourceSlice", raw)]
