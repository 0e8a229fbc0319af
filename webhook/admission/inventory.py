"""Where the node inventory comes from, as the admission service sees it.

``InventorySource`` is structural: the live source in ``webhook.cluster.inventorysource``
(list and watch of nodes) and the static one here (a file) both fit it without importing
this module. ``view_of`` turns a source's state into what the engine accepts: a stale or
never-synced inventory is *unavailable*, and the policy's failure mode decides.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from webhook.engine.evaluate import NO_INVENTORY, InventoryView
from webhook.engine.inventory import Inventory
from webhook.inventoryfile import load_inventory


class InventoryStatusLike(Protocol):
    @property
    def synced(self) -> bool: ...
    @property
    def stale(self) -> bool: ...
    @property
    def age_seconds(self) -> float: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def node_count(self) -> int: ...
    @property
    def last_error(self) -> str: ...


class InventorySource(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def snapshot(self) -> Inventory | None: ...
    def ready(self) -> bool: ...
    def status(self) -> InventoryStatusLike: ...
    def namespace_labels(self, name: str) -> Mapping[str, str] | None: ...


@dataclass(frozen=True, slots=True)
class InventoryStatus:
    synced: bool
    stale: bool
    age_seconds: float
    resource_version: str
    node_count: int
    last_error: str = ""


class StaticInventorySource:
    """Nodes read once from a file (``kubectl get nodes -o yaml``): always ready, never
    stale. ``InventoryFileError`` at construction, so a bad file stops the server early."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._inventory = load_inventory(path)
        self._loaded = time.monotonic()

    def start(self) -> None:
        """Nothing to watch."""

    def stop(self) -> None:
        """Nothing to stop."""

    def snapshot(self) -> Inventory:
        return self._inventory

    def ready(self) -> bool:
        return True

    def status(self) -> InventoryStatus:
        return InventoryStatus(
            synced=True,
            stale=False,
            age_seconds=time.monotonic() - self._loaded,
            resource_version=self._inventory.resource_version,
            node_count=len(self._inventory.nodes),
        )

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:  # noqa: ARG002
        """A file of nodes knows no namespaces: rules match on namespace names only."""
        return None


def view_of(source: InventorySource | None) -> InventoryView:
    """The inventory as the engine may use it right now."""
    if source is None:
        return NO_INVENTORY
    snapshot = source.snapshot()
    if snapshot is None or not source.ready():
        return InventoryView(None, problem="node inventory not synced yet")
    status = source.status()
    if status.stale:
        return InventoryView(
            None, problem=f"node inventory is stale ({status.age_seconds:.0f}s since last sync)"
        )
    return InventoryView(snapshot)
