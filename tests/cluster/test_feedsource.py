"""A worker's inventory fed by the pod's watcher process: the engine sees what an
in-process live source sees, a late worker gets everything, and a watcher that dies
leaves the workers with their last state, stale in time, until it is back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.feeding import running_watcher
from tests.cluster.replayserver import (
    Body,
    ReplayServer,
    Stream,
    eventually,
    fixture,
    fixture_lines,
)
from webhook.admission.inventory import InventorySource, view_of
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources.feedsource import STARTUP_GRACE_SECONDS, FeedInventorySource
from webhook.cluster.sources.inventorysource import ApiEndpoint, LiveInventorySource
from webhook.engine.resources.inventory import Node

pytestmark = pytest.mark.slow

WATCH = fixture_lines("watch-stream.jsonl")  # ADDED, MODIFIED x4, DELETED, BOOKMARK x2
# A new interpreter that imports the cluster client: slow on a busy machine.
STARTUP_SECONDS = 30.0
NAMESPACES = json.loads(fixture("namespace-list.json"))["items"]


def relisted(resource_version: str, keep: int) -> bytes:
    nodes = json.loads(fixture("node-list.json"))
    nodes["metadata"]["resourceVersion"] = resource_version
    nodes["items"] = nodes["items"][:keep]
    return json.dumps(nodes).encode()


def only_the_lists(replay: ReplayServer) -> None:
    """Nothing after the first lists: the watches stay open and idle."""


def script_watch_stream(replay: ReplayServer) -> None:
    replay.watches.append(Stream(WATCH, end="hold"))


def script_relist(replay: ReplayServer) -> None:
    replay.watches.append(Stream(fixture_lines("watch-410.jsonl"), end="close"))
    replay.lists.append(Body(relisted("400", keep=2)))
    replay.watches.append(Stream(WATCH[:1], end="hold"))


SCRIPTS = [
    pytest.param(only_the_lists, "217", 0, id="initial-list"),
    pytest.param(script_watch_stream, "385", 0, id="added-modified-deleted"),
    pytest.param(script_relist, "379", 1, id="relist-after-410"),
]


def scripted_server(script: Callable[[ReplayServer], None]) -> ReplayServer:
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    script(replay)
    return replay


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = scripted_server(only_the_lists)
    yield replay
    replay.stop()


def feed_source(socket_path: str, **options: object) -> FeedInventorySource:
    settings: dict[str, object] = {
        "publish_interval_seconds": 0.01,
        "backoff": Backoff(initial_seconds=0.02, cap_seconds=0.1),
    }
    return FeedInventorySource(socket_path=socket_path, **(settings | options))  # type: ignore[arg-type]


def nodes_of(source: InventorySource) -> dict[str, Node]:
    snapshot = source.snapshot()
    return {} if snapshot is None else {node.name: node for node in snapshot.nodes}


def seen_by_the_engine(source: InventorySource) -> tuple[object, ...]:
    status = source.status()
    return (
        nodes_of(source),
        status.resource_version,
        status.relists,
        {
            ns["metadata"]["name"]: source.namespace_labels(ns["metadata"]["name"])
            for ns in NAMESPACES
        },
    )


def wait_until_settled(source: InventorySource, resource_version: str, relists: int) -> None:
    def settled() -> bool:
        status = source.status()
        return source.ready() and (status.resource_version, status.relists) == (
            resource_version,
            relists,
        )

    with contextlib.suppress(AssertionError):  # the assertion below says where it stopped
        eventually(settled, timeout=STARTUP_SECONDS)
    assert settled(), (type(source).__name__, source.ready(), source.status())


@pytest.mark.parametrize(("script", "final_version", "relists"), SCRIPTS)
def test_a_worker_sees_what_an_in_process_live_source_sees(
    tmp_path: Path, script: Callable[[ReplayServer], None], final_version: str, relists: int
) -> None:
    direct, fed = scripted_server(script), scripted_server(script)
    live = LiveInventorySource(
        api=ApiEndpoint(host=direct.url), watch_namespaces=True, publish_interval_seconds=0.01
    )
    try:
        live.start()
        with running_watcher(fed, tmp_path) as watcher:
            worker = feed_source(watcher.socket_path)
            worker.start()
            try:
                for source in (live, worker):
                    wait_until_settled(source, final_version, relists)
                with contextlib.suppress(AssertionError):  # the assertion below shows the diff
                    eventually(lambda: seen_by_the_engine(worker) == seen_by_the_engine(live))
                assert seen_by_the_engine(worker) == seen_by_the_engine(live)
            finally:
                worker.stop()
    finally:
        live.stop()
        direct.stop()
        fed.stop()
    assert len(nodes_of(live)) >= 2
    assert all(labels is not None for labels in seen_by_the_engine(live)[3].values())  # type: ignore[union-attr]


def test_a_worker_that_connects_late_gets_the_whole_state(
    server: ReplayServer, tmp_path: Path
) -> None:
    added, gpus16 = WATCH[:2]
    server.watches.append(Stream([added, gpus16], end="hold"))
    with running_watcher(server, tmp_path) as watcher:
        early = feed_source(watcher.socket_path)
        early.start()
        try:
            eventually(
                lambda: "gpu-a100-1" in nodes_of(early) and early.ready(), timeout=STARTUP_SECONDS
            )
            eventually(
                lambda: nodes_of(early)["gpu-a100-1"].allocatable.get("nvidia.com/gpu") == 16
            )
            late = feed_source(watcher.socket_path)
            late.start()
            try:
                eventually(late.ready, timeout=STARTUP_SECONDS)
                assert nodes_of(late) == nodes_of(early)
                assert late.namespace_labels("kube-system") == early.namespace_labels("kube-system")
                assert late.namespace_labels("kube-system") is not None
            finally:
                late.stop()
        finally:
            early.stop()


def test_a_dead_watcher_leaves_workers_their_nodes_then_stale_until_it_is_back(
    server: ReplayServer, tmp_path: Path
) -> None:
    relist_gate = threading.Event()
    server.lists.append(Body(relisted("500", keep=3), gate=relist_gate))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    with running_watcher(server, tmp_path) as watcher:
        worker = feed_source(watcher.socket_path, max_staleness_seconds=0.5)
        worker.start()
        try:
            eventually(worker.ready, timeout=STARTUP_SECONDS)
            first_pid = watcher.pid
            assert first_pid is not None
            os.kill(first_pid, signal.SIGKILL)
            # The restarted watcher cannot list yet: the worker keeps its nodes, and its
            # inventory turns stale once nothing was heard for the staleness time.
            eventually(lambda: worker.status().stale)
            assert len(nodes_of(worker)) == 4
            assert "stale" in (view_of(worker).problem or "")
            assert watcher.pid != first_pid
            relist_gate.set()
            eventually(
                lambda: not worker.status().stale and len(nodes_of(worker)) == 3,
                timeout=STARTUP_SECONDS,
            )
            assert view_of(worker).snapshot is not None
            assert watcher.restarts == 1
        finally:
            worker.stop()


def test_a_worker_started_before_the_watcher_connects_once_it_listens(tmp_path: Path) -> None:
    worker = feed_source(str(tmp_path / "not-yet.sock"))
    worker.start()
    try:
        error = eventually(lambda: worker.status().last_error)
        assert "unreachable" in error
        assert not worker.ready()
        assert worker.status().synced is False
    finally:
        worker.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("inventory-")]


def namespace_event(kind: str, name: str, labels: dict[str, str], resource_version: str) -> bytes:
    meta = {"name": name, "labels": labels, "resourceVersion": resource_version}
    event = {"type": kind, "object": {"kind": "Namespace", "apiVersion": "v1", "metadata": meta}}
    return json.dumps(event).encode() + b"\n"


def test_namespace_changes_reach_the_workers(server: ReplayServer, tmp_path: Path) -> None:
    gate = threading.Event()
    server.namespace_watches.append(
        Stream(
            [
                gate,
                namespace_event("ADDED", "team-a", {"gpu": "yes"}, "600"),
                namespace_event("MODIFIED", "default", {"gpu": "no"}, "601"),
                namespace_event("DELETED", "no-sa-ns", {}, "602"),
            ],
            end="hold",
        )
    )
    with running_watcher(server, tmp_path) as watcher:
        worker = feed_source(watcher.socket_path)
        worker.start()
        try:
            eventually(worker.ready, timeout=STARTUP_SECONDS)
            assert worker.namespace_labels("team-a") is None
            gate.set()
            eventually(lambda: worker.namespace_labels("no-sa-ns") is None)
            assert worker.namespace_labels("team-a") == {"gpu": "yes"}
            assert worker.namespace_labels("default") == {"gpu": "no"}
            assert worker.status().namespace_count == len(NAMESPACES)
        finally:
            worker.stop()


def test_a_worker_waiting_for_a_starting_watcher_logs_no_warning_until_the_grace_is_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every pod starts its workers beside its watcher: a refused socket at start-up is
    normal, and says nothing; past STARTUP_GRACE_SECONDS it is a warning, said once."""
    now = [0.0]
    worker = FeedInventorySource(
        socket_path=str(tmp_path / "not-yet.sock"),
        clock=lambda: now[0],
        backoff=Backoff(initial_seconds=0.01, cap_seconds=0.01),
    )
    caplog.set_level("INFO", logger="webhook.inventory")
    worker.start()
    try:
        eventually(lambda: "unreachable" in worker.status().last_error)
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        now[0] = STARTUP_GRACE_SECONDS + 1
        eventually(lambda: any(r.levelname == "WARNING" for r in caplog.records))
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1
        assert "the inventory watcher is unreachable" in warnings[0]
    finally:
        worker.stop()
