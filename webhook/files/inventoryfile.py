"""A static node inventory from what ``kubectl get nodes -o yaml`` (or ``-o json``) prints."""

from __future__ import annotations

from webhook.engine.inventory import Inventory, node_from_json
from webhook.files.manifests import ManifestError, load_manifests


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
    try:
        nodes = [node_from_json(d.obj) for d in docs if d.obj.get("kind") == "Node"]
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        message = f"holds a Node that cannot be read ({type(exc).__name__}: {str(exc)[:100]})"
        raise InventoryFileError([ManifestError(path, message)]) from None
    if not nodes:
        raise InventoryFileError([ManifestError(path, "holds no Node objects")])
    others = sorted({str(d.obj.get("kind")) for d in docs if d.obj.get("kind") != "Node"})
    if others:
        raise InventoryFileError(
            [ManifestError(path, f"holds objects that are not Nodes: {', '.join(others)}")]
        )
    return Inventory(nodes, source=path)
