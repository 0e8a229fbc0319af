"""What the engine is asked: one object with its admission attributes, and the inventory it
may use. Kept apart from ``evaluate`` so that every evaluator (pods and workloads there,
DRA claim objects in ``claimobjects``) takes the same inputs without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.resources.quotas import Quotas


@dataclass(frozen=True, slots=True)
class Resource:
    """An admission request's ``resource`` (group, version, plural) and object name: for a
    subresource such as ``scale``, the only place the request names its parent."""

    group: str
    version: str
    resource: str
    name: str = ""


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Request:
    """What the engine needs of an admission request (or of a file being checked)."""

    object: Mapping[str, Any]
    namespace: str = ""
    operation: str = "CREATE"
    old_object: Mapping[str, Any] | None = None
    namespace_labels: Mapping[str, str] | None = None
    # The admission request's subResource ("ephemeralcontainers", "resize", "scale");
    # requests for other subresources never reach the engine (webhook.admission.service).
    sub_resource: str = ""
    # For a ResourceClaim: the pods that already name it (``resourceClaimName``), as stored,
    # read by the shell (issue 35); None: not read. A pod admitted before its claims exist
    # is judged again, with each claim, when the claim is created.
    referencing_pods: tuple[Mapping[str, Any], ...] | None = None
    # Whether ``referencing_pods`` holds every such pod (the read ended within its budget).
    referencing_complete: bool = True
    # The request's resource; set by the server (a ``scale`` request names its parent here).
    resource: Resource | None = None
    # For a ``scale`` request: the parent as the shell read it from the API server, or why
    # it could not (``parent_unread``); the engine then warns and never denies.
    parent: Mapping[str, Any] | None = None
    parent_unread: str = ""

    @property
    def effective_namespace(self) -> str:
        meta = self.object.get("metadata")
        own = meta.get("namespace") if isinstance(meta, dict) else None
        return self.namespace or (str(own) if own else "default")


@dataclass(slots=True)  # built per review: frozen would triple its cost
class InventoryView:
    """The inventory as the engine may use it: a snapshot, none at all, or a broken one."""

    snapshot: Inventory | None
    problem: str = ""  # set when a configured inventory is unavailable (never synced, stale)
    # DRA classes, slices, claims and templates; None when the cluster serves no DRA API
    # (or ``check`` was given none).
    devices: DeviceInventory | None = None
    # Names of the cluster's RuntimeClasses, from a live inventory; None: not known.
    runtime_classes: frozenset[str] | None = None
    # Those of them whose handler is NVIDIA's container runtime (``gpuaccess``).
    nvidia_runtime_classes: frozenset[str] = frozenset()
    # Autoscaler objects (Karpenter NodePools, cluster-autoscaler status, GKE
    # ComputeClasses): nodes that could exist. None: not read.
    pools: PoolInventory | None = None
    # The cluster's ResourceQuotas (issue 26); None: not known.
    quotas: Quotas | None = None

    @property
    def usable_devices(self) -> DeviceInventory | None:
        """The DRA inventory, unless the inventory is broken: then none is judged on."""
        return None if self.problem else self.devices


NO_INVENTORY = InventoryView(None)
NO_INVENTORY_NOTICE = "capacity checks skipped: no node inventory given"
# Top-level metadata that ``evaluate`` never reads: replicas of one workload differ only
# here, so callers may treat objects equal but for these as the same question
# (``webhook.admission.memo``). tests/engine/evaluation/test_properties.py holds the engine to it.
IDENTITY_METADATA = frozenset(
    {
        "name",
        "generateName",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "ownerReferences",
        "selfLink",
    }
)
