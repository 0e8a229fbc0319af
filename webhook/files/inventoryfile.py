"""A static inventory from what ``kubectl get nodes -o yaml`` (or ``-o json``) prints.

The same file (or several documents of it) may also hold, for DRA, what ``kubectl get
deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates -A -o yaml`` prints, and
the cluster's RuntimeClasses (``kubectl get runtimeclasses -o yaml``): then a pod naming a
class the cluster lacks is a finding, as with a live inventory.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import json
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from webhook.engine.demand.gpuaccess import nvidia_classes
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.resources.devices import DeviceInventory, forget_shared, is_dra_object
from webhook.engine.resources.inventory import Inventory, node_from_json
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.resources.quotas import Quotas, quota_from_json
from webhook.files.manifests import Document, ManifestError, decode, parse_text, read_bytes
from webhook.files.poolobjects import is_pool_object, pool_inventory

RUNTIME_CLASS = "RuntimeClass"
RESOURCE_QUOTA = "ResourceQuota"


class InventoryFileError(Exception):
    def __init__(self, errors: list[ManifestError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class InventoryFile:
    """What one inventory file says about a cluster."""

    nodes: Inventory
    # The file's DRA objects; None when it holds none.
    devices: DeviceInventory | None
    # The file's RuntimeClasses; None when it lists none, since a file of nodes only says
    # nothing about runtime classes.
    runtime_classes: frozenset[str] | None
    # The file's autoscaler objects; None when it holds none.
    pools: PoolInventory | None = None
    # The file's ResourceQuotas; None when it lists none (a file of nodes says nothing of
    # quotas).
    quotas: Quotas | None = None
    # Its RuntimeClasses whose handler is NVIDIA's runtime (``gpuaccess.nvidia_classes``).
    nvidia_runtime_classes: frozenset[str] = frozenset()

    def view(self) -> InventoryView:
        return InventoryView(
            self.nodes,
            devices=self.devices,
            runtime_classes=self.runtime_classes,
            pools=self.pools,
            quotas=self.quotas,
            nvidia_runtime_classes=self.nvidia_runtime_classes,
        )


def load_inventory(path: str) -> Inventory:
    """Every ``Node`` in the file (a ``List``/``NodeList`` or Node documents)."""
    return load_inventory_file(path).nodes


def load_inventory_file(path: str) -> InventoryFile:
    """The nodes of the file, its DRA objects and its RuntimeClasses.

    Raises ``InventoryFileError`` when the file cannot be read or holds no Node, because a
    capacity check against an empty inventory would deny every GPU pod. DRA objects
    without a DeviceClass or ResourceSlice are kept as claims only (``complete`` false):
    without classes and slices a fit cannot be judged.
    """
    # One file, read as one: a directory is refused, never walked for manifests.
    data, error = read_bytes(path)
    if data is None:
        raise InventoryFileError([error or ManifestError(path, "cannot be read")])
    return inventory_from_bytes(data, path)


# The last file loaded by this process, by its bytes: the server's master loads the file
# before it forks its workers, and a worker given the same bytes takes the master's copy
# (shared with it, page by page, until written) instead of parsing it again (issue 35: two
# workers and the master each held 25,600 parsed devices, and readiness waited for each
# parse).
_LOADED: dict[tuple[str, bytes], InventoryFile] = {}
# A file smaller than this is not copied after its parse: what a few survivors can keep of
# its allocator blocks is small, and the copy, the full collection and the trim cost
# ``check`` of one pod with the example inventory about a tenth of its run.
COMPACT_FROM = 64 << 10


def inventory_from_bytes(data: bytes, path: str) -> InventoryFile:
    """``load_inventory_file`` of bytes already read (and kept) from ``path``."""
    key = (path, hashlib.sha256(data).digest())
    known = _LOADED.get(key)
    if known is not None:
        return known
    text, error = decode(data, path)
    if text is None:
        raise InventoryFileError([error or ManifestError(path, "cannot be read")])
    loaded = (
        _compacted(text, path) if len(text) >= COMPACT_FROM else inventory_from_text(text, path)
    )
    _LOADED.clear()
    _LOADED[key] = loaded
    return loaded


def _compacted(text: str, path: str) -> InventoryFile:
    """The file's inventory, copied once the decoded file and the first parse are gone.

    What parsing keeps is made among the decoded file's objects, and a few survivors among
    freed ones keep whole blocks of the allocator in use (a 25,600-device file: 118 MiB
    kept for 12 MiB of devices). Serialised, the first parse is dropped before the copy
    is made, so the copy fills fresh blocks and the old ones are given back. Everything an
    inventory holds is plain immutable data."""
    data = pickle.dumps(inventory_from_text(text, path), protocol=pickle.HIGHEST_PROTOCOL)
    forget_shared()
    gc.collect()
    copy = cast(InventoryFile, pickle.loads(data))
    del data
    _give_back()
    return copy


def _give_back() -> None:
    """Hand the C allocator's free memory back to the system (glibc keeps what the YAML
    parser freed: 20 MiB of a 25,600-device file); elsewhere, nothing to do."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def inventory_from_text(text: str, path: str) -> InventoryFile:
    docs, errors = parse_text(text, path)
    if errors:
        raise InventoryFileError(errors)
    nodes_docs = [d for d in docs if d.obj.get("kind") == "Node"]
    bad = [problem for d in nodes_docs for problem in _quantity_problems(d, path)]
    if bad:
        raise InventoryFileError(bad)
    try:
        nodes = [node_from_json(d.obj) for d in nodes_docs]
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        message = f"holds a Node that cannot be read ({type(exc).__name__}: {str(exc)[:100]})"
        raise InventoryFileError([ManifestError(path, message)]) from None
    if not nodes:
        raise InventoryFileError([ManifestError(path, "holds no Node objects")])
    dra: list[Mapping[str, Any]] = [d.obj for d in docs if is_dra_object(d.obj)]
    others = sorted(
        {
            str(d.obj.get("kind"))
            for d in docs
            if d.obj.get("kind") not in ("Node", RUNTIME_CLASS, RESOURCE_QUOTA)
            and not is_dra_object(d.obj)
            and not is_pool_object(d.obj)
        }
    )
    if others:
        raise InventoryFileError(
            [
                ManifestError(
                    path,
                    "holds objects that are neither Nodes, RuntimeClasses, ResourceQuotas, DRA "
                    "objects nor autoscaler objects (NodePools, node classes, ComputeClasses, "
                    "the cluster-autoscaler-status ConfigMap): " + ", ".join(others),
                )
            ]
        )
    devices = None
    if dra:
        complete = any(o.get("kind") in ("DeviceClass", "ResourceSlice") for o in dra)
        devices = DeviceInventory.of(dra, complete=complete)
    classes = [
        (str((d.obj.get("metadata") or {}).get("name", "")), str(d.obj.get("handler", "")))
        for d in docs
        if d.obj.get("kind") == RUNTIME_CLASS
    ]
    names = {name for name, _ in classes}
    pool_docs = [d.obj for d in docs if is_pool_object(d.obj)]
    quotas = [quota_from_json(d.obj) for d in docs if d.obj.get("kind") == RESOURCE_QUOTA]
    return InventoryFile(
        Inventory(nodes, source=path),
        devices,
        frozenset(names) if names else None,
        pool_inventory(pool_docs) if pool_docs else None,
        Quotas.of(quotas) if quotas else None,
        nvidia_classes(classes),
    )


def _quantity_problems(doc: Document, path: str) -> Iterator[ManifestError]:
    """Resource amounts that are not quantities. The reader would drop them, and a node
    whose GPU count is "eight" would pass for a node without GPUs."""
    meta = doc.obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    status = doc.obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    for field in ("allocatable", "capacity"):
        amounts: Any = status.get(field)
        if not isinstance(amounts, Mapping):
            continue
        for resource, raw in amounts.items():
            if resource not in ("cpu", "memory") and "/" not in str(resource):
                continue
            try:
                parse_quantity(raw)
            except QuantityError:
                yield ManifestError(
                    path,
                    f'node {name or f"#{doc.index}"}: status.{field}["{resource}"] is '
                    f'{json.dumps(raw)}, not a quantity (kubectl prints numbers such as "8")',
                )
