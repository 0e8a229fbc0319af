"""A worker's inventory, fed by the pod's watcher over its Unix socket.

The watcher (``webhook.cluster.watcher``) does the listing, watching and parsing; a
worker only applies compact changes to the same ``NodeCache`` the in-process live source
uses, so snapshots are coalesced and built incrementally exactly as there. If the watcher
goes away, the worker keeps its last state, connects again with backoff, and its
inventory turns stale by the usual rule: no word from the API server, through the
watcher, for ``max_staleness_seconds``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.inventory import InventoryStatus
from webhook.cluster.reflector import Backoff, let_requests_run
from webhook.cluster.sources import feedwire
from webhook.cluster.sources.devicesource import DeviceCache, Key
from webhook.cluster.sources.feedwire import WatcherStatus
from webhook.cluster.sources.inventorysource import NodeCache, SourceThreads, devices_settled
from webhook.cluster.sources.poolsource import PoolCacheState
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, Node
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.resources.quotas import Quotas
from webhook.files.ruleobjects import RuleObject

log = logging.getLogger("webhook.inventory")
# A worker starts beside the watcher process, which needs a moment (its first list of the
# cluster) before its socket takes connections: refusals that early are not news.
STARTUP_GRACE_SECONDS = 30.0


class FeedInventorySource:
    """Nodes, namespaces and RuntimeClasses as the pod's inventory watcher last reported
    them."""

    def __init__(
        self,
        *,
        socket_path: str,
        max_staleness_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        publish_interval_seconds: float = 0.1,
        backoff: Backoff | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.max_staleness_seconds = max_staleness_seconds
        self._clock = clock
        self._backoff = backoff or Backoff(initial_seconds=0.05, cap_seconds=2.0)
        self._nodes = NodeCache(clock=clock, publish_interval_seconds=publish_interval_seconds)
        self._namespaces: dict[str, Mapping[str, str]] | None = None
        self._runtime_classes: frozenset[str] | None = None
        self._nvidia_runtime_classes: frozenset[str] = frozenset()
        self._resource_quotas: Quotas | None = None
        self._watcher = WatcherStatus()
        # When the watcher last heard from the API server, on this process's clock.
        self._contact: float | None = None
        self._connection_error = ""
        self._warned = False
        self._connected_once = False
        self._connection: socket.socket | None = None
        self._listing: _Listing | None = None
        self._devices = DeviceCache()
        self._dra_lists: dict[str, list[tuple[Key, Any]]] = {}
        # The watcher's autoscaler objects (issue 23); None until it sent them.
        self._pool_state: PoolCacheState | None = None
        self._pools: PoolInventory | None = None
        # The rule objects (issue 33); None until the watcher listed them.
        self._rule_objects: tuple[RuleObject, ...] | None = None
        self._running = SourceThreads(clock=clock)

    def start(self) -> None:
        """Connect in the background; returns at once (see ``ready``). Runs once."""
        self._running.start(
            lambda: [
                threading.Thread(target=self._receive_loop, name="inventory-feed", daemon=True),
                self._nodes.publisher(self._running.stop),
            ]
        )

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Disconnect and wait for the threads; the last snapshot stays readable."""
        self._running.stop.set()
        self._nodes.wake()
        connection = self._connection
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._running.join(timeout_seconds)

    def snapshot(self) -> Inventory | None:
        return self._nodes.published

    def ready(self) -> bool:
        return (
            self._nodes.published is not None
            and self._namespaces is not None
            and devices_settled(self._devices)
            and self._pool_state is not None
            and self._rule_objects is not None
        )

    def rule_objects(self) -> tuple[RuleObject, ...] | None:
        """GPUPolicy and the other rule objects as the API server serves them."""
        return self._rule_objects

    def devices(self) -> DeviceInventory | None:
        return self._devices.snapshot()

    def status(self) -> InventoryStatus:
        namespaces = self._namespaces
        return self._nodes.status(
            last_contact=self._contact,
            started_at=self._running.started_at,
            max_staleness_seconds=self.max_staleness_seconds,
            last_error=self._connection_error or self._watcher.last_error,
            source=f"watcher at {self.socket_path}",
            relists=self._watcher.relists,
            namespace_count=None if namespaces is None else len(namespaces),
        )

    def stale_seconds(self) -> float | None:
        return self._nodes.stale_seconds(
            last_contact=self._contact,
            started_at=self._running.started_at,
            max_staleness_seconds=self.max_staleness_seconds,
        )

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        namespaces = self._namespaces
        return None if namespaces is None else namespaces.get(name)

    def namespaces(self) -> Mapping[str, Mapping[str, str]] | None:
        """Every namespace the watcher saw, with its labels (a new mapping at each change);
        None before the first word."""
        return self._namespaces

    def runtime_classes(self) -> frozenset[str] | None:
        return self._runtime_classes

    def nvidia_runtime_classes(self) -> frozenset[str]:
        """The RuntimeClasses whose handler is NVIDIA's runtime, as the watcher saw them."""
        return self._nvidia_runtime_classes

    def pools(self) -> PoolInventory | None:
        return self._pools

    def resource_quotas(self) -> Quotas | None:
        return self._resource_quotas

    # The receiving thread.

    def _receive_loop(self) -> None:
        while not self._running.stop.is_set():
            try:
                self._receive()
                error = "the inventory watcher closed the connection"
            except (OSError, ValueError, KeyError, TypeError) as exc:
                error = f"the inventory watcher is unreachable: {exc}"
            if self._running.stop.is_set():
                return
            delay = self._backoff.next()
            if not self._warned and not self._starting():
                log.warning("%s; connecting again", error, extra={"socket": self.socket_path})
                self._warned = True
            self._connection_error = error
            if self._running.stop.wait(delay):
                return

    def _starting(self) -> bool:
        """Not yet connected once, and still within the watcher's start-up time."""
        started = self._running.started_at
        return (
            not self._connected_once
            and started is not None
            and self._clock() - started < STARTUP_GRACE_SECONDS
        )

    def _receive(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket_path)
            self._connected_once = True
            self._connection = connection
            try:
                with connection.makefile("rb") as lines:
                    for line in lines:
                        self._apply(feedwire.decode(line))
                        # Lines already buffered are read without releasing the lock.
                        let_requests_run()
            finally:
                self._connection = None

    def _apply(self, message: feedwire.Message) -> None:
        kind = message["t"]
        if kind == "state":
            self._apply_state(message)
        elif kind == "status":
            self._apply_status(message["status"])
        elif kind == "nodes":
            self._listing = _Listing(message["rv"], lines_left=message["lines"])
            self._complete_list()
        elif kind == "chunk":
            self._add_to_list(message["nodes"])
        elif kind == "upsert":
            node = feedwire.node_from_record(message["node"])
            self._nodes.apply("MODIFIED", node, message["rv"])
            self._contact = self._clock()
        elif kind == "delete":
            self._nodes.apply("DELETED", Node(name=message["name"]), message["rv"])
            self._contact = self._clock()
        elif kind == "namespaces":
            self._namespaces = dict(message["namespaces"])
        elif kind == "namespace":
            self._apply_namespace(message["name"], message["labels"])
        elif kind == "dra-served":
            self._devices.set_served(bool(message["served"]))
        elif kind == "dra":
            # A list in lines: the kind is replaced once whole, never half a list.
            pending = self._dra_lists.setdefault(message["kind"], [])
            pending.extend(self._devices.parsed(message["kind"], o) for o in message["objects"])
            if message["last"]:
                items = self._dra_lists.pop(message["kind"])
                self._devices.replace_parsed(message["kind"], items, message["rv"])
        elif kind == "dra-event":
            self._devices.apply(message["kind"], message["event"], message["object"], message["rv"])
        elif kind == "runtimeclasses":
            self._apply_runtime_classes(message["names"], message.get("nvidia"))
        elif kind == "pools":
            # A watcher that restarted has not read them yet: keep what this worker had.
            state = PoolCacheState.from_wire(message["pools"])
            if state.settled:
                self._pools = state.inventory()
                self._pool_state = state
        elif kind == "resourcequotas":
            self._apply_resource_quotas(message["quotas"])
        elif kind == "rule-objects":
            self._rule_objects = tuple(RuleObject.from_wire(o) for o in message["objects"])

    def _apply_state(self, message: feedwire.Message) -> None:
        """A (re)connection: take the watcher's whole state. Its node list follows; a
        watcher that has not listed yet sends none, and the worker keeps what it had."""
        self._listing = None
        self._dra_lists = {}
        if message["namespaces"] is not None:
            self._namespaces = dict(message["namespaces"])
        self._apply_runtime_classes(
            message.get("runtime_classes"), message.get("nvidia_runtime_classes")
        )
        self._apply_resource_quotas(message.get("resource_quotas"))
        self._apply_status(message["status"])
        self._backoff.reset()
        if self._warned:
            log.info("connected to the inventory watcher", extra={"socket": self.socket_path})
        self._warned = False
        self._connection_error = ""

    def _apply_status(self, raw: Mapping[str, Any]) -> None:
        status = WatcherStatus.from_json(raw)
        self._watcher = status
        if status.since_contact_seconds is not None:
            self._contact = self._clock() - status.since_contact_seconds
        if status.synced and status.resource_version:
            self._nodes.progress(status.resource_version)

    def _add_to_list(self, records: list[Mapping[str, Any]]) -> None:
        listing = self._listing
        if listing is None:
            raise ValueError("a line of a node list without its head")
        listing.nodes.extend(feedwire.node_from_record(record) for record in records)
        listing.lines_left -= 1
        self._complete_list()

    def _complete_list(self) -> None:
        """Replace the nodes once a node list is whole, not line by line: a relist must
        never publish half a cluster."""
        listing = self._listing
        if listing is None or listing.lines_left > 0:
            return
        self._listing = None
        self._nodes.replace(listing.nodes, listing.resource_version)
        self._contact = self._clock()

    def _apply_resource_quotas(self, records: list[Mapping[str, Any]] | None) -> None:
        """Null keeps what this worker had, as for RuntimeClasses."""
        if records is not None:
            self._resource_quotas = feedwire.quotas_from_records(records)

    def _apply_runtime_classes(self, names: list[str] | None, nvidia: list[str] | None) -> None:
        """Null keeps what this worker had: a watcher that restarted has not listed yet."""
        if names is not None:
            self._runtime_classes = frozenset(names)
            self._nvidia_runtime_classes = frozenset(nvidia or ())

    def _apply_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        # A new dict, swapped in whole: readers never see one half-changed.
        namespaces = dict(self._namespaces or {})
        if labels is None:
            namespaces.pop(name, None)
        else:
            namespaces[name] = labels
        self._namespaces = namespaces


@dataclass(slots=True)
class _Listing:
    """A node list being received, line by line."""

    resource_version: str
    lines_left: int
    nodes: list[Node] = field(default_factory=list)
