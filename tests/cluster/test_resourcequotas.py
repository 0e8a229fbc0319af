"""ResourceQuotas in the live inventory: listed and watched beside the nodes, in one process
and through the pod's watcher, so that gpuQuota sees hard limits and what is used now."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.feeding import fed_worker, live_source, running_watcher
from tests.cluster.replayserver import (
    RESOURCE_QUOTAS,
    Body,
    ReplayServer,
    Stream,
    eventually,
    fixture,
    status_body,
)
from webhook.admission.inventory import view_of
from webhook.engine.resources.quotas import Quotas

STARTUP_SECONDS = 30.0
KEY = "requests.nvidia.com/gpu"


def quota(used: str, resource_version: str) -> dict[str, object]:
    """A ResourceQuota as the API server sends it."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "gpu-quota",
            "namespace": "ml",
            "resourceVersion": resource_version,
            "uid": "uid-q",
        },
        "spec": {"hard": {KEY: "4", "requests.cpu": "10"}},
        "status": {"hard": {KEY: "4", "requests.cpu": "10"}, "used": {KEY: used}},
    }


def quota_list(used: str) -> bytes:
    return json.dumps(
        {
            "kind": "ResourceQuotaList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "40"},
            "items": [quota(used, "30")],
        }
    ).encode()


def event(kind: str, used: str, resource_version: str) -> bytes:
    return json.dumps({"type": kind, "object": quota(used, resource_version)}).encode() + b"\n"


def used(quotas: Quotas | None) -> list[tuple[int, int]]:
    return [(hard, now) for _, hard, now in quotas.limits("ml", KEY)] if quotas else []


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    yield replay
    replay.stop()


def test_quotas_are_listed_then_watched_and_reach_the_engines_view(server: ReplayServer) -> None:
    gate = threading.Event()
    server.quota_lists.append(Body(quota_list("2")))
    server.quota_watches.append(
        Stream([gate, event("MODIFIED", "4", "41"), event("DELETED", "4", "42")], end="hold")
    )
    live = live_source(server)
    try:
        live.start()
        eventually(lambda: used(live.resource_quotas()) == [(4, 2)])
        eventually(live.ready)
        assert used(view_of(live).quotas) == [(4, 2)]
        gate.set()
        eventually(lambda: used(live.resource_quotas()) == [])
        assert view_of(live).quotas is not None
    finally:
        live.stop()
    watches = [r for r in server.quota_requests() if r.query.get("watch")]
    assert watches[0].path == RESOURCE_QUOTAS
    assert watches[0].query["resourceVersion"] == "40"


def test_a_forbidden_quota_list_leaves_them_unknown_and_the_nodes_ready(
    server: ReplayServer,
) -> None:
    forbidden = status_body(
        403,
        "Forbidden",
        'resourcequotas is forbidden: User "system:serviceaccount:gpu-webhook:gpu-webhook" '
        'cannot list resource "resourcequotas" in API group "" at the cluster scope',
    )
    server.quota_lists.extend(Body(forbidden, 403) for _ in range(50))
    live = live_source(server)
    try:
        live.start()
        eventually(live.ready)
        eventually(lambda: len(server.quota_requests()) >= 2)
        assert live.resource_quotas() is None
        assert view_of(live).quotas is None
        assert view_of(live).snapshot is not None
    finally:
        live.stop()


@pytest.mark.slow
def test_a_worker_fed_by_the_watcher_sees_the_quotas_and_their_changes(
    server: ReplayServer, tmp_path: Path
) -> None:
    gate = threading.Event()
    server.quota_lists.append(Body(quota_list("1")))
    server.quota_watches.append(Stream([gate, event("MODIFIED", "3", "41")], end="hold"))
    with running_watcher(server, tmp_path) as watcher, fed_worker(watcher) as worker:
        eventually(lambda: used(worker.resource_quotas()) == [(4, 1)], timeout=STARTUP_SECONDS)
        gate.set()
        eventually(lambda: used(worker.resource_quotas()) == [(4, 3)])
        with fed_worker(watcher, quick=False) as late:
            eventually(lambda: used(late.resource_quotas()) == [(4, 3)])
