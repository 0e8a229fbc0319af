"""Rule objects (GPUPolicy, GPUSettings, ... in ``gpu-webhook.io/v1alpha1``), kept by list
and watch where their CRDs are installed, and their status written back.

A cluster without the CRDs has no rule objects, which is the same as an empty list; a kind
that is served but may not be read (403) is logged and counts as empty: the files still
apply. Discovery is asked again every minute until all kinds are watched, so CRDs installed
after the server are picked up.

The status (``Ready`` and ``observedGeneration``) is written by one replica, the holder of
the ``gpu-webhook-policy-status`` Lease, through the status subresource: a PUT there takes
the object and keeps nothing but its status (apiextensions-apiserver
``pkg/apis/apiextensions/v1/types.go``, ``CustomResourceSubresourceStatus``).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiError
from webhook.cluster.lease import Lease
from webhook.cluster.sources.kindwatch import (
    KindWatch,
    ReflectorSettings,
    list_readable,
    served_resources,
)
from webhook.engine.evaluation.evaluate import policy_findings
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.policy.crds import GROUP, NAMES, VERSION
from webhook.engine.policy.ruleset import Policy, PolicyError
from webhook.files.rulefiles import RuleStore
from webhook.files.ruleobjects import Key, RuleObject, Verdict

log = logging.getLogger("webhook.rules")
GROUP_VERSION = f"{GROUP}/{VERSION}"
DISCOVERY_PATH = f"/apis/{GROUP_VERSION}"
STATUS_LEASE = "gpu-webhook-policy-status"
READY = "Ready"
STALLED = "Stalled"
# A GPUPolicy in force whose values the cluster has (True) or lacks (False, issue 42).
CLUSTER_MATCH = "ClusterMatch"
# How often the status writer compares the policies with the cluster when they did not
# change: the cluster's nodes, pools and RuntimeClasses do, and a full compare builds an
# inventory of every node.
VALUES_SECONDS = 60.0


def collection(kind: str) -> str:
    return f"{DISCOVERY_PATH}/{NAMES[kind].plural}"


def object_path(kind: str, name: str) -> str:
    return f"{collection(kind)}/{quote(name, safe='')}"


class RuleObjectCache:
    """The rule objects by kind and name, and the status each carries; thread-safe.

    ``on_change``: called (outside the lock) after every change in a document, e.g. to
    send the objects on to workers. A change in status alone is no change."""

    def __init__(self, *, on_change: Callable[[RuleObjectCache], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Key, RuleObject] = {}
        self._statuses: dict[Key, Mapping[str, Any]] = {}
        self._served: frozenset[str] | None = None
        self._synced: set[str] = set()
        self._on_change = on_change
        self.last_error = ""

    def set_served(self, kinds: Sequence[str]) -> None:
        with self._lock:
            self._served = frozenset(kinds)
        self._changed()

    def set_unreadable(self, kind: str) -> None:
        self.replace(kind, [])

    def replace(self, kind: str, items: Sequence[tuple[RuleObject, Mapping[str, Any]]]) -> None:
        with self._lock:
            for key in [k for k in self._objects if k[0] == kind]:
                del self._objects[key]
                self._statuses.pop(key, None)
            for obj, status in items:
                self._objects[obj.key] = obj
                self._statuses[obj.key] = status
            self._synced.add(kind)
        self._changed()

    def apply(self, event: str, obj: RuleObject, status: Mapping[str, Any]) -> None:
        with self._lock:
            before = self._objects.get(obj.key)
            if event == "DELETED":
                self._objects.pop(obj.key, None)
                self._statuses.pop(obj.key, None)
            else:
                self._objects[obj.key] = obj
                self._statuses[obj.key] = status
            changed = event == "DELETED" or before is None or before.body != obj.body
        if changed:
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    def objects(self) -> tuple[RuleObject, ...] | None:
        """Every object, once each served kind was listed; None until then."""
        with self._lock:
            served = self._served
            if served is None or not served <= self._synced:
                return None
            return tuple(sorted(self._objects.values(), key=lambda o: o.key))

    def current(self, key: Key) -> tuple[RuleObject, Mapping[str, Any]] | None:
        """The object as last seen, with its status."""
        with self._lock:
            obj = self._objects.get(key)
            return None if obj is None else (obj, self._statuses.get(key) or {})

    def written(self, sent: RuleObject, answer: Mapping[str, Any]) -> None:
        """The API server's answer to a status write of ``sent``: kept if the object is
        still the version that was written (a newer one seen by the watch meanwhile wins).

        Until the watch brings the write back, the status writer would otherwise judge
        the version it just wrote as still lacking its status and PUT it again with the
        old resourceVersion, which a real API server refuses with 409."""
        obj, status = _read(sent.kind, answer)
        with self._lock:
            seen = self._objects.get(sent.key)
            if seen is None or seen.resource_version != sent.resource_version:
                return
            self._objects[sent.key] = obj
            self._statuses[sent.key] = status


def _read(kind: str, raw: Mapping[str, Any]) -> tuple[RuleObject, Mapping[str, Any]]:
    status = raw.get("status")
    return RuleObject.of(raw, kind=kind), status if isinstance(status, Mapping) else {}


def _object_of(kind: str, raw: Mapping[str, Any]) -> RuleObject:
    return RuleObject.of(raw, kind=kind)


class _KindHandler:
    """A reflector's handler for one rule kind, feeding the cache."""

    def __init__(self, cache: RuleObjectCache, kind: str) -> None:
        self.cache = cache
        self.kind = kind

    def parse(self, obj: Mapping[str, Any]) -> tuple[RuleObject, Mapping[str, Any]]:
        return _read(self.kind, obj)

    def replace(
        self,
        items: list[tuple[RuleObject, Mapping[str, Any]]],
        resource_version: str,  # noqa: ARG002
    ) -> None:
        self.cache.replace(self.kind, items)

    def apply(
        self,
        kind: str,
        item: tuple[RuleObject, Mapping[str, Any]],
        resource_version: str,  # noqa: ARG002
    ) -> None:
        self.cache.apply(kind, *item)

    def progress(self, resource_version: str) -> None:
        """A bookmark: nothing changed."""

    def failed(self, error: ApiError) -> None:
        self.cache.last_error = str(error)


def served_kinds(client: ApiClient) -> list[str]:
    """The rule kinds whose CRDs are installed (empty when none is)."""
    names = served_resources(client, DISCOVERY_PATH)
    return [kind for kind, kind_names in NAMES.items() if kind_names.plural in names]


class RuleObjectWatch(KindWatch):
    """Discovery, then one list-and-watch loop per served kind, in threads that end with
    ``stop``. Discovery is asked again every ``rediscover_seconds`` while some kind is not
    watched: CRDs installed after the server (or read access granted later) are picked up
    without a restart."""

    log = log  # KindWatch logs discovery failures here, with the other rule-object lines

    def __init__(
        self,
        *,
        client: ApiClient,
        cache: RuleObjectCache,
        rediscover_seconds: float = 60.0,
        **reflectors: Unpack[ReflectorSettings],
    ) -> None:
        super().__init__(client=client, **reflectors)
        self._cache = cache
        self.rediscover_seconds = rediscover_seconds
        self._forbidden: set[str] = set()  # said once each

    def thread(self, stop: threading.Event) -> threading.Thread:
        return threading.Thread(target=self._run, args=(stop,), name="rule-objects", daemon=True)

    def _run(self, stop: threading.Event) -> None:
        watched: dict[str, threading.Thread] = {}
        served: list[str] | None = None
        while len(watched) < len(NAMES):
            kinds = self._discover(stop, watched=watched)
            if kinds is None:
                break
            if kinds != served:
                self._cache.set_served([*watched, *(k for k in kinds if k not in watched)])
                log.info("rule objects served: %s", ", ".join(kinds) or "none (no CRDs)")
                served = kinds
            for kind in kinds:
                if kind not in watched:
                    watched[kind] = self._watch(kind, stop)
            if stop.wait(self.rediscover_seconds):
                break
        for thread in watched.values():
            thread.join()

    def _watch(self, kind: str, stop: threading.Event) -> threading.Thread:
        handler = _KindHandler(self._cache, kind)
        name = f"rule-objects-{NAMES[kind].plural}"
        thread = self.reflector_thread(collection(kind), handler, name=name, stop=stop)
        thread.start()
        return thread

    def _discover(
        self, stop: threading.Event, *, watched: Mapping[str, object]
    ) -> list[str] | None:
        """The kinds served and readable now (those watched already are not probed
        again); None once stopped."""
        kinds = self.discover(
            stop, functools.partial(served_kinds, self._client), what="rule object"
        )
        if kinds is None:
            return None
        return [kind for kind in kinds if kind in watched or self._readable(kind)]

    def _readable(self, kind: str) -> bool:
        if self.readable(collection(kind)):
            return True
        if kind not in self._forbidden:
            log.warning(
                "%s: served but not readable (403): grant list and watch "
                "(deploy/base/rbac.yaml); only the rule files apply",
                collection(kind),
            )
        self._forbidden.add(kind)
        return False


def list_rule_objects(client: ApiClient) -> tuple[RuleObject, ...]:
    """One read of every rule object, for tools (check, audit, explain)."""
    found: list[RuleObject] = []
    for kind in served_kinds(client):
        items = list_readable(client, collection(kind), parse=functools.partial(_object_of, kind))
        if items is None:
            log.warning("%s: not readable (403); only the rule files apply", collection(kind))
        else:
            found.extend(items)
    return tuple(found)


# --- status ---------------------------------------------------------------------------------


def desired_status(
    obj: RuleObject,
    verdict: Verdict,
    current: Mapping[str, Any],
    *,
    now: dt.datetime,
    kept: RuleObject | None = None,
    unmet: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The status an object should carry; the transition time moves only when Ready does.
    ``unmet``: what ``policy_findings`` says of the object's values on this cluster (None:
    not compared, and no ``ClusterMatch`` condition)."""
    ready = "True" if verdict.ready else "False"
    before = next(
        (
            c
            for c in current.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == READY
        ),
        None,
    )
    since = before.get("lastTransitionTime") if before and before.get("status") == ready else None
    condition = {
        "type": READY,
        "status": ready,
        "reason": "InForce" if verdict.ready else "Invalid",
        "message": verdict.message,
        "observedGeneration": verdict.generation,
        "lastTransitionTime": since or now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    conditions = [condition]
    if not verdict.ready:
        # kstatus' own condition (sigs.k8s.io/cli-utils pkg/kstatus/status/generic.go,
        # checkGenericProperties): Flux's wait and kubectl-style tools read a custom
        # resource with Stalled True as failed; they do not read Ready.
        conditions.append({**condition, "type": STALLED, "status": "True"})
    if unmet is not None and verdict.ready and obj.kind == "GPUPolicy":
        conditions.append(_cluster_condition(unmet, current, verdict.generation, now=now))
    status: dict[str, Any] = {"observedGeneration": verdict.generation, "conditions": conditions}
    if kept is not None and verdict.kept_generation == kept.generation:
        # So that a restarted server keeps the same version in force (the API server
        # stores only the broken one).
        status["inForce"] = {"generation": kept.generation, "spec": kept.body.get("spec") or {}}
    if obj.kind == "GPUPolicy":
        checks = [
            name
            for entry in (obj.body.get("spec") or {}).get("validate") or []
            if isinstance(entry, Mapping)
            for name in entry
            if name not in ("action", "message")
        ]
        status["checks"] = ",".join(checks)
    return status


def _cluster_condition(
    unmet: Sequence[str], current: Mapping[str, Any], generation: int, *, now: dt.datetime
) -> dict[str, Any]:
    """``ClusterMatch``: False with the lines ``rules lint`` and ``serve`` print when a value
    of the policy matches nothing the cluster has (issue 42), else True."""
    state = "False" if unmet else "True"
    before = next(
        (
            c
            for c in current.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == CLUSTER_MATCH
        ),
        None,
    )
    since = before.get("lastTransitionTime") if before and before.get("status") == state else None
    return {
        "type": CLUSTER_MATCH,
        "status": state,
        "reason": "UnmetValues" if unmet else "ValuesMet",
        # The API server keeps a condition message to 32768 characters.
        "message": "; ".join(unmet)[:4000] if unmet else "every value matches the cluster",
        "observedGeneration": generation,
        "lastTransitionTime": since or now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return dict(a) == dict(b)


class StatusWriter:
    """Writes each object's status when it differs from its verdict (one PUT per object
    that changed; a 409 means a newer version arrives by the watch, judged then).

    Every PUT carries the resourceVersion last seen, so that the API server refuses it
    (409 Conflict) when the object changed since; the answer (the stored object, with its
    new resourceVersion) is kept as the object seen, so that the next step does not write
    the same status again before the watch brings it back."""

    def __init__(
        self,
        client: ApiClient,
        cache: RuleObjectCache,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.client = client
        self.cache = cache
        self.clock = clock
        self.written = 0

    def write(
        self,
        verdicts: Mapping[Key, Verdict],
        in_force: Mapping[Key, RuleObject] | None = None,
        unmet: Mapping[Key, Sequence[str]] | None = None,
    ) -> None:
        for key, verdict in verdicts.items():
            seen = self.cache.current(key)
            if seen is None:
                continue
            obj, current = seen
            if obj.generation != verdict.generation:
                continue  # judged an older version: the newer one is judged next
            kept = (in_force or {}).get(key)
            status = desired_status(
                obj,
                verdict,
                current,
                now=self.clock(),
                kept=kept,
                unmet=None if unmet is None else unmet.get(key, ()),
            )
            if _same(status, current):
                continue
            self._put(obj, status)

    def _put(self, obj: RuleObject, status: Mapping[str, Any]) -> None:
        body = {
            **obj.body,
            "metadata": {"name": obj.name, "resourceVersion": obj.resource_version},
            "status": status,
        }
        try:
            answer = self.client.send("PUT", f"{object_path(obj.kind, obj.name)}/status", body)
        except ApiError as exc:
            if exc.code not in (404, 409):  # deleted meanwhile, or changed meanwhile
                log.warning("cannot write the status of %s %s: %s", obj.kind, obj.name, exc)
            return
        self.written += 1
        if isinstance(answer.get("metadata"), Mapping):
            self.cache.written(obj, answer)
        if status["conditions"][0]["status"] != "True":
            log.error(
                "rule object %s %s is not in force: %s",
                obj.kind,
                obj.name,
                status["conditions"][0]["message"],
                extra={"kind": obj.kind, "object_name": obj.name},
            )


class StatusKeeper:
    """The loop behind the status: hold the Lease, merge the rules when they changed, and
    write what the verdicts say. Wakes on every change of the objects, else every tick.

    The store is made at the first step, not before: rule files broken when the watcher
    starts must not stop it (it feeds the workers' inventory); the statuses wait for the
    files to be fixed, as the workers keep their last good rules meanwhile."""

    def __init__(
        self,
        *,
        client: ApiClient,
        cache: RuleObjectCache,
        rules: Callable[[], RuleStore],
        lease: Lease,
        tick_seconds: float = 2.0,
        cluster: Callable[[], ClusterSight | None] | None = None,
    ) -> None:
        self.cache = cache
        # What the watcher sees of the cluster, to compare the policies' values with.
        self._cluster = cluster
        self._unmet: tuple[int, float, Mapping[Key, Sequence[str]]] | None = None
        self._make_store = rules
        self.rules: RuleStore | None = None
        self._unusable = ""
        self.lease = lease
        self.tick_seconds = tick_seconds
        self.writer = StatusWriter(client, cache)
        self.wake = threading.Event()
        self._holding = False
        self._renewed = 0.0

    def thread(self, stop: threading.Event) -> threading.Thread:
        return threading.Thread(target=self._run, args=(stop,), name="rule-status", daemon=True)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            now = time.monotonic()
            if not self._holding or now - self._renewed > self.lease.duration_seconds / 3:
                self._holding = self.lease.try_hold()
                self._renewed = now
            if self._holding:
                self.step()
            self.wake.wait(self.tick_seconds)
            self.wake.clear()
        if self._holding:
            self.lease.release()

    def step(self) -> None:
        if self.cache.objects() is None:
            return
        store = self.rules
        if store is None:
            try:
                store = self.rules = self._make_store()
            except PolicyError as exc:
                if str(exc) != self._unusable:
                    log.error("rule files unusable; rule object statuses wait for them: %s", exc)
                self._unusable = str(exc)
                return
        changed = store.reload_if_changed()
        if changed is False and store.last_error is not None:
            log.warning("rule files are broken; rule objects are judged against the last good")
        self.writer.write(store.merged.verdicts, store.merged.in_force, self._values(store))

    def _values(self, store: RuleStore) -> Mapping[Key, Sequence[str]] | None:
        """Per policy object, what ``policy_findings`` says of its values: when the rules
        change, else every ``VALUES_SECONDS``; None while the cluster cannot be seen."""
        if self._cluster is None:
            return None
        now, generation = time.monotonic(), store.current.generation
        known = self._unmet
        if known is not None and known[0] == generation and now - known[1] < VALUES_SECONDS:
            return known[2]
        sight = self._cluster()
        if sight is None:
            return None  # asked again at the next step: the nodes may be listed by then
        found = object_findings(store.current.policy, sight)
        self._unmet = (generation, now, found)
        return found


def object_findings(policy: Policy, sight: ClusterSight) -> dict[Key, list[str]]:
    """Per policy object, the lines ``policy_findings`` gives of its values (rule files'
    values are the log's and lint's): what its ``ClusterMatch`` condition says."""
    found: dict[Key, list[str]] = {}
    for unmet in policy_findings(policy, sight.view, namespaces=sight.namespaces):
        ref = unmet.document
        if ref is not None and ref.index < 0:  # an object's, not a file's
            found.setdefault((ref.kind, ref.name), []).append(unmet.core)
    return found


@dataclass(frozen=True, slots=True)
class ClusterSight:
    """The cluster as the status writer may compare policies with it."""

    view: InventoryView
    namespaces: frozenset[str] | None = None


def status_lease(client: ApiClient, *, namespace: str, identity: str) -> Lease:
    """Short: a replica that dies leaves statuses unwritten for half a minute at most."""
    return Lease(
        client, namespace=namespace, name=STATUS_LEASE, identity=identity, duration_seconds=30
    )
