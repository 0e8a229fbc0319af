"""How many pods of a gang each node can hold when their GPUs come from DRA claims.

A pod whose claims are made from ResourceClaimTemplates gets claims of its own: ``k`` such
pods on one node need ``k`` copies of the claims allocated together from the node's
devices. The count per node is the largest ``k`` for which the allocator model
(``webhook.engine.scheduling.dra.fit``: the structured allocator's answer for one node,
against an empty node as the capacity checks count) allocates ``k`` copies; the gang's
count is the sum over the nodes the pod can land on (``Inventory.placeable`` with
transient states healed), each node's count also bounded by what its allocatable holds of
the pod's other requests (``fit.pods_per_node``).

The count is exact only when every node's answer is known. It is not where a selector
cannot be evaluated here, the allocator search runs over its budget, devices may be shared
by any number of pods, a node's device plugin may serve an extended resource the pod
otherwise gets from a device class, or a node pool may bring nodes whose devices are not
known yet; the count of the known nodes is then a lower bound and never a proof. A pod
holding a shared ResourceClaim (one claim for all pods) is not counted here: its devices
are not per pod.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.resources.cel.celbudget import review_spent
from webhook.engine.resources.devices import ClaimSpec, DeviceInventory, Profile
from webhook.engine.resources.fit import pods_per_node
from webhook.engine.resources.inventory import FitAnswer, Node
from webhook.engine.scheduling.dra import PodClaims, fit, reads_identity

# Allocations tried for one gang check (each a ``dra.fit`` of k copies of the claims).
_FIT_BUDGET = 400
_ORDERS = 6  # orders of the templates a joint placement tries


@dataclass(slots=True)
class PodDevices:
    """One template's per-pod claims, and what they are allocated from."""

    claims: tuple[ClaimSpec, ...]
    inventory: DeviceInventory
    served: frozenset[str] = frozenset()  # extended resources a device class serves
    _counts: dict[tuple[Any, ...], int | None] = field(default_factory=dict)
    budget: list[int] = field(default_factory=lambda: [_FIT_BUDGET])
    # Selectors or constraints that read devices' identity attributes: nodes of one
    # profile key may then answer differently (``dra.reads_identity``).
    by_node: bool = False

    def __post_init__(self) -> None:
        self.by_node = reads_identity(self.claims, self.inventory)

    def on(self, profile: Profile, *, limit: int) -> int | None:
        """The most copies of the claims the node's devices hold together (at most
        ``limit``); None when the allocator model cannot tell, or more than ``limit`` fit
        (devices shared by any number of pods)."""
        key = (profile.example if self.by_node else profile.key, limit)
        if key in self._counts:
            return self._counts[key]
        count: int | None = 0
        for k in range(1, limit + 2):
            if self.budget[0] <= 0:
                count = None
                break
            self.budget[0] -= 1
            answer = fit(self.claims * k, profile.devices, self.inventory)
            if answer.fits is None:
                count = None
                break
            if not answer.fits:
                count = k - 1
                break
        else:
            count = None  # more than every device: shared devices, no bound here
        if not review_spent():
            self._counts[key] = count
        return count

    def together(self, claims: Sequence[ClaimSpec], profile: Profile) -> bool | None:
        """Whether these claims (of several pods) are allocated together on the node."""
        if self.budget[0] <= 0:
            return None
        self.budget[0] -= 1
        return fit(tuple(claims), profile.devices, self.inventory).fits


def pod_devices(claims: PodClaims, inventory: DeviceInventory | None) -> PodDevices | None:
    """The pod's per-pod claims when its GPUs come from DRA; None when it has no GPU
    claim, or one the count cannot use (not in the inventory, or shared by all pods)."""
    if inventory is None or not inventory.complete or not claims.gpu_classes:
        return None
    own: list[ClaimSpec] = []
    for entry in claims.claims:
        if entry.claim is None:
            return None  # the DRA checks say the template is missing
        if entry.source.startswith("ResourceClaim "):
            if entry.gpu_count:
                return None  # shared GPUs: not a per-pod count
            continue  # a shared claim of other devices: one for all pods
        own.append(entry.claim.spec)
    if not own:
        return None
    return PodDevices(tuple(own), inventory, frozenset(r for r, _ in claims.served))


def node_counts(answer: FitAnswer, devices: PodDevices) -> Iterator[int | None]:
    """Per node the pod can land on and whose allocatable holds the rest of its request:
    how many of its pods it holds at once. A pool's nodes are not known (None)."""
    placement = answer.placement.healed()
    for shape in answer.fitting:
        if shape.pool:
            yield None
            continue
        others = pods_per_node(shape.allocatable, shape.gpu, answer.demand)
        served_by_plugin = any(r in shape.allocatable for r in devices.served)
        for node in shape.members:
            if not placement.admits(node.labels, node.name, shape.taints):
                continue
            if served_by_plugin:
                yield None
                continue
            profile = devices.inventory.profile(node)
            count = devices.on(profile, limit=len(profile.devices)) if profile.devices else 0
            if count is not None and others is not None:
                count = min(count, others)
            yield count


def device_capacity(answer: FitAnswer, devices: PodDevices) -> tuple[int, bool]:
    """Pods of one template that can run at once, counted from the nodes' devices: the
    count on the nodes whose answer is known, and whether every node's answer is."""
    counts = list(node_counts(answer, devices))
    known = [c for c in counts if c is not None]
    return sum(known), len(known) == len(counts)


def placed_together(
    groups: Sequence[tuple[FitAnswer, PodDevices, int]], *, required: int
) -> int | None:
    """Pods of several templates a first-fit placement runs together, node by node, each
    node taking pods of the templates in one order while the allocator model allocates all
    their claims at once; the best of the orders tried (first-fit alone depends on it).
    None when a node's answer is unknown or the budget runs out."""
    best: int | None = None
    for order in itertools.islice(itertools.permutations(range(len(groups))), _ORDERS):
        placed = _first_fit([groups[i] for i in order], required=required)
        if placed is None:
            return None
        best = placed if best is None else max(best, placed)
        if best >= required:
            break
    return best


def _first_fit(groups: Sequence[tuple[FitAnswer, PodDevices, int]], *, required: int) -> int | None:
    left = [count for _, _, count in groups]
    placed = 0
    seen: set[str] = set()
    for answer, devices, _ in groups:
        placement = answer.placement.healed()
        for shape in answer.fitting:
            if shape.pool:
                return None
            for node in shape.members:
                if node.name in seen or not placement.admits(node.labels, node.name, shape.taints):
                    continue
                seen.add(node.name)
                took = _fill(node, groups, left, devices.inventory)
                if took is None:
                    return None
                placed += took
                if placed >= required:
                    return placed
    return placed


def _fill(
    node: Node,
    groups: Sequence[tuple[FitAnswer, PodDevices, int]],
    left: list[int],
    inventory: DeviceInventory,
) -> int | None:
    profile = inventory.profile(node)
    chosen: list[ClaimSpec] = []
    took = 0
    for index, (answer, devices, _) in enumerate(groups):
        if not any(node in s.members for s in answer.fitting):
            continue
        while left[index] > 0:
            fits = devices.together((*chosen, *devices.claims), profile)
            if fits is None:
                return None
            if not fits:
                break
            chosen.extend(devices.claims)
            left[index] -= 1
            took += 1
    return took
