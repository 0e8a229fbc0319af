"""Where the admission server gets its node inventory: a file, or a live cache of the API.

A live source keeps the cluster's nodes (and, when rules need them, namespaces) in memory,
fed by list and watch the way Kubernetes informers are. Changes are coalesced: events land
in a dict of nodes, and a new immutable ``Inventory`` is published at most every
``publish_interval_seconds``. Publishing is a single reference assignment, so a request
that reads ``snapshot()`` once sees one consistent cluster, never a half-applied change.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.admission.inventory import InventorySource, InventoryStatus, StaticInventorySource
from webhook.cluster.apiclient import (
    ApiClient,
    ApiEndpoint,
    ApiError,
    KubeconfigError,
    api_endpoint_from_kubeconfig,
)
from webhook.cluster.reflector import Backoff, Handler, Reflector, T, let_requests_run
from webhook.cluster.sources.devicesource import DeviceCache, DeviceWatch
from webhook.cluster.sources.kindwatch import ReflectorSettings
from webhook.cluster.sources.poolsource import PoolCache, PoolWatch
from webhook.cluster.sources.rulesource import RuleObjectCache, RuleObjectWatch
from webhook.engine.demand.gpuaccess import nvidia_classes
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, Node, node_from_json
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.resources.quotas import Quota, Quotas, quota_from_json
from webhook.files.ruleobjects import RuleObject

__all__ = [
    "ApiEndpoint",
    "ApiError",
    "InventorySource",
    "InventoryStatus",
    "KubeconfigError",
    "LiveInventorySource",
    "StaticInventorySource",
    "api_endpoint_from_kubeconfig",
    "list_inventory",
]

log = logging.getLogger("webhook.inventory")
NODES_PATH = "/api/v1/nodes"
NAMESPACES_PATH = "/api/v1/namespaces"
RUNTIME_CLASSES_PATH = "/apis/node.k8s.io/v1/runtimeclasses"
RESOURCE_QUOTAS_PATH = "/api/v1/resourcequotas"


def list_inventory(api: ApiEndpoint, *, request_timeout_seconds: float = 30.0) -> Inventory:
    """One list of the nodes, parsed as the live cache parses them: for tools, not serving."""
    client = ApiClient(api, request_timeout_seconds=request_timeout_seconds)
    try:
        nodes, resource_version = client.list(NODES_PATH, parse=node_from_json)
    finally:
        client.close()
    return Inventory(nodes, resource_version=resource_version, source=api.host)


NamespaceItem = tuple[str, Mapping[str, str]]


class ClusterWatch:
    """The list-and-watch loops behind a cache: nodes, and namespaces and RuntimeClasses
    when handlers are given. Shared by the in-process live source and the pod's inventory
    watcher, which differ only in what they do with each event."""

    def __init__(
        self,
        *,
        api: ApiEndpoint,
        nodes: Handler[Node],
        namespaces: Handler[NamespaceItem] | None,
        devices: DeviceCache | None = None,
        runtime_classes: Handler[tuple[str, str]] | None = None,
        resource_quotas: Handler[Quota] | None = None,
        backoff: Callable[[], Backoff] = Backoff,
        page_size: int = 500,
        watch_timeout_seconds: Callable[[], int] | None = None,
        request_timeout_seconds: float = 30.0,
        pools: PoolCache | None = None,
        rule_objects: RuleObjectCache | None = None,
    ) -> None:
        self._client = ApiClient(api, request_timeout_seconds=request_timeout_seconds)
        settings = ReflectorSettings(
            backoff=backoff, page_size=page_size, watch_timeout_seconds=watch_timeout_seconds
        )
        # Rule objects (issue 33): GPUPolicy and the other rule kinds, where served.
        self._rule_objects = (
            None
            if rule_objects is None
            else RuleObjectWatch(client=self._client, cache=rule_objects, **settings)
        )
        # Autoscaler objects (issue 23): nodes that could exist.
        self._pools = (
            None if pools is None else PoolWatch(client=self._client, cache=pools, **settings)
        )

        def reflector(path: str, handler: Handler[T]) -> Reflector[T]:
            return Reflector(
                client=self._client,
                path=path,
                handler=handler,
                backoff=backoff(),
                page_size=page_size,
                watch_timeout_seconds=watch_timeout_seconds,
            )

        self._nodes = reflector(NODES_PATH, nodes)
        self._namespaces = None if namespaces is None else reflector(NAMESPACES_PATH, namespaces)
        self._devices = None
        if devices is not None:
            self._devices = DeviceWatch(
                client=self._client,
                handlers=devices.handler,
                on_served=devices.set_served,
                **settings,
            )
        self._runtime_classes = (
            None if runtime_classes is None else reflector(RUNTIME_CLASSES_PATH, runtime_classes)
        )
        self._resource_quotas = (
            None if resource_quotas is None else reflector(RESOURCE_QUOTAS_PATH, resource_quotas)
        )

    @property
    def relists(self) -> int:
        return self._nodes.relists

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        """The loops' threads, not started; they end once ``stop`` is set and ``close``
        has ended the open requests."""
        loops = [("inventory-nodes", self._nodes.run)]
        if self._namespaces is not None:
            loops.append(("inventory-namespaces", self._namespaces.run))
        if self._runtime_classes is not None:
            loops.append(("inventory-runtimeclasses", self._runtime_classes.run))
        if self._resource_quotas is not None:
            loops.append(("inventory-resourcequotas", self._resource_quotas.run))
        threads = [
            threading.Thread(target=run, args=(stop,), name=name, daemon=True)
            for name, run in loops
        ]
        if self._devices is not None:
            threads.append(self._devices.thread(stop))
        if self._pools is not None:
            threads.append(self._pools.thread(stop))
        if self._rule_objects is not None:
            threads.append(self._rule_objects.thread(stop))
        return threads

    @property
    def client(self) -> ApiClient:
        return self._client

    def close(self) -> None:
        self._client.close()


class SourceThreads:
    """A source's background threads: made and started once, together (a stopped source
    does not start again: make a new one), and joined on stop. ``started_at`` is set
    before any of them runs, so that they can tell how long the source has been up."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self.stop = threading.Event()
        self.started_at: float | None = None
        self._clock = clock
        self._threads: list[threading.Thread] = []

    def start(self, threads: Callable[[], list[threading.Thread]]) -> None:
        if self._threads or self.stop.is_set():
            return
        self._threads = threads()
        self.started_at = self._clock()
        for thread in self._threads:
            thread.start()

    def join(self, timeout_seconds: float) -> None:
        for thread in self._threads:
            thread.join(timeout_seconds)
        self._threads = []


class LiveInventorySource:
    """Nodes (and optionally namespaces) of a live cluster, kept by list and watch."""

    def __init__(
        self,
        *,
        api: ApiEndpoint,
        watch_namespaces: bool = False,
        max_staleness_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        publish_interval_seconds: float = 0.1,
        backoff: Callable[[], Backoff] = Backoff,
        page_size: int = 500,
        watch_timeout_seconds: Callable[[], int] | None = None,
        request_timeout_seconds: float = 30.0,
    ) -> None:
        self.api = api
        self.max_staleness_seconds = max_staleness_seconds
        self.publish_interval_seconds = publish_interval_seconds
        self._running = SourceThreads(clock=clock)
        self._nodes = NodeCache(clock=clock, publish_interval_seconds=publish_interval_seconds)
        self._namespaces = NamespaceCache(clock=clock) if watch_namespaces else None
        self._devices = DeviceCache()
        self._runtime_classes = RuntimeClassCache()
        self._pools = PoolCache()
        self._resource_quotas = ResourceQuotaCache()
        self._rule_objects = RuleObjectCache()
        self._watch = ClusterWatch(
            api=api,
            nodes=self._nodes,
            namespaces=self._namespaces,
            devices=self._devices,
            runtime_classes=self._runtime_classes,
            pools=self._pools,
            resource_quotas=self._resource_quotas,
            backoff=backoff,
            page_size=page_size,
            watch_timeout_seconds=watch_timeout_seconds,
            request_timeout_seconds=request_timeout_seconds,
            rule_objects=self._rule_objects,
        )

    def rule_objects(self) -> tuple[RuleObject, ...] | None:
        """GPUPolicy and the other rule objects; None until every served kind is listed."""
        return self._rule_objects.objects()

    def start(self) -> None:
        """Start the background threads; returns at once (see ``ready``). A source runs
        once: after ``stop`` make a new one."""
        stop = self._running.stop
        self._running.start(lambda: [*self._watch.threads(stop), self._nodes.publisher(stop)])

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stop watching and wait for the threads; the last snapshot stays readable."""
        self._running.stop.set()
        self._nodes.wake()
        self._watch.close()
        self._running.join(timeout_seconds)

    def snapshot(self) -> Inventory | None:
        return self._nodes.published

    def ready(self) -> bool:
        if self._nodes.published is None or not devices_settled(self._devices):
            return False
        if not self._pools.settled:
            return False
        return self._namespaces is None or self._namespaces.synced

    def devices(self) -> DeviceInventory | None:
        return self._devices.snapshot()

    def status(self) -> InventoryStatus:
        nodes = self._nodes
        namespaces = self._namespaces
        return nodes.status(
            last_contact=nodes.last_contact,
            started_at=self._running.started_at,
            max_staleness_seconds=self.max_staleness_seconds,
            last_error=nodes.last_error or (namespaces.last_error if namespaces else ""),
            source=self.api.host,
            relists=self._watch.relists,
            namespace_count=None if namespaces is None else len(namespaces.labels),
        )

    def stale_seconds(self) -> float | None:
        return self._nodes.stale_seconds(
            last_contact=self._nodes.last_contact,
            started_at=self._running.started_at,
            max_staleness_seconds=self.max_staleness_seconds,
        )

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        if self._namespaces is None:
            return None
        return self._namespaces.labels.get(name)

    def namespaces(self) -> Mapping[str, Mapping[str, str]] | None:
        """Every namespace, with its labels, once listed; None when not watched or not yet
        synced. Changed in place by the watch."""
        if self._namespaces is None or not self._namespaces.synced:
            return None
        return self._namespaces.labels

    def runtime_classes(self) -> frozenset[str] | None:
        return self._runtime_classes.names

    def nvidia_runtime_classes(self) -> frozenset[str]:
        return self._runtime_classes.nvidia

    def pools(self) -> PoolInventory | None:
        return self._pools.snapshot()

    def resource_quotas(self) -> Quotas | None:
        return self._resource_quotas.quotas


def devices_settled(cache: DeviceCache) -> bool:
    """Not known to be served (a cluster without DRA, or discovery not answered yet), or
    its four kinds have been listed: readiness waits for DRA only where it exists."""
    return cache.served is not True or cache.snapshot() is not None


class NodeCache:
    """Nodes by name, fed by a reflector or by the inventory feed; ``run_publisher`` turns
    them into snapshots."""

    def __init__(self, *, clock: Callable[[], float], publish_interval_seconds: float) -> None:
        self._clock = clock
        self._interval = publish_interval_seconds
        self._lock = threading.Lock()
        self._building = threading.Lock()
        self._last_event = 0.0
        self._last_build = 0.0
        self._changed = threading.Condition(self._lock)
        self._nodes: dict[str, Node] = {}
        # Names changed since the last build; None after a relist (build from scratch).
        self._changes: set[str] | None = None
        self._dirty = False
        self.resource_version = ""
        self.published: Inventory | None = None
        self.last_contact: float | None = None
        self.last_error = ""

    # Reflector side.

    def status(
        self,
        *,
        last_contact: float | None,
        started_at: float | None,
        max_staleness_seconds: float,
        last_error: str,
        source: str,
        relists: int,
        namespace_count: int | None,
    ) -> InventoryStatus:
        """The status of a live source built on this cache (in-process or fed by the pod's
        watcher): its age is the time since the API server was last heard from, or since
        start before the first contact (so that an age gauge always has a value)."""
        snapshot = self.published
        age = self._age(last_contact, started_at)
        return InventoryStatus(
            synced=snapshot is not None,
            stale=snapshot is not None and age is not None and age > max_staleness_seconds,
            age_seconds=age,
            resource_version=self.resource_version,
            node_count=0 if snapshot is None else len(snapshot),
            last_error=last_error,
            source=source,
            relists=relists,
            namespace_count=namespace_count,
        )

    def stale_seconds(
        self, *, last_contact: float | None, started_at: float | None, max_staleness_seconds: float
    ) -> float | None:
        """``status``'s verdict on staleness alone: asked on every review."""
        if self.published is None:
            return None
        age = self._age(last_contact, started_at)
        return age if age is not None and age > max_staleness_seconds else None

    def _age(self, last_contact: float | None, started_at: float | None) -> float | None:
        since = last_contact if last_contact is not None else started_at
        return None if since is None else max(0.0, self._clock() - since)

    def parse(self, obj: Mapping[str, Any]) -> Node:
        return node_from_json(obj)

    def replace(self, items: list[Node], resource_version: str) -> None:
        nodes = {node.name: node for node in items}
        with self._lock:
            self._nodes = nodes
            self._changes = None
            self._mark(resource_version)
        # Published at once from this thread: ``ready`` then means that a snapshot exists,
        # and a relist replaces the whole cluster without waiting.
        self.publish()
        # Nodes live until the next relist. Without this, each full collection walks every
        # label of 10,000 nodes (about 40 ms holding the interpreter, so admissions wait);
        # frozen objects are skipped. They are freed by reference counting as usual.
        gc.freeze()

    def apply(self, kind: str, item: Node, resource_version: str) -> None:
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(item.name, None)
            else:
                self._nodes[item.name] = item
            if self._changes is not None:
                self._changes.add(item.name)
            self._mark(resource_version)
        if time.monotonic() - self._last_build >= self._interval:
            self.publish()

    def progress(self, resource_version: str) -> None:
        with self._lock:
            self.resource_version = resource_version or self.resource_version
            self.last_contact = self._clock()
            self.last_error = ""

    def failed(self, error: ApiError) -> None:
        self.last_error = str(error)

    def _mark(self, resource_version: str) -> None:
        self.resource_version = resource_version
        self.last_contact = self._clock()
        self.last_error = ""
        self._dirty = True
        self._last_event = time.monotonic()
        self._changed.notify_all()

    # Publisher side.

    def publisher(self, stop: threading.Event) -> threading.Thread:
        """The thread that runs ``run_publisher`` until ``stop`` is set (not started)."""
        return threading.Thread(
            target=self.run_publisher, args=(stop,), name="inventory-publish", daemon=True
        )

    def run_publisher(self, stop: threading.Event) -> None:
        """Publish what a stream left unpublished once it has been quiet for an interval.

        While events flow, the thread that applies them publishes at most once per
        interval: one thread doing the CPU work of a burst instead of two leaves the
        interpreter lock free for requests more often.
        """
        interval = self._interval
        while not stop.is_set():
            if not self.wait_for_change(stop):
                return
            while (quiet := self.quiet_seconds()) < interval:
                if stop.wait(interval - quiet):
                    return
            try:
                self.publish()
            except Exception:  # keep publishing later changes; the next build may succeed
                log.exception("building an inventory snapshot failed")
                if stop.wait(1.0):
                    return

    def wait_for_change(self, stop: threading.Event) -> bool:
        with self._lock:
            while not self._dirty and not stop.is_set():
                self._changed.wait(1.0)
            return not stop.is_set()

    def quiet_seconds(self) -> float:
        return time.monotonic() - self._last_event

    def wake(self) -> None:
        with self._lock:
            self._changed.notify_all()

    def publish(self) -> None:
        """Build a snapshot of the nodes as they are now and publish it, unless another
        thread is building one (it will be followed by another build if more changed)."""
        if not self._building.acquire(blocking=False):
            return
        try:
            previous = self.published
            with self._lock:
                if not self._dirty:
                    return
                changes = (
                    {name: self._nodes.get(name) for name in self._changes}
                    if self._changes is not None and previous is not None
                    else None
                )
                nodes = list(self._nodes.values()) if changes is None else []
                resource_version = self.resource_version
                self._dirty = False
                self._changes = set()
            started = time.monotonic()
            if changes is not None and previous is not None:
                snapshot = previous.updated(
                    changes, resource_version=resource_version, pause=let_requests_run
                )
            else:
                snapshot = Inventory(nodes, resource_version=resource_version, source="live")
            if previous is not None:
                snapshot.prepare_like(previous)
            self.published = snapshot
            self._last_build = time.monotonic()
        finally:
            self._building.release()
        log.debug(
            "inventory published",
            extra={
                "nodes": len(snapshot),
                "shapes": len(snapshot.shapes),
                "incremental": changes is not None,
                "resource_version": resource_version,
                "build_seconds": round(time.monotonic() - started, 4),
            },
        )


class Bookkeeping:
    """What a small cache's reflector handler keeps besides its items: where the list or
    watch is, and its last error."""

    def __init__(self) -> None:
        self.resource_version = ""
        self.last_error = ""

    def progress(self, resource_version: str) -> None:
        self.resource_version = resource_version or self.resource_version
        self.last_error = ""

    def failed(self, error: ApiError) -> None:
        self.last_error = str(error)


class NamespaceCache(Bookkeeping):
    """Labels of every namespace, for rules that select namespaces by label."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock
        self.labels: dict[str, Mapping[str, str]] = {}
        self.synced = False

    def parse(self, obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        return str(meta.get("name", "")), (
            {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        )

    def replace(self, items: list[tuple[str, Mapping[str, str]]], resource_version: str) -> None:
        # A new dict, swapped in whole: readers never see a namespace missing mid-relist.
        self.labels = dict(items)
        self.resource_version = resource_version
        self.synced = True
        self.last_error = ""

    def apply(self, kind: str, item: tuple[str, Mapping[str, str]], resource_version: str) -> None:
        name, labels = item
        if kind == "DELETED":
            self.labels.pop(name, None)
        else:
            self.labels[name] = labels
        self.resource_version = resource_version


class RuntimeClassCache(Bookkeeping):
    """Names of the cluster's RuntimeClasses (``node.k8s.io/v1``), for the check that a pod's
    class exists. ``names`` is ``None`` until the first list: a class cannot be called
    unknown before then, nor while listing is forbidden (an older RBAC), which only logs."""

    def __init__(self) -> None:
        super().__init__()
        self.names: frozenset[str] | None = None
        # Those whose handler is NVIDIA's runtime (``gpuaccess.nvidia_classes``).
        self.nvidia: frozenset[str] = frozenset()
        self._handlers: dict[str, str] = {}

    def parse(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta["name"]), str(obj.get("handler", ""))

    def replace(self, items: list[tuple[str, str]], resource_version: str) -> None:
        self._set(dict(items))
        self.resource_version = resource_version
        self.last_error = ""

    def apply(self, kind: str, item: tuple[str, str], resource_version: str) -> None:
        handlers = dict(self._handlers)
        if kind == "DELETED":
            handlers.pop(item[0], None)
        else:
            handlers[item[0]] = item[1]
        self._set(handlers)
        self.resource_version = resource_version

    def _set(self, handlers: dict[str, str]) -> None:
        # Swapped in whole, as readers may be mid-request.
        self._handlers = handlers
        self.nvidia = nvidia_classes(handlers.items())
        self.names = frozenset(handlers)


class ResourceQuotaCache(Bookkeeping):
    """The cluster's ResourceQuotas (``v1``), for the gpuQuota check. ``quotas`` is ``None``
    until the first list (and while listing is forbidden, an older RBAC): no quota is
    judged before then. Rebuilt whole on each change, as readers may be mid-request;
    ``changed`` says whether an event changed what the checks read."""

    def __init__(self) -> None:
        super().__init__()
        self._by_key: dict[tuple[str, str], Quota] = {}
        self.quotas: Quotas | None = None
        self.changed = False  # whether the last event changed a quota

    def parse(self, obj: Mapping[str, Any]) -> Quota:
        return quota_from_json(obj)

    def replace(self, items: list[Quota], resource_version: str) -> None:
        self._by_key = {(q.namespace, q.name): q for q in items}
        self.quotas = Quotas.of(self._by_key.values())
        self.resource_version = resource_version
        self.last_error = ""

    def apply(self, kind: str, item: Quota, resource_version: str) -> None:
        key = (item.namespace, item.name)
        before = self._by_key.get(key)
        if kind == "DELETED":
            self._by_key.pop(key, None)
        else:
            self._by_key[key] = item
        self.resource_version = resource_version
        self.changed = before != (None if kind == "DELETED" else item)
        if self.changed or self.quotas is None:
            self.quotas = Quotas.of(self._by_key.values())

    def items(self) -> list[Quota]:
        return list(self._by_key.values())
