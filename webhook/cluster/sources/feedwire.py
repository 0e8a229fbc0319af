"""The inventory feed's wire format: one orjson object per line, watcher to worker.

A worker that connects first gets ``state`` (everything it needs to answer admissions),
then only what changed, in the order the watcher saw it:

- ``state``: ``namespaces`` (name to labels; null before their first list),
  ``runtime_classes`` (names; null before their first list), ``status``. Once per
  connection, followed by a node list once the watcher has one.
- ``nodes``: ``rv``, ``lines``, then ``lines`` messages ``chunk`` with ``nodes`` (records,
  ``NODES_PER_LINE`` at most). The whole node list: on connect and after a relist.
- ``upsert``: ``rv``, ``node``. A node was added, or changed in what policy reads.
- ``delete``: ``rv``, ``name``. A node is gone.
- ``namespaces``: ``namespaces``. The namespaces were listed again.
- ``namespace``: ``name``, ``labels`` (null: deleted). One namespace changed.
- ``runtimeclasses``: ``names``, ``nvidia``. The RuntimeClasses' names, whole, whenever
  they change, and those whose handler is NVIDIA's runtime (``state`` carries both).
- ``resourcequotas``: ``quotas`` (records; null before their first list). The
  ResourceQuotas, whole, whenever one changes (``state`` carries them too).
- ``status``: ``status``. About once a second, so that staleness works as in one process.
- ``dra-served``: ``served``. Whether the API server serves ``resource.k8s.io/v1``.
- ``dra``: ``kind``, ``rv``, ``objects``, ``last``. A list of one DRA kind (trimmed objects,
  ``OBJECTS_PER_LINE`` at most per line); it replaces the kind once ``last`` is true.
- ``dra-event``: ``kind``, ``event`` (ADDED, MODIFIED, DELETED), ``object``, ``rv``.
- ``pools``: ``pools`` (``webhook.cluster.sources.poolsource.wire``): the autoscaler objects,
  whole, on connect and whenever they change (a cluster has a handful).
- ``rule-objects``: ``objects`` (``RuleObject.wire``): GPUPolicy and the other rule
  objects, whole, once every served kind is listed (on connect too) and whenever a
  document changes (a status write alone is no change).

A list comes in small lines because decoding one line holds a worker's interpreter lock:
10,000 nodes in one 27 MB line would stop its admissions for a third of a second.
A node record holds only what ``webhook.engine.resources.inventory.Node`` keeps, so a heartbeat
that changes nothing policy reads never reaches a worker. orjson never writes a raw
newline, so a line is a message.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from webhook.engine.resources.inventory import Node, Taint
from webhook.engine.resources.quotas import Quota, Quotas, Scope

Message = dict[str, Any]
# About 50 KB of JSON for realistic GPU nodes: well under a millisecond to decode.
NODES_PER_LINE = 20


@dataclass(frozen=True, slots=True)
class WatcherStatus:
    """How the watcher's list and watch are doing, as a worker reports it.

    ``since_contact_seconds``: since the API server last answered (a list, an accepted
    watch, an event or a bookmark); ``None`` before it ever did.
    """

    synced: bool = False
    namespaces_synced: bool = False
    resource_version: str = ""
    last_error: str = ""
    relists: int = 0
    since_contact_seconds: float | None = None

    def to_json(self) -> Message:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WatcherStatus:
        since = raw.get("since_contact_seconds")
        return cls(
            synced=bool(raw.get("synced")),
            namespaces_synced=bool(raw.get("namespaces_synced")),
            resource_version=str(raw.get("resource_version", "")),
            last_error=str(raw.get("last_error", "")),
            relists=int(raw.get("relists", 0)),
            since_contact_seconds=None if since is None else float(since),
        )


def node_record(node: Node) -> Message:
    return {
        "name": node.name,
        "labels": node.labels,
        "taints": [[t.key, t.value, t.effect] for t in node.taints],
        "unschedulable": node.unschedulable,
        "ready": node.ready,
        "allocatable": node.allocatable,
        "capacity": node.capacity,
    }


def node_from_record(record: Mapping[str, Any]) -> Node:
    """The watcher's record as the engine's ``Node``; strings interned as
    ``node_from_json`` interns them, so a worker's cache is as small as the watcher's."""
    intern = sys.intern
    return Node(
        name=record["name"],
        labels={intern(k): intern(v) for k, v in record["labels"].items()},
        taints=tuple(Taint(key, value, effect) for key, value, effect in record["taints"]),
        unschedulable=record["unschedulable"],
        ready=record["ready"],
        allocatable={intern(k): v for k, v in record["allocatable"].items()},
        capacity={intern(k): v for k, v in record["capacity"].items()},
    )


def node_list(nodes: Iterable[Node], *, resource_version: str) -> list[Message]:
    """The messages that replace a worker's nodes with ``nodes``."""
    records = [node_record(node) for node in nodes]
    chunks = [records[i : i + NODES_PER_LINE] for i in range(0, len(records), NODES_PER_LINE)]
    head: Message = {"t": "nodes", "rv": resource_version, "lines": len(chunks)}
    return [head, *({"t": "chunk", "nodes": chunk} for chunk in chunks)]


OBJECTS_PER_LINE = 50


def dra_list(
    kind: str, objects: list[Mapping[str, Any]], *, resource_version: str
) -> list[Message]:
    """The messages that replace a worker's objects of one DRA kind."""
    chunks = [objects[i : i + OBJECTS_PER_LINE] for i in range(0, len(objects), OBJECTS_PER_LINE)]
    chunks = chunks or [[]]
    return [
        {
            "t": "dra",
            "kind": kind,
            "rv": resource_version,
            "objects": chunk,
            "last": i == len(chunks) - 1,
        }
        for i, chunk in enumerate(chunks)
    ]


def names(found: frozenset[str] | None) -> list[str] | None:
    """A set of names on the wire: sorted, or null for "not known yet"."""
    return None if found is None else sorted(found)


def quota_records(quotas: Iterable[Quota] | None) -> list[dict[str, Any]] | None:
    """ResourceQuotas on the wire: what ``Quota`` keeps, or null for "not known yet"."""
    if quotas is None:
        return None
    return [
        {
            "ns": q.namespace,
            "name": q.name,
            "hard": q.hard,
            "used": q.used,
            "scopes": [[s.name, s.operator, list(s.values)] for s in q.scopes],
        }
        for q in quotas
    ]


def quotas_from_records(records: list[Mapping[str, Any]] | None) -> Quotas | None:
    if records is None:
        return None
    return Quotas.of(
        Quota(
            namespace=str(r["ns"]),
            name=str(r["name"]),
            hard={str(k): int(v) for k, v in r["hard"].items()},
            used={str(k): int(v) for k, v in r["used"].items()},
            scopes=tuple(Scope(str(n), str(op), tuple(map(str, v))) for n, op, v in r["scopes"]),
        )
        for r in records
    )


def encode(*messages: Message) -> bytes:
    return b"".join(orjson.dumps(message) + b"\n" for message in messages)


def decode(line: bytes) -> Message:
    message = orjson.loads(line)
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ValueError(f"not an inventory feed message: {line[:80]!r}")
    return message
