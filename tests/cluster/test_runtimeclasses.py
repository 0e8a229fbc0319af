"""RuntimeClasses in the live inventory: listed and watched beside the nodes, in one process
and through the pod's watcher, so that the engine can tell a pod's class does not exist."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.feeding import fed_worker, live_source, running_watcher
from tests.cluster.replayserver import (
    RUNTIME_CLASSES,
    Body,
    ReplayServer,
    Stream,
    eventually,
    fixture,
    status_body,
)
from webhook.admission.inventory import view_of

# A new interpreter that imports the cluster client: slow on a busy machine.
STARTUP_SECONDS = 30.0


# Classes whose handler is not their name: an admin's "gpu" class for NVIDIA's runtime.
HANDLERS = {"gpu": "nvidia"}


def runtime_class(name: str, resource_version: str) -> dict[str, object]:
    """A RuntimeClass as the API server sends it (the GPU operator creates "nvidia")."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "resourceVersion": resource_version, "uid": f"uid-{name}"},
        "handler": HANDLERS.get(name, name),
    }


def runtime_class_list(*names: str, resource_version: str = "40") -> bytes:
    return json.dumps(
        {
            "kind": "RuntimeClassList",
            "apiVersion": "node.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "items": [runtime_class(n, "30") for n in names],
        }
    ).encode()


def event(kind: str, name: str, resource_version: str) -> bytes:
    return json.dumps({"type": kind, "object": runtime_class(name, resource_version)}).encode() + (
        b"\n"
    )


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    yield replay
    replay.stop()


def test_runtime_classes_are_listed_then_watched_and_reach_the_engines_view(
    server: ReplayServer,
) -> None:
    gate = threading.Event()
    server.runtime_class_lists.append(Body(runtime_class_list("nvidia", "runc")))
    server.runtime_class_watches.append(
        Stream([gate, event("ADDED", "kata", "41"), event("DELETED", "runc", "42")], end="hold")
    )
    live = live_source(server)
    try:
        live.start()
        eventually(lambda: live.runtime_classes() == {"nvidia", "runc"})
        eventually(live.ready)
        assert view_of(live).runtime_classes == {"nvidia", "runc"}
        gate.set()
        eventually(lambda: live.runtime_classes() == {"nvidia", "kata"})
        assert view_of(live).runtime_classes == {"nvidia", "kata"}
    finally:
        live.stop()
    watches = [r for r in server.runtime_class_requests() if r.query.get("watch")]
    assert watches[0].path == RUNTIME_CLASSES
    assert watches[0].query["resourceVersion"] == "40"


def test_a_forbidden_runtime_class_list_leaves_them_unknown_and_the_nodes_ready(
    server: ReplayServer,
) -> None:
    forbidden = status_body(
        403,
        "Forbidden",
        'runtimeclasses.node.k8s.io is forbidden: User "system:serviceaccount:gpu-webhook:'
        'gpu-webhook" cannot list resource "runtimeclasses" in API group "node.k8s.io"',
    )
    server.runtime_class_lists.extend(Body(forbidden, 403) for _ in range(50))
    live = live_source(server)
    try:
        live.start()
        eventually(live.ready)
        eventually(lambda: len(server.runtime_class_requests()) >= 2)
        assert live.runtime_classes() is None
        assert view_of(live).runtime_classes is None
        assert view_of(live).snapshot is not None
    finally:
        live.stop()


@pytest.mark.slow
def test_a_worker_fed_by_the_watcher_sees_the_runtime_classes_and_their_changes(
    server: ReplayServer, tmp_path: Path
) -> None:
    gate = threading.Event()
    server.runtime_class_lists.append(Body(runtime_class_list("nvidia")))
    server.runtime_class_watches.append(Stream([gate, event("ADDED", "kata", "41")], end="hold"))
    with running_watcher(server, tmp_path) as watcher, fed_worker(watcher) as worker:
        eventually(lambda: worker.runtime_classes() == {"nvidia"}, timeout=STARTUP_SECONDS)
        gate.set()
        eventually(lambda: worker.runtime_classes() == {"nvidia", "kata"})
        with fed_worker(watcher, quick=False) as late:
            eventually(lambda: late.runtime_classes() == {"nvidia", "kata"})


def test_classes_whose_handler_is_nvidias_runtime_reach_the_engines_view(
    server: ReplayServer,
) -> None:
    gate = threading.Event()
    server.runtime_class_lists.append(Body(runtime_class_list("gpu", "runc")))
    server.runtime_class_watches.append(
        Stream([gate, event("ADDED", "nvidia", "41"), event("DELETED", "gpu", "42")], end="hold")
    )
    live = live_source(server)
    try:
        live.start()
        eventually(lambda: live.runtime_classes() == {"gpu", "runc"})
        eventually(live.ready)
        assert view_of(live).nvidia_runtime_classes == {"gpu"}
        gate.set()
        eventually(lambda: live.runtime_classes() == {"nvidia", "runc"})
        assert view_of(live).nvidia_runtime_classes == {"nvidia"}
    finally:
        live.stop()


@pytest.mark.slow
def test_a_worker_fed_by_the_watcher_knows_which_classes_run_nvidias_runtime(
    server: ReplayServer, tmp_path: Path
) -> None:
    gate = threading.Event()
    server.runtime_class_lists.append(Body(runtime_class_list("gpu", "runc")))
    server.runtime_class_watches.append(Stream([gate, event("DELETED", "gpu", "41")], end="hold"))
    with running_watcher(server, tmp_path) as watcher, fed_worker(watcher) as worker:
        eventually(lambda: worker.runtime_classes() == {"gpu", "runc"}, timeout=STARTUP_SECONDS)
        eventually(worker.ready)
        assert view_of(worker).nvidia_runtime_classes == {"gpu"}
        with fed_worker(watcher, quick=False) as late:
            eventually(lambda: late.runtime_classes() == {"gpu", "runc"})
            eventually(late.ready)
            assert view_of(late).nvidia_runtime_classes == {"gpu"}
        gate.set()
        eventually(lambda: worker.runtime_classes() == {"runc"})
        assert view_of(worker).nvidia_runtime_classes == frozenset()
