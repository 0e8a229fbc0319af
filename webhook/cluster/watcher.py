"""The pod's one inventory watcher: lists and watches nodes, namespaces and RuntimeClasses,
and feeds the gunicorn workers over a Unix socket.

Why a process of its own: parsing an 11 KB node event takes the interpreter lock, and in a
worker that lock is what admissions wait for. Here the parsing happens once per pod, not
once per worker, and the API server serves one list and one watch per pod. Workers get
compact records (``webhook.cluster.sources.feedwire``) and only when something policy reads
changed: a heartbeat-only update costs a worker nothing.

Run by ``webhook.cluster.watcherprocess`` as ``python -m webhook.cluster.watcher``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook import jsonlog
from webhook.cluster import conditionsync
from webhook.cluster.apiclient import ApiEndpoint, ApiError, KubeconfigError
from webhook.cluster.lease import Lease
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources import feedwire
from webhook.cluster.sources.devicesource import PATHS, DeviceCache
from webhook.cluster.sources.inventorysource import (
    ClusterWatch,
    NamespaceCache,
    NamespaceItem,
    ResourceQuotaCache,
    RuntimeClassCache,
    api_endpoint_from_kubeconfig,
)
from webhook.cluster.sources.poolsource import PoolCache, wire
from webhook.cluster.sources.rulesource import (
    ClusterSight,
    RuleObjectCache,
    StatusKeeper,
    status_lease,
)
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.resources.devices import TAINT_RULE
from webhook.engine.resources.inventory import Inventory, Node, node_from_json
from webhook.engine.resources.quotas import Quota
from webhook.files.rulefiles import RuleStore

log = logging.getLogger("webhook.inventory.watcher")
HEARTBEAT_SECONDS = 1.0
SEND_TIMEOUT_SECONDS = 5.0


class Subscribers:
    """Connected workers. Every message goes to each of them in the order it was sent;
    a worker that cannot take a message within the send timeout is dropped (it connects
    again and gets the whole state), so one stuck worker cannot stall the others."""

    def __init__(self) -> None:
        # Held while the state changes and while it is sent: a worker that joins gets
        # the state and then every later change, none twice and none missing.
        self.lock = threading.RLock()
        self._connections: list[socket.socket] = []

    def join(self, connection: socket.socket, greeting: bytes) -> None:
        with self.lock:
            if self._send(connection, greeting):
                self._connections.append(connection)

    def send(self, *messages: feedwire.Message) -> None:
        lines = feedwire.encode(*messages)
        with self.lock:
            self._connections = [c for c in self._connections if self._send(c, lines)]

    def close(self) -> None:
        with self.lock:
            for connection in self._connections:
                connection.close()
            self._connections = []

    @staticmethod
    def _send(connection: socket.socket, line: bytes) -> bool:
        try:
            connection.sendall(line)
        except OSError as exc:
            log.info("an inventory feed subscriber left: %s", exc, extra={"error": str(exc)})
            connection.close()
            return False
        return True


class FeedState:
    """What the watcher knows, kept so that a worker that connects late gets all of it."""

    def __init__(self, *, subscribers: Subscribers, clock: Callable[[], float]) -> None:
        self.subscribers = subscribers
        self.clock = clock
        self.nodes: dict[str, Node] | None = None
        self.resource_version = ""
        self.last_contact: float | None = None
        self.node_error = ""
        self.namespaces = NamespaceCache(clock=clock)
        self.devices = DeviceFeed(subscribers)
        self.runtime_classes = RuntimeClassCache()
        self.resource_quotas = ResourceQuotaCache()
        self.relists: Callable[[], int] = lambda: 0
        # Autoscaler objects: sent whole on every change (a cluster has a handful).
        self.pools = PoolCache(on_change=self._send_pools)
        # Rule objects (issue 33): sent whole on every change, once every kind is listed.
        self.rule_objects = RuleObjectCache(on_change=self._send_rule_objects)
        self.rules_changed = threading.Event()
        # The match conditions' keeper wakes on rule objects and nodes that changed.
        self.conditions_changed = threading.Event()

    def _rule_objects_message(self) -> feedwire.Message | None:
        objects = self.rule_objects.objects()
        if objects is None:
            return None
        return {"t": "rule-objects", "objects": [o.wire() for o in objects]}

    def _send_rule_objects(self, _cache: RuleObjectCache) -> None:
        with self.subscribers.lock:
            message = self._rule_objects_message()
            if message is not None:
                self.subscribers.send(message)
        self.rules_changed.set()
        self.conditions_changed.set()

    def _send_pools(self, pools: PoolCache) -> None:
        with self.subscribers.lock:
            self.subscribers.send({"t": "pools", "pools": wire(pools.state())})

    def contact(self, resource_version: str) -> None:
        self.resource_version = resource_version or self.resource_version
        self.last_contact = self.clock()
        self.node_error = ""

    def status(self) -> feedwire.WatcherStatus:
        since = None if self.last_contact is None else self.clock() - self.last_contact
        return feedwire.WatcherStatus(
            synced=self.nodes is not None,
            namespaces_synced=self.namespaces.synced,
            resource_version=self.resource_version,
            last_error=self.node_error or self.namespaces.last_error,
            relists=self.relists(),
            since_contact_seconds=since,
        )

    def cluster_sight(self) -> ClusterSight | None:
        """The nodes, pools, RuntimeClasses and namespaces, for the status writer to compare
        the policies' values with (issue 42). None before the nodes are listed, and where
        ResourceSlices exist: the watcher passes devices on unparsed, and a compare without
        them would call a DRA product missing; the workers' log and metric say it there."""
        nodes = self.nodes
        if nodes is None or self.devices.objects("ResourceSlice"):
            return None
        try:
            inventory = Inventory(list(nodes.values()))
        except RuntimeError:  # changed under us by the node reflector: asked again later
            return None
        pools = self.pools.state()
        view = InventoryView(
            inventory,
            runtime_classes=self.runtime_classes.names,
            pools=pools.inventory() if pools.settled else None,
        )
        names = frozenset(self.namespaces.labels) if self.namespaces.synced else None
        return ClusterSight(view, names)

    def settled_view(self) -> InventoryView | None:
        """The nodes for the match conditions: as ``cluster_sight`` sees them, once the
        autoscaler objects are settled too (a pool not listed yet may make untainted GPU
        nodes); None until then, and where ResourceSlices exist (their GPUs are not parsed
        here): the conditions then call every pod template."""
        sight = self.cluster_sight()
        if sight is None or not self.pools.settled:
            return None
        return sight.view

    def greeting(self) -> bytes:
        """The whole state, as the first messages of a connection."""
        namespaces = self.namespaces.labels if self.namespaces.synced else None
        state = {
            "t": "state",
            "namespaces": namespaces,
            "runtime_classes": feedwire.names(self.runtime_classes.names),
            "nvidia_runtime_classes": sorted(self.runtime_classes.nvidia),
            "resource_quotas": feedwire.quota_records(
                None if self.resource_quotas.quotas is None else self.resource_quotas.items()
            ),
            "status": self.status().to_json(),
        }
        devices = self.devices.messages()
        pools = {"t": "pools", "pools": wire(self.pools.state())}
        rule_objects = self._rule_objects_message()
        rules = [] if rule_objects is None else [rule_objects]
        if self.nodes is None:
            return feedwire.encode(state, *devices, pools, *rules)
        nodes = feedwire.node_list(self.nodes.values(), resource_version=self.resource_version)
        return feedwire.encode(state, *nodes, *devices, pools, *rules)


class DeviceFeed(DeviceCache):
    """The DRA reflectors' cache in the watcher: every change is also sent to workers."""

    def __init__(self, subscribers: Subscribers) -> None:
        super().__init__(parse=False)
        self.subscribers = subscribers

    def set_served(self, served: bool) -> None:
        with self.subscribers.lock:
            super().set_served(served)
            self.subscribers.send({"t": "dra-served", "served": served})

    def replace(self, kind: str, objects: list[Mapping[str, Any]], resource_version: str) -> None:
        with self.subscribers.lock:
            super().replace(kind, objects, resource_version)
            self.subscribers.send(
                *feedwire.dra_list(kind, objects, resource_version=resource_version)
            )

    def apply(self, kind: str, event: str, obj: Mapping[str, Any], resource_version: str) -> None:
        with self.subscribers.lock:
            super().apply(kind, event, obj, resource_version)
            message = {"t": "dra-event", "kind": kind, "event": event, "object": obj}
            self.subscribers.send({**message, "rv": resource_version})

    def messages(self) -> list[feedwire.Message]:
        """The whole DRA state, for a worker that connects."""
        if self.served is None:
            return []
        out: list[feedwire.Message] = [{"t": "dra-served", "served": self.served}]
        for kind in (*PATHS, TAINT_RULE):
            if self.synced(kind):
                out.extend(
                    feedwire.dra_list(
                        kind, self.objects(kind), resource_version=self.resource_version
                    )
                )
        return out


class NodeFeed:
    """The node reflector's handler: keeps the compact nodes and sends what changed."""

    def __init__(self, state: FeedState) -> None:
        self.state = state

    def parse(self, obj: Mapping[str, Any]) -> Node:
        return node_from_json(obj)

    def replace(self, items: list[Node], resource_version: str) -> None:
        state = self.state
        with state.subscribers.lock:
            state.nodes = {node.name: node for node in items}
            state.contact(resource_version)
            state.subscribers.send(*feedwire.node_list(items, resource_version=resource_version))
        state.conditions_changed.set()
        gc.freeze()  # as in LiveInventorySource: the nodes live until the next relist

    def apply(self, kind: str, item: Node, resource_version: str) -> None:
        state = self.state
        nodes = state.nodes
        if nodes is None:
            return
        with state.subscribers.lock:
            state.contact(resource_version)
            if kind == "DELETED":
                if nodes.pop(item.name, None) is not None:
                    message = {"t": "delete", "rv": resource_version, "name": item.name}
                    state.subscribers.send(message)
                    state.conditions_changed.set()
            elif nodes.get(item.name) != item:
                nodes[item.name] = item
                record = feedwire.node_record(item)
                state.subscribers.send({"t": "upsert", "rv": resource_version, "node": record})
                state.conditions_changed.set()

    def progress(self, resource_version: str) -> None:
        self.state.contact(resource_version)

    def failed(self, error: ApiError) -> None:
        self.state.node_error = str(error)


class NamespaceFeed:
    """The namespace reflector's handler: the labels, and what changed in them."""

    def __init__(self, state: FeedState) -> None:
        self.state = state
        self.cache = state.namespaces

    def parse(self, obj: Mapping[str, Any]) -> NamespaceItem:
        return self.cache.parse(obj)

    def replace(self, items: list[NamespaceItem], resource_version: str) -> None:
        with self.state.subscribers.lock:
            self.cache.replace(items, resource_version)
            self.state.subscribers.send({"t": "namespaces", "namespaces": self.cache.labels})

    def apply(self, kind: str, item: NamespaceItem, resource_version: str) -> None:
        name = item[0]
        with self.state.subscribers.lock:
            before = self.cache.labels.get(name)
            self.cache.apply(kind, item, resource_version)
            after = self.cache.labels.get(name)
            if after != before:  # a deletion makes ``after`` None
                self.state.subscribers.send({"t": "namespace", "name": name, "labels": after})

    def progress(self, resource_version: str) -> None:
        self.cache.progress(resource_version)

    def failed(self, error: ApiError) -> None:
        self.cache.failed(error)


class RuntimeClassFeed:
    """The RuntimeClass reflector's handler: the names, sent whole when they change (a
    cluster has a handful)."""

    def __init__(self, state: FeedState) -> None:
        self.state = state
        self.cache = state.runtime_classes

    def parse(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        return self.cache.parse(obj)

    def replace(self, items: list[tuple[str, str]], resource_version: str) -> None:
        with self.state.subscribers.lock:
            self.cache.replace(items, resource_version)
            self._send()

    def apply(self, kind: str, item: tuple[str, str], resource_version: str) -> None:
        with self.state.subscribers.lock:
            before = (self.cache.names, self.cache.nvidia)
            self.cache.apply(kind, item, resource_version)
            if (self.cache.names, self.cache.nvidia) != before:
                self._send()

    def _send(self) -> None:
        names = feedwire.names(self.cache.names)
        nvidia = sorted(self.cache.nvidia)
        self.state.subscribers.send({"t": "runtimeclasses", "names": names, "nvidia": nvidia})

    def progress(self, resource_version: str) -> None:
        self.cache.progress(resource_version)

    def failed(self, error: ApiError) -> None:
        self.cache.failed(error)


class ResourceQuotaFeed:
    """The ResourceQuota reflector's handler: the quotas, sent whole when one changes in
    what the checks read (hard, used, scopes)."""

    def __init__(self, state: FeedState) -> None:
        self.state = state
        self.cache = state.resource_quotas

    def parse(self, obj: Mapping[str, Any]) -> Quota:
        return self.cache.parse(obj)

    def replace(self, items: list[Quota], resource_version: str) -> None:
        with self.state.subscribers.lock:
            self.cache.replace(items, resource_version)
            self._send()

    def apply(self, kind: str, item: Quota, resource_version: str) -> None:
        with self.state.subscribers.lock:
            self.cache.apply(kind, item, resource_version)
            if self.cache.changed:
                self._send()

    def _send(self) -> None:
        records = feedwire.quota_records(self.cache.items())
        self.state.subscribers.send({"t": "resourcequotas", "quotas": records})

    def progress(self, resource_version: str) -> None:
        self.cache.progress(resource_version)

    def failed(self, error: ApiError) -> None:
        self.cache.failed(error)


class InventoryFeed:
    """List and watch, and serve the result on ``socket_path`` until stopped."""

    def __init__(
        self,
        *,
        api: ApiEndpoint,
        socket_path: str,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout_seconds: Callable[[], int] | None = None,
        status: StatusOptions | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.heartbeat_seconds = heartbeat_seconds
        self.subscribers = Subscribers()
        self.state = FeedState(subscribers=self.subscribers, clock=clock)
        self._watch = ClusterWatch(
            api=api,
            nodes=NodeFeed(self.state),
            namespaces=NamespaceFeed(self.state),
            devices=self.state.devices,
            runtime_classes=RuntimeClassFeed(self.state),
            pools=self.state.pools,
            resource_quotas=ResourceQuotaFeed(self.state),
            backoff=backoff,
            watch_timeout_seconds=watch_timeout_seconds,
            rule_objects=self.state.rule_objects,
        )
        self.state.relists = lambda: self._watch.relists
        self._stop = threading.Event()
        self._listener = _listen(socket_path)
        self._threads = [
            *self._watch.threads(self._stop),
            threading.Thread(target=self._accept_loop, name="feed-accept", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="feed-heartbeat", daemon=True),
        ]
        if status is not None:
            self._threads.append(self._status_keeper(status).thread(self._stop))
        if status is not None and status.match_conditions:
            self._threads.append(self._condition_keeper(status).thread(self._stop))

    def _status_keeper(self, options: StatusOptions) -> StatusKeeper:
        """The rule objects' status, written by the replica that holds its Lease."""
        client = self._watch.client
        keeper = StatusKeeper(
            client=client,
            cache=self.state.rule_objects,
            rules=lambda: RuleStore(options.rules, objects=self.state.rule_objects.objects),
            lease=status_lease(
                client, namespace=options.lease_namespace, identity=options.identity
            ),
            cluster=self.state.cluster_sight,
        )
        keeper.wake = self.state.rules_changed
        return keeper

    def _condition_keeper(self, options: StatusOptions) -> conditionsync.ConditionKeeper:
        """The webhooks' match conditions, synced by the replica that holds their Lease."""
        client = self._watch.client
        lease = Lease(
            client,
            namespace=options.lease_namespace,
            name=conditionsync.LEASE_NAME,
            identity=options.identity,
            duration_seconds=conditionsync.LEASE_SECONDS,
        )
        conditionsync.zero_results()
        sync = conditionsync.ConditionSync(
            client,
            lease=lease,
            name=options.match_conditions,
            on_result=conditionsync.count_result,
        )
        keeper = conditionsync.ConditionKeeper(
            sync=sync,
            rules=lambda: RuleStore(options.rules, objects=self.state.rule_objects.objects),
            view=self.state.settled_view,
            ready=lambda: self.state.rule_objects.objects() is not None,
        )
        keeper.wake = self.state.conditions_changed
        return keeper

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        self._stop.set()
        self._watch.close()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout_seconds)
        self.subscribers.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed by stop
            connection.settimeout(SEND_TIMEOUT_SECONDS)
            with self.subscribers.lock:
                self.subscribers.join(connection, self.state.greeting())

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            with self.subscribers.lock:
                self.subscribers.send({"t": "status", "status": self.state.status().to_json()})


@dataclass(frozen=True, slots=True)
class StatusOptions:
    """Where the rule files are (the objects are judged with them) and the Lease's place;
    ``match_conditions``: the webhook configurations' name whose conditions this replica
    keeps in sync while it holds their Lease (empty: no runtime sync)."""

    rules: str
    lease_namespace: str
    identity: str
    match_conditions: str = ""


def _listen(path: str) -> socket.socket:
    """A listening socket at ``path``, replacing one a crashed watcher left behind."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(0.2)
    return listener


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(jsonlog.JsonFormatter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m webhook.cluster.watcher")
    parser.add_argument("--socket", required=True, help="where workers connect")
    parser.add_argument("--kubeconfig", help="none: in-cluster configuration")
    parser.add_argument("--context", help="none: the kubeconfig's current-context")
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--parent", type=int, default=0, help="exit when this process is no longer our parent"
    )
    parser.add_argument("--nice", type=int, default=0, help="lower the CPU priority by this much")
    parser.add_argument("--rules", help="write the rule objects' status, judged with these files")
    parser.add_argument("--lease-namespace", default="gpu-webhook")
    parser.add_argument("--identity", default="", help="default: the pod's host name")
    parser.add_argument(
        "--sync-match-conditions",
        default="",
        metavar="NAME",
        help="keep the matchConditions of the webhook configurations NAME in sync (with --rules)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT, or until the parent (the gunicorn master) is gone.

    Exit codes avoid 3 and 4, which gunicorn reads as a worker's boot failure.
    """
    args = _arguments(argv)
    _configure_logging(args.log_level)
    if args.nice:
        os.nice(args.nice)
    try:
        api = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
    except KubeconfigError as exc:
        log.error("the cluster configuration is not usable: %s", exc)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    status = None
    if args.rules:
        identity = args.identity or os.environ.get("HOSTNAME") or os.uname().nodename
        status = StatusOptions(
            args.rules, args.lease_namespace, identity, args.sync_match_conditions
        )
    feed = InventoryFeed(api=api, socket_path=args.socket, status=status)
    feed.start()
    log.info("inventory watcher listening", extra={"socket": args.socket, "api": api.host})
    while not stop.wait(1.0):
        if args.parent and os.getppid() != args.parent:
            log.warning("the server that started the inventory watcher is gone; stopping")
            break
    feed.stop()
    log.info("inventory watcher stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
