"""DRA objects a review names that the inventory has not seen yet.

One ``kubectl apply`` of a file with a ResourceClaim and its pod creates both within
milliseconds: the pod's review can come before the watch delivers the claim, and the
engine would answer "claim not found; devices not checked" for a claim it could have read
(issue 31). The engine stays pure: it only says what it is missing, here; the server's shell
reads those objects from the API server within a short budget and judges again with them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.evaluation.request import Request
from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.devices import Claim, DeviceInventory, claim_from_json

# How many objects one review may ask the shell to read: a pod names a handful of claims
# (the API server allows 32 entries in spec.resourceClaims, k8s.io/kubernetes
# pkg/apis/core/validation ValidatePodSpec, MaxPodResourceClaims) and each claim a class or
# two; more than this is read by the watch, not per review.
MAX_REFERENCES = 8

RESOURCE_CLAIM = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
DEVICE_CLASS = "DeviceClass"


@dataclass(frozen=True, slots=True)
class Reference:
    """A DRA object by kind, namespace ("" for a DeviceClass) and name."""

    kind: str
    namespace: str
    name: str


def unseen_references(
    request: Request, *, policy: Policy, devices: DeviceInventory | None
) -> tuple[Reference, ...]:
    """The claims, claim templates and device classes ``request`` names (directly, or
    through the claims and templates the inventory knows) that ``devices`` lacks; none
    when the cluster serves no DRA API (``devices`` is None)."""
    if devices is None:
        return ()
    found: dict[Reference, None] = {}
    obj = request.object
    namespace = request.effective_namespace
    if obj.get("kind") in (RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE):
        found.update(dict.fromkeys(_classes_of(claim_from_json(obj), devices)))
    for template in policy.kinds.templates(obj) or ():
        for ref in _claim_references(template.spec, namespace):
            known = _known(ref, devices)
            if known is None:
                found[ref] = None
            else:
                found.update(dict.fromkeys(_classes_of(known, devices)))
    return tuple(found)[:MAX_REFERENCES]


def _claim_references(spec: Mapping[str, Any], namespace: str) -> Iterator[Reference]:
    for entry in spec.get("resourceClaims") or ():
        if not isinstance(entry, Mapping):
            continue
        if isinstance(entry.get("resourceClaimName"), str):
            yield Reference(RESOURCE_CLAIM, namespace, entry["resourceClaimName"])
        elif isinstance(entry.get("resourceClaimTemplateName"), str):
            yield Reference(RESOURCE_CLAIM_TEMPLATE, namespace, entry["resourceClaimTemplateName"])


def _known(ref: Reference, devices: DeviceInventory) -> Claim | None:
    table = devices.claims if ref.kind == RESOURCE_CLAIM else devices.templates
    return table.get((ref.namespace, ref.name))


def _classes_of(claim: Claim, devices: DeviceInventory) -> Iterator[Reference]:
    for request in claim.spec.requests:
        for alternative in request.alternatives:
            name = alternative.device_class
            if name and name not in devices.classes:
                yield Reference(DEVICE_CLASS, "", name)
