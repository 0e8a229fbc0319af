"""Helpers for tests of the inventory sources: a real watcher process against a replay server,
a plain socket client that reads the feed as a worker would, and an in-process live source
with short intervals."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.cluster.replayserver import ReplayServer, fixture
from tests.running import kubeconfig
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources import feedwire
from webhook.cluster.sources.feedsource import FeedInventorySource
from webhook.cluster.sources.inventorysource import ApiEndpoint, LiveInventorySource
from webhook.cluster.watcherprocess import WatcherProcess


def live_source(replay: ReplayServer) -> LiveInventorySource:
    """The in-process live source against ``replay``, publishing and retrying quickly."""
    return LiveInventorySource(
        api=ApiEndpoint(host=replay.url),
        publish_interval_seconds=0.01,
        backoff=lambda: Backoff(initial_seconds=0.01, cap_seconds=0.05),
        watch_timeout_seconds=lambda: 30,
    )


@contextmanager
def running_watcher(replay: ReplayServer, directory: Path) -> Iterator[WatcherProcess]:
    """The pod's watcher, started as the gunicorn master starts it; always stopped."""
    watcher = WatcherProcess(
        kubeconfig=kubeconfig(directory, replay.url),
        log_level="warning",
        backoff=Backoff(initial_seconds=0.05, cap_seconds=0.2),
    )
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()


@contextmanager
def fed_worker(watcher: WatcherProcess, *, quick: bool = True) -> Iterator[FeedInventorySource]:
    """A worker's inventory source reading ``watcher``'s feed, publishing and retrying
    quickly unless ``quick`` is False (the defaults a worker starts with); always stopped."""
    options: dict[str, Any] = (
        {
            "publish_interval_seconds": 0.01,
            "backoff": Backoff(initial_seconds=0.02, cap_seconds=0.1),
        }
        if quick
        else {}
    )
    worker = FeedInventorySource(socket_path=watcher.socket_path, **options)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


class FeedReader:
    """A subscriber that keeps every message, for tests that ask what a worker was sent."""

    def __init__(self, path: str, *, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        while True:
            try:
                self.socket.connect(path)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        self.socket.settimeout(timeout)
        self._lines = self.socket.makefile("rb")

    def next(self) -> dict[str, Any]:
        line = self._lines.readline()
        assert line, "the watcher closed the feed"
        return feedwire.decode(line)

    def until(self, kind: str) -> list[dict[str, Any]]:
        """Every message up to and including the first of ``kind``."""
        seen = [self.next()]
        while seen[-1]["t"] != kind:
            seen.append(self.next())
        return seen

    def node_list(self) -> tuple[str, list[dict[str, Any]]]:
        """The next node list whole: its resource version and its records."""
        head = self.until("nodes")[-1]
        records = []
        for _ in range(head["lines"]):
            chunk = self.next()
            assert chunk["t"] == "chunk", chunk
            records += chunk["nodes"]
        return head["rv"], records

    def skip_to_synced(self) -> None:
        """Read until the watcher has sent its node list, in its greeting or after it."""
        self.node_list()

    def close(self) -> None:
        self._lines.close()
        self.socket.close()

    def __enter__(self) -> FeedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def greeting_once_synced(
    path: str, *, timeout: float = 30.0
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """What a subscriber that connects once nodes and namespaces are in gets first: the
    state message, then the node list (resource version and records)."""
    deadline = time.monotonic() + timeout
    while True:
        with FeedReader(path) as reader:
            state = reader.next()
            if state["status"]["synced"] and state["status"]["namespaces_synced"]:
                return (state, *reader.node_list())
        assert time.monotonic() < deadline, f"not synced after {timeout} s: {state['status']}"
        time.sleep(0.05)


def node_event(kind: str, name: str, *, resource_version: str, **changes: Any) -> bytes:
    """A watch event for a node of the recorded list, with its resource version and
    ``changes`` (``heartbeat``, ``unschedulable``) applied."""
    items = json.loads(fixture("node-list.json"))["items"]
    node = next(item for item in items if item["metadata"]["name"] == name)
    node["metadata"]["resourceVersion"] = resource_version
    if "heartbeat" in changes:
        node["status"]["conditions"][-1]["lastHeartbeatTime"] = changes["heartbeat"]
    if "unschedulable" in changes:
        node["spec"]["unschedulable"] = changes["unschedulable"]
    return json.dumps({"type": kind, "object": node}).encode() + b"\n"
