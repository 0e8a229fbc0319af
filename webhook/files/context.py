"""What every command judges the objects of its files with: one function for all of them.

``check``, ``explain -f`` and ``audit -f`` each used to build their own inventory from
``--inventory`` and their files, and they drifted: only ``check`` let a pod see the claim
template beside it in the same file, so ``explain`` warned ``missingClaim`` and ``audit``
admitted what ``check`` denied (issue 31). The server reads the same kinds of object from
the cluster (``webhook.cluster.clusterobjects.ClusterObjects.view``); here the files stand
in for the cluster, as they would once applied together.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView
from webhook.engine.resources.devices import DeviceInventory, is_dra_object
from webhook.files.inventoryfile import load_inventory_file


def review_time() -> dt.datetime:
    """The time a command judges at, as the server does (``Request.now``): what a
    GPUPolicyException's expiry is compared with."""
    return dt.datetime.now(dt.UTC)


CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def is_claim_object(obj: Mapping[str, Any]) -> bool:
    """A ResourceClaim or ResourceClaimTemplate: judged on create as an object of its own
    (``webhook.engine.evaluation.claimobjects``), as the server's webhook rules register."""
    return is_dra_object(obj) and obj.get("kind") in CLAIM_KINDS


def applied_together(view: InventoryView, objects: Iterable[Mapping[str, Any]]) -> InventoryView:
    """``view`` plus the device classes, claims and claim templates among ``objects``: the
    pods judged with them see them, as they would in the cluster once applied together."""
    listed = list(objects)
    claims = [o for o in listed if is_claim_object(o)]
    classes = [o for o in listed if is_dra_object(o) and o.get("kind") == "DeviceClass"]
    if not claims and not classes:
        return view
    devices = view.devices or DeviceInventory({}, (), {}, {}, complete=False)
    return dataclasses.replace(view, devices=devices.with_classes(classes).with_claims(claims))


def files_view(inventory: str | None, objects: Iterable[Mapping[str, Any]]) -> InventoryView:
    """The inventory file (none: no capacity checks) with the files' own DRA objects.

    Raises ``InventoryFileError`` when the inventory file is not usable."""
    view = load_inventory_file(inventory).view() if inventory else NO_INVENTORY
    return applied_together(view, objects)
