"""A static inventory from what ``kubectl get nodes -o yaml`` (or ``-o json``) prints.

The same file (or several documents of it) may also hold, for DRA, what ``kubectl get
deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates -A -o yaml`` prints, and
the cluster's RuntimeClasses (``kubectl get runtimeclasses -o yaml``): then a pod naming a
class the cluster lacks is a finding, as with a live inventory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.devices import DeviceInventory, is_dra_object
from webhook.engine.evaluate import InventoryView
from webhook.engine.inventory import Inventory, node_from_json
from webhook.files.manifests import ManifestError, load_manifests

RUNTIME_CLASS = "RuntimeClass"


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

    def view(self) -> InventoryView:
        return InventoryView(self.nodes, devices=self.devices, runtime_classes=self.runtime_classes)


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
            if d.obj.get("kind") not in ("Node", RUNTIME_CLASS) and not is_dra_object(d.obj)
        }
    )
    if others:
        raise InventoryFileError(
            [
                ManifestError(
                    path,
                    "holds objects that are neither Nodes, RuntimeClasses nor DRA objects: "
                    + ", ".join(others),
                )
            ]
        )
    devices = None
    if dra:
        complete = any(o.get("kind") in ("DeviceClass", "ResourceSlice") for o in dra)
        devices = DeviceInventory.of(dra, complete=complete)
    names = {
        str((d.obj.get("metadata") or {}).get("name", ""))
        for d in docs
        if d.obj.get("kind") == RUNTIME_CLASS
    }
    return InventoryFile(
        Inventory(nodes, source=path), devices, frozenset(names) if names else None
    )
