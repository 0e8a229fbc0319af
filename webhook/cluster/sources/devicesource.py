"""DRA objects of a live cluster (``resource.k8s.io/v1``), kept by list and watch.

Device classes, resource slices, claims and claim templates are listed and watched like
nodes, when the API server serves ``resource.k8s.io/v1`` (asked once through discovery; a
cluster without DRA costs one request). Objects are trimmed to what policy reads and
parsed as they arrive (in the reflector's thread, once per object); ``DeviceCache.snapshot``
builds one immutable ``DeviceInventory`` per change, on first use after it, so a burst of
slice updates costs one build, and a build costs what the slices number (about 15 ms for
10,000 slices of 8 GPUs: ``bench/dra.py``), not a parse of every device.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Unpack

import orjson

from webhook.cluster.apiclient import ApiClient, ApiError
from webhook.cluster.reflector import Handler, Reflector
from webhook.cluster.sources.kindwatch import KindWatch, ReflectorSettings
from webhook.engine.resources.devices import (
    KINDS,
    TAINT_RULE,
    DeviceInventory,
    claim_from_json,
    class_from_json,
    slice_from_json,
    taint_rule_from_json,
)

log = logging.getLogger("webhook.inventory")
GROUP_VERSION_PATH = "/apis/resource.k8s.io/v1"
PATHS = {
    "DeviceClass": f"{GROUP_VERSION_PATH}/deviceclasses",
    "ResourceSlice": f"{GROUP_VERSION_PATH}/resourceslices",
    "ResourceClaim": f"{GROUP_VERSION_PATH}/resourceclaims",
    "ResourceClaimTemplate": f"{GROUP_VERSION_PATH}/resourceclaimtemplates",
}
# DeviceTaintRule: resource.k8s.io/v1beta2 in 1.36 (DRADeviceTaintRules, off by default),
# v1alpha3 before; read where one of them is served, newest first.
TAINT_RULE_VERSIONS = ("/apis/resource.k8s.io/v1beta2", "/apis/resource.k8s.io/v1alpha3")
TAINT_RULE_RESOURCE = "devicetaintrules"
Key = tuple[str, str]
Item = tuple[Key, Mapping[str, Any]]
CACHED = (*KINDS, TAINT_RULE)


def taint_rule_path(client: ApiClient) -> str | None:
    """Where the API server serves DeviceTaintRules, if anywhere (one discovery request
    per version)."""
    for version in TAINT_RULE_VERSIONS:
        try:
            body = client.get(version)
        except ApiError as exc:
            if exc.code in (403, 404):
                continue
            raise
        names = {str(r.get("name")) for r in body.get("resources") or [] if isinstance(r, Mapping)}
        if TAINT_RULE_RESOURCE in names:
            return f"{version}/{TAINT_RULE_RESOURCE}"
    return None


def _listed(client: ApiClient, path: str, kind: str, page_size: int) -> list[Mapping[str, Any]]:
    def parse(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return trim(kind, obj)

    items, _ = client.list(path, parse=parse, limit=page_size)
    return items


def read_devices(
    client: ApiClient, *, page_size: int = 500
) -> tuple[DeviceInventory | None, list[str]]:
    """One read of the DRA objects (``check``, ``explain`` and ``audit`` against a cluster):
    the snapshot the server's watch would hold, or None when the cluster serves no
    ``resource.k8s.io/v1``; and a notice per collection that could not be read (403): the
    claims are then not checked, never judged against half the devices."""
    if not client.serves(GROUP_VERSION_PATH):
        return None, []
    objects: list[Mapping[str, Any]] = []
    for kind, path in PATHS.items():
        try:
            objects.extend(_listed(client, path, kind, page_size))
        except ApiError as exc:
            if exc.code != 403:
                raise
            name = path.rsplit("/", 1)[-1]
            return None, [f"cannot list {name}, so DRA claims are not checked: {exc}"]
    notices: list[str] = []
    rules_path = taint_rule_path(client)
    if rules_path is not None:
        try:
            objects.extend(_listed(client, rules_path, TAINT_RULE, page_size))
        except ApiError as exc:
            if exc.code != 403:
                raise
            notices.append(f"cannot list devicetaintrules, so their taints are not seen: {exc}")
    return DeviceInventory.of(objects), notices


def trim(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """What ``webhook.engine.resources.devices`` reads of an object (list items carry no kind)."""
    meta = obj.get("metadata") or {}
    kept: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
        "spec": obj.get("spec") or {},
    }
    allocation = (obj.get("status") or {}).get("allocation") if kind == "ResourceClaim" else None
    if isinstance(allocation, Mapping):
        kept["status"] = {"allocation": {"nodeSelector": allocation.get("nodeSelector")}}
    return kept


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


PARSERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    TAINT_RULE: taint_rule_from_json,
    "DeviceClass": class_from_json,
    "ResourceSlice": slice_from_json,
    "ResourceClaim": claim_from_json,
    "ResourceClaimTemplate": claim_from_json,
}


def _encoded(obj: Mapping[str, Any]) -> orjson.Fragment:
    """An object as the JSON the feed sends: the watcher keeps what it passes on as bytes
    (issue 35: as dicts, 25,600 devices held about 3 KB each in the watcher)."""
    return orjson.Fragment(orjson.dumps(obj))


class DeviceCache:
    """The four collections by key; thread-safe, one snapshot per change.

    ``parse``: keep the engine's parsed objects (a source that answers admissions), or
    only the trimmed JSON (the watcher, which passes objects on to workers)."""

    def __init__(self, *, parse: bool = True) -> None:
        self._parse = parse
        self._lock = threading.Lock()
        # DeviceTaintRules beside the four kinds: optional, where the cluster serves them.
        self._objects: dict[str, dict[Key, orjson.Fragment]] = {k: {} for k in CACHED}
        self._parsed: dict[str, dict[Key, Any]] = {k: {} for k in CACHED}
        self._synced: set[str] = set()
        self._snapshot: DeviceInventory | None = None
        self._dirty = True
        # Classes or slices changed since the last snapshot (not only claims).
        self._devices_dirty = True
        self.served: bool | None = None  # None: not known yet
        self.resource_version = ""
        self.last_error = ""

    def set_served(self, served: bool) -> None:
        self.served = served

    def handler(self, kind: str) -> Handler[Item]:
        return _KindHandler(self, kind)

    def parsed(self, kind: str, obj: Mapping[str, Any]) -> tuple[Key, Any]:
        """One object of a list as ``replace_parsed`` takes it: a worker parses each line of
        a list as it comes, so the decoded line is freed before the next (issue 35: a whole
        list of 25,600 devices held as decoded JSON until its last line left 102 MiB)."""
        return key_of(obj), PARSERS[kind](obj)

    def replace_parsed(
        self, kind: str, items: list[tuple[Key, Any]], resource_version: str
    ) -> None:
        """``replace`` of objects already ``parsed`` (a cache that parses)."""
        with self._lock:
            self._objects[kind] = {}
            self._parsed[kind] = dict(items)
            self._synced.add(kind)
            self._changed(kind, resource_version)

    def replace(self, kind: str, objects: list[Mapping[str, Any]], resource_version: str) -> None:
        parse = PARSERS[kind]
        parsed = {key_of(o): parse(o) for o in objects} if self._parse else {}
        kept: dict[Key, orjson.Fragment] = (
            {} if self._parse else {key_of(o): _encoded(o) for o in objects}
        )
        with self._lock:
            self._objects[kind] = kept
            self._parsed[kind] = parsed
            self._synced.add(kind)
            self._changed(kind, resource_version)

    def apply(self, kind: str, event: str, obj: Mapping[str, Any], resource_version: str) -> None:
        key = key_of(obj)
        parsed = PARSERS[kind](obj) if self._parse and event != "DELETED" else None
        with self._lock:
            if event == "DELETED":
                self._objects[kind].pop(key, None)
                self._parsed[kind].pop(key, None)
            elif self._parse:
                self._parsed[kind][key] = parsed
            else:
                self._objects[kind][key] = _encoded(obj)
            self._changed(kind, resource_version)

    def objects(self, kind: str) -> list[Any]:
        """The trimmed objects of a cache that does not parse (the watcher's), each as its
        encoded JSON (``orjson.Fragment``), which ``feedwire.encode`` writes as it is."""
        with self._lock:
            return list(self._objects[kind].values())

    def synced(self, kind: str) -> bool:
        return kind in self._synced

    def _changed(self, kind: str, resource_version: str) -> None:
        self._dirty = True
        if kind in ("DeviceClass", "ResourceSlice", TAINT_RULE):
            self._devices_dirty = True
        self.resource_version = resource_version or self.resource_version
        self.last_error = ""

    def snapshot(self) -> DeviceInventory | None:
        """The DRA objects as one snapshot; None until all four kinds were listed, or when
        the cluster serves no DRA API."""
        if not self.served or not set(KINDS) <= self._synced:
            return None
        if not self._dirty and self._snapshot is not None:
            return self._snapshot
        with self._lock:
            if self._dirty or self._snapshot is None:
                parsed = self._parsed
                claims = {(c.namespace, c.name): c for c in parsed["ResourceClaim"].values()}
                templates = {
                    (c.namespace, c.name): c for c in parsed["ResourceClaimTemplate"].values()
                }
                previous = self._snapshot
                if previous is not None and not self._devices_dirty:
                    # Only claims changed (a pod made from a template): keep the devices'
                    # index and answers.
                    snapshot = previous.with_claim_objects(
                        claims, templates, resource_version=self.resource_version
                    )
                else:
                    snapshot = DeviceInventory(
                        {c.name: c for c in parsed["DeviceClass"].values()},
                        list(parsed["ResourceSlice"].values()),
                        claims,
                        templates,
                        resource_version=self.resource_version,
                        # Not listed yet, or not served: fewer taints only means more
                        # capacity, never a denial.
                        taint_rules=list(parsed[TAINT_RULE].values()),
                    )
                self._snapshot = snapshot
                self._dirty = self._devices_dirty = False
            return self._snapshot


class _KindHandler:
    """A reflector's handler for one kind, feeding the cache."""

    def __init__(self, cache: DeviceCache, kind: str) -> None:
        self.cache = cache
        self.kind = kind

    def parse(self, obj: Mapping[str, Any]) -> Item:
        kept = trim(self.kind, obj)
        return key_of(kept), kept

    def replace(self, items: list[Item], resource_version: str) -> None:
        self.cache.replace(self.kind, [o for _, o in items], resource_version)

    def apply(self, kind: str, item: Item, resource_version: str) -> None:
        self.cache.apply(self.kind, kind, item[1], resource_version)

    def progress(self, resource_version: str) -> None:
        """A bookmark: nothing changed."""

    def failed(self, error: ApiError) -> None:
        self.cache.last_error = str(error)


class DeviceWatch(KindWatch):
    """Discovery, then one list-and-watch loop per kind, in threads that end with ``stop``."""

    def __init__(
        self,
        *,
        client: ApiClient,
        handlers: Callable[[str], Handler[Item]],
        on_served: Callable[[bool], None],
        **reflectors: Unpack[ReflectorSettings],
    ) -> None:
        super().__init__(client=client, **reflectors)
        self._on_served = on_served
        self._handlers = handlers
        self._reflectors = {
            kind: self.reflector(path, handlers(kind)) for kind, path in PATHS.items()
        }

    def thread(self, stop: threading.Event) -> threading.Thread:
        return threading.Thread(target=self._run, args=(stop,), name="inventory-dra", daemon=True)

    def _run(self, stop: threading.Event) -> None:
        backoff = self._backoff()
        while not stop.is_set():
            try:
                served = self._client.serves(GROUP_VERSION_PATH)
                break
            except ApiError as exc:
                if stop.is_set():
                    return
                delay = backoff.next()
                log.warning("DRA discovery failed, retrying in %.1f s: %s", delay, exc)
                for reflector in self._reflectors.values():  # none of them can start
                    reflector.metrics.failed()
                if stop.wait(delay):
                    return
        else:
            return
        self._on_served(served)
        if not served:
            log.info("the API server serves no resource.k8s.io/v1: DRA claims are not checked")
            return
        reflectors = dict(self._reflectors)
        rules = self._taint_rules()
        if rules is not None:
            reflectors[TAINT_RULE] = rules
        threads = [
            threading.Thread(target=r.run, args=(stop,), name=f"inventory-{kind}", daemon=True)
            for kind, r in reflectors.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _taint_rules(self) -> Reflector[Item] | None:
        """A reflector for DeviceTaintRules where the API server serves them; none when it
        does not, or discovery fails (devices are then judged without rule taints)."""
        try:
            path = taint_rule_path(self._client)
        except ApiError as exc:
            log.warning("DeviceTaintRule discovery failed; their taints are not seen: %s", exc)
            return None
        if path is None:
            return None
        return self.reflector(path, self._handlers(TAINT_RULE))
