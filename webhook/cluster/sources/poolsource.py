"""Autoscaler objects of a live cluster: nodes that could exist, kept by list and watch.

Where the API serves them (asked once through discovery, as for DRA), Karpenter
``NodePool``s (``karpenter.sh/v1``), the node classes they name (``EC2NodeClass``, EKS
Auto Mode's ``NodeClass``, ``AKSNodeClass``) and GKE ``ComputeClass``es are listed and
watched like nodes. The cluster-autoscaler's status ConfigMap is one object in
kube-system: it is read every ``poll_seconds`` (the autoscaler rewrites it about every
10 s), which needs ``get`` on that one name, not a watch of every ConfigMap.

A collection that is served but may not be read (403) is no reason to deny: it becomes an
autoscaler of unknown size, and ``inventory`` says which RBAC rule is missing.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from webhook.cluster.apiclient import ApiClient, ApiError
from webhook.cluster.sources.kindwatch import (
    KindWatch,
    ReflectorSettings,
    list_readable,
    served_resources,
)
from webhook.engine.resources.nodepools import (
    CA_STATUS_NAME,
    CA_STATUS_NAMESPACE,
    Autoscaler,
    PoolInventory,
    cluster_autoscaler_groups,
)
from webhook.files.poolobjects import pool_inventory, status_of

log = logging.getLogger("webhook.inventory")
CA_STATUS_PATH = f"/api/v1/namespaces/{CA_STATUS_NAMESPACE}/configmaps/{CA_STATUS_NAME}"


@dataclass(frozen=True, slots=True)
class PoolKind:
    kind: str
    group_version: str
    resource: str
    node_class: bool = False

    @property
    def path(self) -> str:
        return f"/apis/{self.group_version}/{self.resource}"


KINDS = (
    PoolKind("NodePool", "karpenter.sh/v1", "nodepools"),
    PoolKind("NodeOverlay", "karpenter.sh/v1alpha1", "nodeoverlays"),
    PoolKind("EC2NodeClass", "karpenter.k8s.aws/v1", "ec2nodeclasses", node_class=True),
    PoolKind("NodeClass", "eks.amazonaws.com/v1", "nodeclasses", node_class=True),
    PoolKind("AKSNodeClass", "karpenter.azure.com/v1beta1", "aksnodeclasses", node_class=True),
    PoolKind("ComputeClass", "cloud.google.com/v1", "computeclasses"),
)


def trim(kind: PoolKind, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """What ``webhook.engine.resources.nodepools`` reads (list items carry no kind)."""
    meta = obj.get("metadata") or {}
    kept: dict[str, Any] = {
        "apiVersion": kind.group_version,
        "kind": kind.kind,
        "metadata": {"name": meta.get("name", "")},
    }
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else None
    if not kind.node_class:
        kept["spec"] = obj.get("spec") or {}
        if kind.kind == "NodePool" and status is not None and "resources" in status:
            kept["status"] = {"resources": status["resources"]}
    elif kind.kind == "EC2NodeClass" and status is not None:
        # The instance types its capacity reservations hold, for reserved-only pools.
        kept["status"] = {
            "capacityReservations": [
                {"instanceType": r.get("instanceType", ""), "state": r.get("state", "active")}
                for r in status.get("capacityReservations") or ()
                if isinstance(r, Mapping)
            ]
        }
    return kept


def wire(pools: PoolCacheState) -> dict[str, Any]:
    """The cache's state as plain JSON, for the inventory feed."""
    return {
        "settled": pools.settled,
        "objects": pools.objects,
        "status": pools.status,
        "unreadable": pools.unreadable,
        "node_classes_read": pools.node_classes_read,
    }


@dataclass(frozen=True, slots=True)
class PoolCacheState:
    settled: bool
    objects: list[Mapping[str, Any]]
    status: Mapping[str, Any] | None
    unreadable: list[str]
    node_classes_read: bool

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> PoolCacheState:
        return cls(
            settled=bool(raw.get("settled")),
            objects=list(raw.get("objects") or []),
            status=raw.get("status"),
            unreadable=[str(k) for k in raw.get("unreadable") or []],
            node_classes_read=bool(raw.get("node_classes_read")),
        )

    def inventory(self) -> PoolInventory:
        extra = [self.status] if self.status is not None else []
        found = pool_inventory([*self.objects, *extra], node_classes_read=self.node_classes_read)
        blind = tuple(
            Autoscaler(
                "Karpenter" if kind == "NodePool" else kind,
                kind,
                f"the API serves {kind} objects but the webhook may not list them (403): "
                "grant list and watch (deploy/base/rbac.yaml)",
            )
            for kind in self.unreadable
            if kind in ("NodePool", "NodeOverlay", "ComputeClass", "cluster-autoscaler-status")
        )
        return PoolInventory(
            pools=found.pools,
            autoscalers=found.autoscalers + blind,
            node_classes=found.node_classes,
            compute_classes=found.compute_classes,
        )


class PoolCache:
    """The autoscaler objects by kind and name; thread-safe, one snapshot per change.

    ``on_change``: called (outside the lock) after every change, e.g. to send the state
    on to workers."""

    def __init__(self, *, on_change: Callable[[PoolCache], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._served: dict[str, bool] | None = None
        self._synced: set[str] = set()
        self._unreadable: set[str] = set()
        self._status: Mapping[str, Any] | None = None
        self._groups: tuple[Autoscaler, ...] | None = None
        self._status_read = False
        self._snapshot: PoolInventory | None = None
        self._on_change = on_change
        self.last_error = ""

    # What the watch loop reports.

    def set_served(self, served: Mapping[str, bool]) -> None:
        with self._lock:
            self._served = dict(served)
        self._changed()

    def set_unreadable(self, kind: str) -> None:
        with self._lock:
            self._unreadable.add(kind)
            self._synced.add(kind)
        self._changed()

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        with self._lock:
            self._objects[kind] = {str(o["metadata"]["name"]): o for o in objects}
            self._synced.add(kind)
            self._unreadable.discard(kind)
        self._changed()

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        with self._lock:
            if event == "DELETED":
                self._objects.setdefault(kind, {}).pop(name, None)
            else:
                self._objects.setdefault(kind, {})[name] = obj
        self._changed()

    def set_status(self, configmap: Mapping[str, Any] | None, *, readable: bool = True) -> None:
        """The autoscaler rewrites its status (and its timestamps) every few seconds: only
        a change in the node groups the webhook reads is a change."""
        groups = None if configmap is None else cluster_autoscaler_groups(status_of(configmap))
        unreadable = "cluster-autoscaler-status"
        with self._lock:
            before = (self._groups, self._status_read, unreadable in self._unreadable)
            if self._groups != groups or configmap is None:
                self._status = configmap
            self._groups = groups
            self._status_read = True
            if readable:
                self._unreadable.discard(unreadable)
            else:
                self._unreadable.add(unreadable)
            after = (self._groups, True, unreadable in self._unreadable)
        if before != after:
            self._changed()

    def _changed(self) -> None:
        with self._lock:
            self._snapshot = None
        if self._on_change is not None:
            self._on_change(self)

    # What readers ask.

    @property
    def settled(self) -> bool:
        """Discovery answered, every served kind listed (or found unreadable), and the
        autoscaler status read once: until then a GPU pod could be denied for want of
        a pool not yet seen, so readiness waits for it."""
        with self._lock:
            return self.settled_locked()

    def state(self) -> PoolCacheState:
        with self._lock:
            served = self._served or {}
            node_classes_read = any(
                served.get(k.kind) and k.kind not in self._unreadable for k in KINDS if k.node_class
            )
            return PoolCacheState(
                settled=self.settled_locked(),
                objects=[o for objects in self._objects.values() for o in objects.values()],
                status=self._status,
                unreadable=sorted(self._unreadable),
                node_classes_read=bool(node_classes_read),
            )

    def settled_locked(self) -> bool:
        served = self._served
        if served is None or not self._status_read:
            return False
        return all(kind in self._synced for kind, on in served.items() if on)

    def snapshot(self) -> PoolInventory | None:
        """The objects as one ``PoolInventory``; None until settled."""
        snapshot = self._snapshot
        if snapshot is not None:
            return snapshot
        state = self.state()
        if not state.settled:
            return None
        snapshot = state.inventory()
        self._snapshot = snapshot
        return snapshot


class _KindHandler:
    """A reflector's handler for one autoscaler kind, feeding the cache."""

    def __init__(self, cache: PoolCache, kind: PoolKind) -> None:
        self.cache = cache
        self.kind = kind

    def parse(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return trim(self.kind, obj)

    def replace(self, items: list[Mapping[str, Any]], resource_version: str) -> None:  # noqa: ARG002
        self.cache.replace(self.kind.kind, items)

    def apply(self, kind: str, item: Mapping[str, Any], resource_version: str) -> None:  # noqa: ARG002
        self.cache.apply(self.kind.kind, kind, item)

    def progress(self, resource_version: str) -> None:
        """A bookmark: nothing changed."""

    def failed(self, error: ApiError) -> None:
        self.cache.last_error = str(error)


class PoolWatch(KindWatch):
    """Discovery, one list-and-watch loop per served kind, and the status poll, in
    threads that end with ``stop``."""

    def __init__(
        self,
        *,
        client: ApiClient,
        cache: PoolCache,
        poll_seconds: float = 30.0,
        **reflectors: Unpack[ReflectorSettings],
    ) -> None:
        super().__init__(client=client, **reflectors)
        self._cache = cache
        self.poll_seconds = poll_seconds

    def thread(self, stop: threading.Event) -> threading.Thread:
        return threading.Thread(target=self._run, args=(stop,), name="inventory-pools", daemon=True)

    def _run(self, stop: threading.Event) -> None:
        served = self.discover(stop, self.served, what="autoscaler")
        if served is None:
            return
        self._cache.set_served(served)
        found = [k for k, on in served.items() if on]
        log.info("autoscaler objects served: %s", ", ".join(found) or "none")
        threads = []
        for kind in KINDS:
            if not served[kind.kind]:
                continue
            if not self.readable(kind.path):
                log.warning("%s: served but not readable (403)", kind.path)
                self._cache.set_unreadable(kind.kind)
                continue
            handler = _KindHandler(self._cache, kind)
            name = f"inventory-{kind.resource}"
            threads.append(self.reflector_thread(kind.path, handler, name=name, stop=stop))
        for thread in threads:
            thread.start()
        backoff = self._backoff()
        while True:
            delay = self.poll_seconds if self.poll_status() else backoff.next()
            if stop.wait(delay):
                break
        for thread in threads:
            thread.join()

    def served(self) -> dict[str, bool]:
        """Which kinds the API serves (one discovery request per group version)."""
        return {
            kind.kind: kind.resource
            in served_resources(self._client, f"/apis/{kind.group_version}")
            for kind in KINDS
        }

    def poll_status(self) -> bool:
        """Read the status ConfigMap once; False when the API could not say."""
        try:
            configmap = self._client.get(CA_STATUS_PATH)
        except ApiError as exc:
            if exc.code == 404:
                self._cache.set_status(None)
            elif exc.code == 403:
                self._cache.set_status(None, readable=False)
            else:
                self._cache.last_error = str(exc)
                return False
            return True
        self._cache.set_status({**configmap, "apiVersion": "v1", "kind": "ConfigMap"})
        return True


def list_pools(client: ApiClient) -> PoolInventory:
    """One read of every autoscaler object, for tools (check, audit, explain, inventory)."""
    cache = PoolCache()
    watch = PoolWatch(client=client, cache=cache)
    served = watch.served()
    cache.set_served(served)
    for kind in KINDS:
        if not served[kind.kind]:
            continue
        items = list_readable(client, kind.path, parse=functools.partial(trim, kind))
        if items is None:
            cache.set_unreadable(kind.kind)
        else:
            cache.replace(kind.kind, items)
    watch.poll_status()
    snapshot = cache.snapshot()
    return snapshot if snapshot is not None else PoolInventory()
