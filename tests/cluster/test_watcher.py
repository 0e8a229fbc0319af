"""The pod's inventory watcher, a real process listing and watching a replay server: what
it sends to the workers that subscribe to it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.feeding import FeedReader, greeting_once_synced, node_event, running_watcher
from tests.cluster.replayserver import Body, ReplayServer, Stream, fixture

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    yield replay
    replay.stop()


def node_changes(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What was sent about nodes; namespaces and status heartbeats interleave freely."""
    return [m for m in messages if m["t"] in ("nodes", "chunk", "upsert", "delete")]


def test_a_subscriber_first_gets_the_whole_state(server: ReplayServer, tmp_path: Path) -> None:
    with running_watcher(server, tmp_path) as watcher:
        state, resource_version, nodes = greeting_once_synced(watcher.socket_path)
    assert state["t"] == "state"
    assert resource_version == "217"
    assert {n["name"] for n in nodes} == {
        "cpu-0",
        "gpu-a100-0",
        "gpu-h100-mig-0",
        "gpu-t4-0",
    }
    assert state["namespaces"]["kube-system"]["kubernetes.io/metadata.name"] == "kube-system"
    assert state["status"]["synced"] is True
    assert state["status"]["resource_version"] == "217"


@contextlib.contextmanager
def _synced_reader(server: ReplayServer, tmp_path: Path, *events: Any) -> Iterator[FeedReader]:
    """A reader that has the watcher's full state; ``events`` reach the watch after that."""
    gate = threading.Event()
    server.watches.append(Stream([gate, *events], end="hold"))
    with (
        running_watcher(server, tmp_path) as watcher,
        FeedReader(watcher.socket_path) as reader,
    ):
        reader.skip_to_synced()
        gate.set()
        yield reader


def test_a_heartbeat_only_update_sends_nothing_and_a_cordon_sends_the_node(
    server: ReplayServer, tmp_path: Path
) -> None:
    heartbeat = node_event(
        "MODIFIED", "gpu-a100-0", resource_version="300", heartbeat="2026-11-29T15:05:00Z"
    )
    cordon = node_event("MODIFIED", "gpu-t4-0", resource_version="301", unschedulable=True)
    with _synced_reader(server, tmp_path, heartbeat, cordon) as reader:
        sent = node_changes(reader.until("upsert"))
        status = reader.until("status")[-1]["status"]
    assert [(m["t"], m["rv"], m["node"]["name"]) for m in sent] == [("upsert", "301", "gpu-t4-0")]
    assert sent[0]["node"]["unschedulable"] is True
    assert status["resource_version"] == "301"


def test_a_deleted_node_is_sent_as_its_name(server: ReplayServer, tmp_path: Path) -> None:
    deleted = node_event("DELETED", "cpu-0", resource_version="302")
    with _synced_reader(server, tmp_path, deleted) as reader:
        sent = node_changes(reader.until("delete"))
    assert sent == [{"t": "delete", "rv": "302", "name": "cpu-0"}]


def test_the_socket_lives_in_a_private_directory_removed_at_stop(
    server: ReplayServer, tmp_path: Path
) -> None:
    with running_watcher(server, tmp_path) as watcher:
        FeedReader(watcher.socket_path).close()
        directory = Path(watcher.directory)
        assert directory.stat().st_mode & 0o777 == 0o700
        pid = watcher.pid
    assert not directory.exists()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
