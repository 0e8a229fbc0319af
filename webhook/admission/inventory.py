"""Where the node inventory comes from, as the admission service sees it.

``InventorySource`` is structural: the live source in ``webhook.cluster.sources.inventorysource``
(list and watch of nodes) and the static one here (a file) both fit it without importing
this module. ``view_of`` turns a source's state into what the engine accepts: a stale or
never-synced inventory is *unavailable*, and the policy's failure mode decides.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.resources.quotas import Quotas
from webhook.files.inventoryfile import (
    InventoryFile,
    InventoryFileError,
    inventory_from_bytes,
    load_inventory_file,
)
from webhook.files.lastgood import LastGood
from webhook.files.manifests import ManifestError, read_bytes

log = logging.getLogger("gpu_webhook.inventory")


@dataclass(slots=True)  # built per review: frozen would triple its cost
class InventoryStatus:
    """What metrics, logs and ``/readyz`` report about the inventory.

    ``stale`` is true once synced but without any event, bookmark, accepted watch or
    successful list for the configured time; ``stale or not synced`` makes the inventory
    unavailable, and the policy's failure mode decides capacity checks.
    """

    synced: bool
    stale: bool
    age_seconds: float | None
    resource_version: str
    node_count: int
    last_error: str = ""
    source: str = ""
    relists: int = 0
    namespace_count: int | None = None


class InventorySource(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def snapshot(self) -> Inventory | None: ...
    def ready(self) -> bool: ...
    def status(self) -> InventoryStatus: ...
    # Seconds since the source last heard from the API server, once that is longer than
    # it may be (stale); None while fresh. ``status().stale`` without building a status.
    def stale_seconds(self) -> float | None: ...
    def namespace_labels(self, name: str) -> Mapping[str, str] | None: ...
    def devices(self) -> DeviceInventory | None: ...
    def runtime_classes(self) -> frozenset[str] | None: ...
    # The cluster's ResourceQuotas (issue 26); None: not known.
    def resource_quotas(self) -> Quotas | None: ...

    # Optional (issue 23): autoscaler objects; a source without it has none.
    # def pools(self) -> PoolInventory | None: ...
    # Optional (issue 35): the RuntimeClasses whose handler is NVIDIA's; none without it.
    # def nvidia_runtime_classes(self) -> frozenset[str]: ...
    # Optional (issue 41): every namespace with its labels; None (or no method): not known.
    # def namespaces(self) -> Mapping[str, Mapping[str, str]] | None: ...


def _load_keeping(path: str, last_good: LastGood | None) -> InventoryFile:
    """The file's nodes, kept in ``last_good`` when it loads; when it does not, the last
    good copy's (a worker started after the file broke serves what its siblings serve)."""
    if last_good is None:
        return load_inventory_file(path)
    try:
        # Loaded from the bytes kept: the copy is exactly what this worker serves.
        data, error = read_bytes(path)
        if data is None:
            raise InventoryFileError([error or ManifestError(path, "cannot be read")])
        inventory = inventory_from_bytes(data, path)
    except InventoryFileError as exc:
        kept = last_good.inventory()
        if kept is None:
            raise
        log.error(
            "inventory file not usable; serving the last good copy",
            extra={"inventory": path, "error": str(exc)[:1000]},
        )
        return load_inventory_file(str(kept))
    with contextlib.suppress(OSError):
        last_good.save_inventory(data)
    return inventory


class StaticInventorySource:
    """The nodes of a file (``kubectl get nodes -o yaml``): always ready, never stale.

    Loading happens in the constructor so that a bad file fails at start-up with
    ``InventoryFileError``, not at the first admission.
    """

    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        last_good: LastGood | None = None,
    ) -> None:
        self.path = path
        self._clock = clock
        self._file = _load_keeping(path, last_good)
        self._loaded_at = clock()

    def start(self) -> None:
        """Nothing to start: the file was read by the constructor."""

    def stop(self) -> None:
        """Nothing to stop."""

    def snapshot(self) -> Inventory:
        return self._file.nodes

    def ready(self) -> bool:
        return True

    def status(self) -> InventoryStatus:
        return InventoryStatus(
            synced=True,
            stale=False,
            age_seconds=self._clock() - self._loaded_at,
            resource_version=self._file.nodes.resource_version,
            node_count=len(self._file.nodes),
            source=self.path,
        )

    def stale_seconds(self) -> float | None:
        return None

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:  # noqa: ARG002
        """A file holds no namespaces: rules on namespace labels see them as unknown."""
        return None

    def devices(self) -> DeviceInventory | None:
        return self._file.devices

    def runtime_classes(self) -> frozenset[str] | None:
        """The file's RuntimeClasses; ``None`` when it lists none."""
        return self._file.runtime_classes

    def nvidia_runtime_classes(self) -> frozenset[str]:
        """Those of them whose handler is NVIDIA's runtime."""
        return self._file.nvidia_runtime_classes

    def pools(self) -> PoolInventory | None:
        """The file's autoscaler objects; ``None`` when it holds none."""
        return self._file.pools

    def resource_quotas(self) -> Quotas | None:
        """The file's ResourceQuotas; ``None`` when it lists none."""
        return self._file.quotas


def view_of(source: InventorySource | None) -> InventoryView:
    """The inventory as the engine may use it right now."""
    if source is None:
        return NO_INVENTORY
    snapshot = source.snapshot()
    if snapshot is None or not source.ready():
        return InventoryView(None, problem="node inventory not synced yet")
    stale = source.stale_seconds()
    if stale is not None:
        return InventoryView(
            None, problem=f"node inventory is stale ({stale:.0f}s since last sync)"
        )
    devices, runtime_classes = source.devices(), source.runtime_classes()
    pools_of: Callable[[], PoolInventory | None] | None = getattr(source, "pools", None)
    pools = pools_of() if pools_of is not None else None
    quotas = source.resource_quotas()
    nvidia_of: Callable[[], frozenset[str]] | None = getattr(source, "nvidia_runtime_classes", None)
    nvidia = nvidia_of() if nvidia_of is not None else frozenset()
    last = _last_view
    if (
        last is not None
        and last.snapshot is snapshot
        and last.devices is devices
        and last.runtime_classes is runtime_classes
        and last.pools is pools
        and last.quotas is quotas
        and last.nvidia_runtime_classes is nvidia
    ):
        return last
    return _remember(
        InventoryView(
            snapshot,
            devices=devices,
            runtime_classes=runtime_classes,
            pools=pools,
            quotas=quotas,
            nvidia_runtime_classes=nvidia,
        )
    )


# The view of the last review: the next one almost always sees the same parts.
_last_view: InventoryView | None = None


def _remember(view: InventoryView) -> InventoryView:
    global _last_view  # noqa: PLW0603 - a one-entry memo, replaced whole
    _last_view = view
    return view
