"""A static node inventory from what ``kubectl get nodes -o yaml`` (or ``-o json``) prints.

The file may also hold the cluster's RuntimeClasses (``kubectl get nodes,runtimeclasses -o
yaml``): then a pod naming a class the cluster lacks is a finding, as with a live inventory.
"""

from __future__ import annotations

from webhook.engine.inventory import Inventory, node_from_json
from webhook.files.manifests import ManifestError, load_manifests

RUNTIME_CLASS = "RuntimeClass"


class InventoryFileError(Exception):
    def __init__(self, errors: list[ManifestError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def load_inventory(path: str) -> Inventory:
    """Every ``Node`` in the file (a ``List``/``NodeList`` or Node documents).

    Raises ``InventoryFileError`` when the file cannot be read or holds no Node, because a
    capacity check against an empty inventory would deny every GPU pod.
    """
    docs, errors = load_manifests([path])
    if errors:
        raise InventoryFileError(errors)
    nodes = [node_from_json(d.obj) for d in docs if d.obj.get("kind") == "Node"]
    if not nodes:
        raise InventoryFileError([ManifestError(path, "holds no Node objects")])
    others = sorted(
        {str(d.obj.get("kind")) for d in docs if d.obj.get("kind") not in ("Node", RUNTIME_CLASS)}
    )
    if others:
        raise InventoryFileError(
            [ManifestError(path, f"holds objects that are not Nodes: {', '.join(others)}")]
        )
    return Inventory(nodes, source=path)


def load_runtime_classes(path: str) -> frozenset[str] | None:
    """Names of the RuntimeClasses in an inventory file; ``None`` when it lists none, since
    a file of nodes only says nothing about runtime classes."""
    docs, errors = load_manifests([path])
    if errors:
        raise InventoryFileError(errors)
    names = {
        str((d.obj.get("metadata") or {}).get("name", ""))
        for d in docs
        if d.obj.get("kind") == RUNTIME_CLASS
    }
    return frozenset(names) if names else None
