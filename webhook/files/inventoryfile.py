"""A static inventory from what ``kubectl get nodes -o yaml`` (or ``-o json``) prints, and,
for DRA, what ``kubectl get deviceclasses,resourceslices,resourceclaims,
resourceclaimtemplates -A -o yaml`` prints, in the same file or in several documents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.devices import DeviceInventory, is_dra_object
from webhook.engine.inventory import Inventory, node_from_json
from webhook.files.manifests import ManifestError, load_manifests


class InventoryFileError(Exception):
    def __init__(self, errors: list[ManifestError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def load_inventory(path: str) -> Inventory:
    """Every ``Node`` in the file (a ``List``/``NodeList`` or Node documents)."""
    return load_inventory_file(path)[0]


def load_inventory_file(path: str) -> tuple[Inventory, DeviceInventory | None]:
    """The nodes of the file, and its DRA objects (``None`` when it holds none).

    Raises ``InventoryFileError`` when the file cannot be read or holds no Node, because a
    capacity check against an empty inventory would deny every GPU pod. DRA objects
    without a DeviceClass or ResourceSlice are kept as claims only (``complete`` false):
    without classes and slices a fit cannot be judged.
    """
    docs, errors = load_manifests([path])
    if errors:
        raise InventoryFileError(errors)
    nodes = [node_from_json(d.obj) for d in docs if d.obj.get("kind") == "Node"]
    if not nodes:
        raise InventoryFileError([ManifestError(path, "holds no Node objects")])
    dra: list[Mapping[str, Any]] = [d.obj for d in docs if is_dra_object(d.obj)]
    others = sorted(
        {
            str(d.obj.get("kind"))
            for d in docs
            if d.obj.get("kind") != "Node" and not is_dra_object(d.obj)
        }
    )
    if others:
        raise InventoryFileError(
            [
                ManifestError(
                    path,
                    f"holds objects that are neither Nodes nor DRA objects: {', '.join(others)}",
                )
            ]
        )
    devices = None
    if dra:
        complete = any(o.get("kind") in ("DeviceClass", "ResourceSlice") for o in dra)
        devices = DeviceInventory.of(dra, complete=complete)
    return Inventory(nodes, source=path), devices
