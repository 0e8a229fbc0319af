"""DRA claims: which of a pod's claims ask for GPUs, and whether they can ever be met.

The fit answers what ``k8s.io/dynamic-resource-allocation/structured`` answers for one
node (``internal/incubating/allocator_incubating.go``, the allocator 1.36 runs with its
beta features on; ``Allocator.Allocate``), against an empty cluster as the capacity checks
do for nodes:

- every request (or, with ``firstAvailable``, one of its sub-requests, tried in order:
  ``allocateOne``) needs ``count`` devices (``ExactCount``), or every matching device of
  the node and at least one (``All``: ``validateDeviceRequest``, "At least one device is
  required for 'All' allocation mode");
- a device matches when the class's selectors and the request's selectors are all true
  (``isSelectable``, ``selectorsMatch``); a CEL runtime error fails the node;
- a device serves one request of all the pod's claims (``deviceInUse``); a request with
  ``adminAccess`` may take a device other claims hold, but not one its own claim holds,
  and what it takes is held like any other allocation (``allocatingDevices``);
- a device that allows multiple allocations (``allowMultipleAllocations``) serves several
  requests while what they consume of its capacity fits (consumable capacity,
  ``CmpRequestOverCapacity``: a capacity request rounded up by the capacity's
  ``requestPolicy``, an unrequested capacity taken at its default or whole); a request
  naming a capacity the device lacks, or an amount the policy refuses, does not match it;
- a request naming an unknown class fails (``classLister.Get``), and a claim needs at most
  ``AllocationResultsMaxSize`` devices.

- ``matchAttribute`` constraints: the devices of the named requests (all, when none are
  named) must have the attribute, with one value (``matchAttributeConstraint``);
- partitionable devices: what devices consume of their pool's shared counters stays within
  them (``checkAvailableCounters``): MIG partitions of one GPU, or the GPU itself; a device
  that allows multiple allocations consumes its counters once (``skipCounterCheck``);
- a device tainted NoSchedule or NoExecute serves only requests that tolerate the taint
  (``taintPreventsAllocation``), whether the taint is in its slice or comes from a
  ``DeviceTaintRule``.

The allocator's search is exhaustive, so "some assignment exists" is its answer; here that
is a bipartite matching per combination of ``firstAvailable`` choices, or, for claims with
constraints, admin access, and devices with counters or multiple allocations, the
allocator's own backtracking (``_Search``) with a step budget (past it the answer is
unknown, never a denial).
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.kube.selectors import dig, terms_match
from webhook.engine.kube.workloads import Path
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.policy.ruleset import GPUResources
from webhook.engine.resources.cel.celbudget import review_spent
from webhook.engine.resources.cel.deviceselectors import Selector, SelectorError, compile_selector
from webhook.engine.resources.devices import (
    ALLOCATION_RESULTS_MAX_SIZE,
    Claim,
    ClaimSpec,
    Device,
    DeviceInventory,
    DeviceRequest,
    Profile,
    SubRequest,
)
from webhook.engine.resources.fit import quantity_text
from webhook.engine.resources.inventory import Inventory, Node, Placement

_MAX_COMBINATIONS = 64
_MEMO_SIZE = 4096
# Admits every node a pod could be allowed onto (a cordoned node is never one).
EVERYWHERE = Placement(
    node_selector={}, required_terms=None, tolerations=({"operator": "Exists"},), cordoned=False
)


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of ``spec.resourceClaims`` and the claim it stands for."""

    name: str
    source: str  # "ResourceClaim x" or "ResourceClaimTemplate y", for messages
    claim: Claim | None  # None: not in the inventory (yet)
    gpu_count: int = 0
    gpu_requests: frozenset[str] = frozenset()  # request names (and "request/sub")
    gpu_classes: tuple[str, ...] = ()
    # False for the claim the scheduler makes for an extended resource a device class
    # serves: its GPUs are already counted as the resource.
    counted: bool = True


@dataclass(frozen=True, slots=True)
class PodClaims:
    claims: tuple[PodClaim, ...] = ()
    holders: frozenset[Path] = frozenset()  # containers that hold a GPU claim
    # Per container naming a claim in ``resources.claims``: the GPUs it holds through them.
    held: tuple[tuple[Path, ClaimGPUs], ...] = ()
    # Extended resources of the pod that a device class serves: (resource, class).
    served: tuple[tuple[str, str], ...] = ()
    # Their most per container: where a device plugin serves them after all (a node with
    # them in allocatable), the physical-GPU rule of shared GPUs reads it.
    served_per_container: tuple[tuple[str, int], ...] = ()
    # Containers naming claims none of which can give a GPU (``class_gives_gpu``): they
    # ask for no GPU through them.
    no_gpu: frozenset[Path] = frozenset()

    @property
    def gpu_count(self) -> int:
        if not self.claims:  # most pods: asked on every admission
            return 0
        return sum(c.gpu_count for c in self.claims if c.counted)

    @property
    def gpu_classes(self) -> tuple[str, ...]:
        if not self.claims:
            return ()
        return tuple(dict.fromkeys(k for c in self.claims for k in c.gpu_classes))

    @property
    def missing(self) -> tuple[PodClaim, ...]:
        return tuple(c for c in self.claims if c.claim is None)

    def gpus_of(self, path: Path) -> ClaimGPUs | None:
        """What the container at ``path`` holds through claims; None: it names none."""
        for at, gpus in self.held:
            if at == path:
                return gpus
        return None


@dataclass(frozen=True, slots=True)
class ClaimGPUs:
    """The GPUs one container holds through the pod's claims (its ``resources.claims``),
    for the per-container rules and mutations a resource count answers: each total the
    allocator may give it (one per combination of ``firstAvailable`` alternatives), and
    what could not be counted. ``unbounded``: some part has no upper bound known here
    (``allocationMode: All``, a claim not read); ``counts`` then hold the least."""

    counts: frozenset[int] = frozenset({0})
    unbounded: bool = False
    unknown: tuple[str, ...] = ()  # what could not be counted exactly, for messages

    @property
    def exact(self) -> int | None:
        """The one count every allocation gives, or None."""
        if self.unbounded or self.unknown or len(self.counts) != 1:
            return None
        return next(iter(self.counts))

    @property
    def gpu(self) -> bool:
        """Whether it holds (or may hold) any GPU."""
        return self.unbounded or max(self.counts) > 0

    def unknown_text(self) -> str:
        return "; ".join(self.unknown)


NO_CLAIMS = PodClaims()


def gpu_share(
    spec: ClaimSpec, is_gpu_class: Callable[[str], bool]
) -> tuple[int, frozenset[str], tuple[str, ...]]:
    """GPUs a claim asks for (the most any ``firstAvailable`` choice gets; ``All`` counts
    as one), the names of its GPU requests, and its GPU classes."""
    count = 0
    names: set[str] = set()
    classes: list[str] = []
    for request in spec.requests:
        gpu = [a for a in request.alternatives if is_gpu_class(a.device_class)]
        if not gpu:
            continue
        count += max(1 if a.all_devices else a.count for a in gpu)
        names.add(request.name)
        names.update(a.name for a in gpu)
        classes.extend(a.device_class for a in gpu)
    return count, frozenset(names), tuple(dict.fromkeys(classes))


def pod_claims(
    spec: Mapping[str, Any],
    *,
    namespace: str,
    devices: DeviceInventory | None,
    is_gpu_class: Callable[[str], bool],
) -> PodClaims:
    """The pod's claims as the inventory knows them, and which containers hold GPUs."""
    entries = spec.get("resourceClaims")
    if not isinstance(entries, list) or not entries:
        return NO_CLAIMS
    claims: list[PodClaim] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        if isinstance(entry.get("resourceClaimName"), str):
            ref = entry["resourceClaimName"]
            source = f"ResourceClaim {ref}"
            found = devices.claims.get((namespace, ref)) if devices else None
        elif isinstance(entry.get("resourceClaimTemplateName"), str):
            ref = entry["resourceClaimTemplateName"]
            source = f"ResourceClaimTemplate {ref}"
            found = devices.templates.get((namespace, ref)) if devices else None
        else:
            continue
        if found is None:
            claims.append(PodClaim(entry["name"], source, None))
            continue
        count, names, classes = gpu_share(found.spec, is_gpu_class)
        claims.append(PodClaim(entry["name"], source, found, count, names, classes))
    by_name = {c.name: c for c in claims}
    holders: set[Path] = set()
    no_gpu: set[Path] = set()
    held: list[tuple[Path, ClaimGPUs]] = []
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or []):
            refs = dig(container, "resources", "claims")
            named = False
            may_gpu = False
            for ref in refs if isinstance(refs, list) else []:
                claim = by_name.get(str(dig(ref, "name")))
                named = named or claim is not None
                request = str(dig(ref, "request") or "")
                may_gpu = may_gpu or _entry_gives_gpu(claim, request, devices, is_gpu_class)
                if claim is None or not claim.gpu_count:
                    continue
                if not request or request in claim.gpu_requests:
                    holders.add((section, index))
            if named:
                gpus = container_claim_gpus(container, claims, is_gpu_class=is_gpu_class)
                held.append(((section, index), gpus))
                if not may_gpu:
                    no_gpu.add((section, index))
    return PodClaims(tuple(claims), frozenset(holders), tuple(held), no_gpu=frozenset(no_gpu))


def _entry_gives_gpu(
    claim: PodClaim | None,
    entry: str,
    devices: DeviceInventory | None,
    is_gpu_class: Callable[[str], bool],
) -> bool:
    """Whether a container's ``resources.claims`` entry (the whole claim, "request" or
    "request/sub") may give it a GPU: a claim the inventory does not hold may, and so
    does a request of a class that can (``class_gives_gpu``)."""
    if claim is None or claim.claim is None or devices is None:
        return True
    name, _, sub = entry.partition("/")
    for request in claim.claim.spec.requests:
        if name and request.name != name:
            continue
        for alternative in request.alternatives:
            if sub and alternative.name != sub:
                continue
            if class_gives_gpu(devices, alternative.device_class, is_gpu_class=is_gpu_class):
                return True
    return False


def class_gives_gpu(
    devices: DeviceInventory, name: str, *, is_gpu_class: Callable[[str], bool]
) -> bool:
    """Whether the allocator may give a request of device class ``name`` a GPU: a GPU
    class may; a class the inventory does not know may (judged as before, a claim of it
    as a GPU's), and so may any class while the devices are not all known; a known class
    may when its selectors do not rule out every device that a GPU class selects (a
    class without selectors takes any device). A selector this webhook cannot evaluate
    rules nothing out. A NIC's class (dranet's ``device.driver == "dra.net"``) gives none."""
    if is_gpu_class(name) or not devices.complete:
        return True
    device_class = devices.classes.get(name)
    if device_class is None:
        return True
    key = ("class-gives-gpu", name, id(is_gpu_class))
    known = devices._memo.get(key)
    if known is not None and known[0] is is_gpu_class:
        return known[1]  # type: ignore[no-any-return]
    gpu_selectors = [c.selectors for n, c in sorted(devices.classes.items()) if is_gpu_class(n)]
    matcher = _Matcher(devices)
    # Devices alike but for their identity are asked once, unless a selector reads it.
    exact = any(matcher.exact(e) for s in (*gpu_selectors, device_class.selectors) for e in s)
    candidates = itertools.chain(
        (device for _, device in devices.named_devices()),
        (device for device, _, _ in devices.reachable_devices),
    )
    seen: set[Any] = set()
    answer = False
    for device in candidates:
        if not exact:
            content = devices.content(device)
            if content in seen:
                continue
            seen.add(content)
        if not any(all(matcher.matches(e, device) is True for e in s) for s in gpu_selectors):
            continue
        if all(matcher.matches(e, device) is not False for e in device_class.selectors):
            answer = True
            break
    if not review_spent():
        devices._memo[key] = (is_gpu_class, answer)
    return answer


def claim_entries(body: Mapping[str, Any], claim: str) -> list[str]:
    """The requests a container names of the pod's claim ``claim`` (its
    ``resources.claims`` entries): "" for the whole claim, "request" or "request/sub"."""
    refs = dig(body, "resources", "claims")
    return [
        str(ref.get("request") or "")
        for ref in (refs if isinstance(refs, list) else ())
        if isinstance(ref, Mapping) and ref.get("name") == claim
    ]


# Past this many distinct totals a container's count is judged unbounded: each request with
# alternatives of different counts multiplies them, and no rule needs them all.
_MAX_TOTALS = 64


def _request_counts(
    request: DeviceRequest, sub: str, *, is_gpu_class: Callable[[str], bool]
) -> tuple[frozenset[int], bool, str]:
    """The GPUs one request may give (each ``firstAvailable`` alternative: the allocator
    takes the first that fits, ``allocateOne``), whether without bound, and why not exact.
    ``All`` gives every matching device and at least one (``validateDeviceRequest``); a
    request for consumable capacity (KEP-5075) takes a share of each device, and shares of
    one GPU may go to the container's other requests too: 1 to ``count`` GPUs."""
    counts: set[int] = set()
    unbounded = False
    why: list[str] = []
    for alt in request.alternatives:
        if sub and alt.name not in (f"{request.name}/{sub}", sub):
            continue
        if not is_gpu_class(alt.device_class):
            counts.add(0)
        elif alt.all_devices:
            counts.add(1)
            unbounded = True
            why.append(f'request "{alt.name}" asks for all matching devices (allocationMode All)')
        elif alt.capacity:
            counts.update(range(min(alt.count, 1), alt.count + 1))
            why.append(f'request "{alt.name}" asks for shares of {alt.count} devices')
        else:
            counts.add(alt.count)
    if len(request.alternatives) > 1 and len(counts) > 1 and not sub:
        listed = " or ".join(str(n) for n in sorted(counts))
        why.append(f'request "{request.name}" may get {listed} GPUs (firstAvailable)')
    return frozenset(counts or {0}), unbounded, "; ".join(why)


def container_claim_gpus(
    body: Mapping[str, Any], claims: Sequence[PodClaim], *, is_gpu_class: Callable[[str], bool]
) -> ClaimGPUs:
    """What one container holds through the claims it names: the GPU requests of GPU
    device classes only (a NIC's devices are never counted)."""
    totals: frozenset[int] = frozenset({0})
    unbounded = False
    unknown: list[str] = []
    for pod_claim in claims:
        if not pod_claim.counted:
            continue  # a served resource: counted as the resource it is
        entries = claim_entries(body, pod_claim.name)
        if not entries:
            continue
        if pod_claim.claim is None:
            unbounded = True
            unknown.append(f"{pod_claim.source} could not be read")
            continue
        shown = f'claim "{pod_claim.name}" ({pod_claim.source})'
        for request in pod_claim.claim.spec.requests:
            for entry in entries:
                name, _, sub = entry.partition("/")
                if name and name != request.name:
                    continue
                counts, endless, why = _request_counts(request, sub, is_gpu_class=is_gpu_class)
                totals = frozenset(t + n for t in totals for n in counts)
                unbounded = unbounded or endless
                if why:
                    unknown.append(f"{shown}: {why}")
                break  # a request named twice is held once
        if len(totals) > _MAX_TOTALS:
            totals, unbounded = frozenset({min(totals)}), True
    return ClaimGPUs(totals, unbounded, tuple(unknown))


# --- fit ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitAnswer:
    """``fits`` is None when this webhook cannot tell (a selector it cannot evaluate)."""

    fits: bool | None
    reason: str = ""


class _Matcher:
    """Selector answers per device, memoised on the snapshot (content-keyed when the
    selectors name no identity attribute)."""

    def __init__(self, inventory: DeviceInventory) -> None:
        self.inventory = inventory
        self.memo = inventory._memo

    def selector(self, expression: str) -> Selector | SelectorError:
        return compile_selector(expression)

    def exact(self, expression: str) -> bool:
        """Whether the expression can tell devices apart by their identity attributes."""
        compiled = compile_selector(expression)
        if isinstance(compiled, SelectorError):
            return False
        identity = self.inventory.identity
        return compiled.reads_everything or any(compiled.mentions(name) for _, name in identity)

    def matches(self, expression: str, device: Device) -> bool | SelectorError:
        key_device: Any = device if self.exact(expression) else self.inventory.content(device)
        key = ("match", expression, key_device)
        known = self.memo.get(key)
        if known is not None:
            return known  # type: ignore[no-any-return]
        compiled = compile_selector(expression)
        result: bool | SelectorError
        if isinstance(compiled, SelectorError):
            result = compiled
        else:
            try:
                result = compiled.matches(device.view())
            except SelectorError as exc:
                result = exc
        if isinstance(result, SelectorError) and result.spent:
            return result  # this review's budget, not the device: asked again next time
        if len(self.memo) >= _MEMO_SIZE:
            self.memo.clear()
        self.memo[key] = result
        return result


def _eligible(
    sub: SubRequest, devices: Sequence[Device], classes: Mapping[str, Any], matcher: _Matcher
) -> tuple[list[int], str, bool]:
    """Indexes of matching devices, the first selector error, and whether any selector
    could not be evaluated here."""
    device_class = classes.get(sub.device_class)
    expressions = (*(device_class.selectors if device_class else ()), *sub.selectors)
    found: list[int] = []
    error = ""
    unknown = False
    for index, device in enumerate(devices):
        ok = sub.tolerates(device)
        for expression in expressions if ok else ():
            result = matcher.matches(expression, device)
            if isinstance(result, SelectorError):
                unknown = unknown or result.unsupported
                error = error or (
                    f'request "{sub.name}": selector {expression!r} on device {device.name}: '
                    f"{result}"
                )
                ok = False
                break
            if not result:
                ok = False
                break
        # CmpRequestOverCapacity, for every device: capacities the request names must
        # exist, and what it takes must be within the policy and the capacity.
        if ok and (sub.capacity or device.policies) and device.consumption(sub.capacity) is None:
            ok = False
        if ok:
            found.append(index)
    return found, error, unknown


def eligible_devices(
    sub: SubRequest, devices: Sequence[Device], inventory: DeviceInventory
) -> list[Device]:
    """The devices of ``devices`` that ``sub`` may be allocated (``_eligible``); a selector
    this webhook cannot evaluate selects none."""
    found, _, _ = _eligible(sub, devices, inventory.classes, _Matcher(inventory))
    return [devices[i] for i in found]


def eligible_or_unknown(
    sub: SubRequest, devices: Sequence[Device], inventory: DeviceInventory
) -> tuple[list[Device], bool]:
    """``eligible_devices``, and whether a selector could not be evaluated here (then
    more devices may match than are listed)."""
    found, _, unknown = _eligible(sub, devices, inventory.classes, _Matcher(inventory))
    return [devices[i] for i in found], unknown


def _assign(slots: Sequence[Sequence[int]], taken: set[int], shared: Sequence[bool]) -> bool:
    """Whether every slot gets its own device (augmenting paths; shared devices serve any
    number of slots)."""
    owner: dict[int, int] = {}

    def place(slot: int, seen: set[int]) -> bool:
        for device in slots[slot]:
            if device in taken or device in seen:
                continue
            if shared[device]:
                return True
            seen.add(device)
            if device not in owner or place(owner[device], seen):
                owner[device] = slot
                return True
        return False

    return all(place(slot, set()) for slot in range(len(slots)))


# A device taken by one request: its index, whether it took counters, what it consumes of a
# shared device's capacity (None: not shared).
_Taken = tuple[int, bool, dict[tuple[str, str], Fraction] | None]


class _OverBudget(Exception):
    """The search tried too many assignments: the answer is unknown."""


class _Search:
    """The allocator's backtracking (``allocateOne``, ``allocateDevice``), for claims with
    ``matchAttribute`` constraints, where a matching cannot say which devices agree.

    ``plan`` holds per request its claim and the sub-requests that may serve it, each with
    its matching devices, in ``firstAvailable`` order."""

    def __init__(
        self,
        claims: Sequence[ClaimSpec],
        devices: Sequence[Device],
        plan: list[tuple[int, str, list[tuple[SubRequest, list[int]]]]],
        *,
        available: Mapping[tuple[str, str], Mapping[str, Mapping[str, Fraction]]],
        budget: int = 20_000,
    ) -> None:
        self.claims = claims
        self.devices = devices
        self.plan = plan
        self.budget = budget
        # Non-shared devices taken, by the claims holding them (admin access included, as
        # the allocator's allocatingDevices records them).
        self.in_use: dict[int, set[int]] = {}
        # Devices that allow multiple allocations: what their allocations consume.
        self.shares: dict[int, dict[tuple[str, str], Fraction]] = {}
        self.share_count: dict[int, int] = {}
        self.per_claim = [0] * len(claims)
        # Per claim, per constraint: the value its devices share and how many hold it.
        self.agreed: list[list[list[Any]]] = [[[None, 0] for _ in c.constraints] for c in claims]
        # Counters the devices taken so far consume, per (driver, pool, set, counter).
        self.available = available
        self.consumed: dict[tuple[str, str, str, str], Fraction] = {}

    def run(self) -> bool:
        return self._allocate(0)

    def _allocate(self, slot: int) -> bool:
        self.budget -= 1
        if self.budget < 0:
            raise _OverBudget
        if slot == len(self.plan):
            return True
        claim, request, alternatives = self.plan[slot]
        for sub, eligible in alternatives:
            if sub.all_devices:
                if not eligible:
                    continue
                added: list[_Taken] = []
                every = all(self._add(claim, request, sub, d, added) for d in eligible)
                if every and self._allocate(slot + 1):
                    return True
                self._undo(claim, request, sub, added)
            elif self._pick(slot, sub, eligible, left=sub.count, start=0):
                return True
        return False

    def _pick(
        self, slot: int, sub: SubRequest, eligible: list[int], *, left: int, start: int
    ) -> bool:
        """``left`` more devices for ``sub`` from ``eligible[start:]`` (sets, not orders:
        the allocator goes on from the next device, ``nextLocation``, even for a device that
        allows multiple allocations)."""
        if left == 0:
            return self._allocate(slot + 1)
        claim, request, _ = self.plan[slot]
        for position in range(start, len(eligible)):
            added: list[_Taken] = []
            if self._add(claim, request, sub, eligible[position], added) and self._pick(
                slot, sub, eligible, left=left - 1, start=position + 1
            ):
                return True
            self._undo(claim, request, sub, added)
        return False

    def _add(
        self, claim: int, request: str, sub: SubRequest, index: int, added: list[_Taken]
    ) -> bool:
        """``allocateDevice``: in use, counters, constraints, consumable capacity."""
        device = self.devices[index]
        holders = self.in_use.get(index)
        # Admin access may take a device other claims hold, not one its own claim does.
        if not device.shared and holders and (not sub.admin or claim in holders):
            return False
        if self.per_claim[claim] >= ALLOCATION_RESULTS_MAX_SIZE:
            return False
        values: list[Any] = []
        for constraint, state in zip(
            self.claims[claim].constraints, self.agreed[claim], strict=True
        ):
            if not constraint.applies(request, sub.name):
                values.append(None)
                continue
            value = device.attribute(constraint.attribute)
            if value is None or (state[1] and state[0] != value):
                return False
            values.append(value)
        share: dict[tuple[str, str], Fraction] | None = None
        if device.shared:
            share = device.consumption(sub.capacity)
            used = self.shares.get(index)
            if share is None or (
                used is not None
                and any(used[k] + v > self._value(device, k) for k, v in share.items())
            ):
                return False
        # ``skipCounterCheck``: a shared device already allocated consumed its counters.
        counted = bool(device.consumes) and not (device.shared and index in self.shares)
        if counted and not self._consume(device, 1):
            return False
        for value, state in zip(values, self.agreed[claim], strict=True):
            if value is not None:
                state[0], state[1] = value, state[1] + 1
        if device.shared and share is not None:
            used = self.shares.setdefault(index, dict.fromkeys(share, Fraction(0)))
            for key, amount in share.items():
                used[key] += amount
            self.share_count[index] = self.share_count.get(index, 0) + 1
        else:
            self.in_use.setdefault(index, set()).add(claim)
        self.per_claim[claim] += 1
        added.append((index, counted, share))
        return True

    @staticmethod
    def _value(device: Device, key: tuple[str, str]) -> Fraction:
        return next(v for d, n, v in device.capacity if (d, n) == key)

    def _consume(self, device: Device, sign: int) -> bool:
        """Take (or give back) the counters the device consumes; False, and nothing taken,
        when a counter of its pool would go over (``checkAvailableCounters``)."""
        pool = self.available.get((device.driver, device.pool), {})
        changed = []
        fits = True
        for set_name, counters in device.consumes:
            for name, amount in counters:
                key = (device.driver, device.pool, set_name, name)
                self.consumed[key] = self.consumed.get(key, Fraction(0)) + sign * amount
                changed.append((key, amount))
                limit = pool.get(set_name, {}).get(name) if pool else None
                if sign > 0 and limit is not None and self.consumed[key] > limit:
                    fits = False
        if not fits:
            for key, amount in changed:
                self.consumed[key] -= amount
        return fits

    def _undo(self, claim: int, request: str, sub: SubRequest, added: list[_Taken]) -> None:
        for index, counted, share in reversed(added):
            device = self.devices[index]
            if counted:
                self._consume(device, -1)
            if share is not None:
                used = self.shares[index]
                for key, amount in share.items():
                    used[key] -= amount
                self.share_count[index] -= 1
                if not self.share_count[index]:
                    del self.shares[index], self.share_count[index]
            else:
                self.in_use[index].discard(claim)
            self.per_claim[claim] -= 1
            for constraint, state in zip(
                self.claims[claim].constraints, self.agreed[claim], strict=True
            ):
                if constraint.applies(request, sub.name):
                    state[1] -= 1
        added.clear()


def _fit_by_search(
    claims: Sequence[ClaimSpec],
    devices: Sequence[Device],
    inventory: DeviceInventory,
    *,
    counters: bool = True,
) -> FitAnswer:
    matcher = _Matcher(inventory)
    classes = inventory.classes
    plan: list[tuple[int, str, list[tuple[SubRequest, list[int]]]]] = []
    unknown = error = ""
    for claim_index, claim in enumerate(claims):
        for request in claim.requests:
            alternatives = []
            for sub in request.alternatives:
                if sub.device_class not in classes:
                    continue
                eligible, problem, cannot_tell = _eligible(sub, devices, classes, matcher)
                error = error or problem
                unknown = unknown or (problem if cannot_tell else "")
                alternatives.append((sub, eligible))
            plan.append((claim_index, request.name, alternatives))
    try:
        available = inventory.counters if counters else {}
        if _Search(claims, devices, plan, available=available).run():
            return FitAnswer(True)
    except _OverBudget:
        return FitAnswer(None, "too many device combinations to try")
    if unknown:
        return FitAnswer(None, unknown)
    return FitAnswer(False, error)


def least_devices(spec: ClaimSpec) -> int:
    """The fewest devices any allocation of the claim takes (``All`` at least one)."""
    return sum(
        min((1 if a.all_devices else a.count for a in r.alternatives), default=0)
        for r in spec.requests
    )


def fit(
    claims: Sequence[ClaimSpec], devices: Sequence[Device], inventory: DeviceInventory
) -> FitAnswer:
    """Can all ``claims`` be allocated together from ``devices`` (one node's)?"""
    # A claim gets at most AllocationResultsMaxSize devices whatever the node has: answered
    # before any work that could grow with a count.
    if any(least_devices(claim) > ALLOCATION_RESULTS_MAX_SIZE for claim in claims):
        return FitAnswer(False)
    if (
        any(claim.constraints for claim in claims)
        or any(d.consumes or d.shared for d in devices)
        or any(sub.admin for claim in claims for r in claim.requests for sub in r.alternatives)
    ):
        return _fit_by_search(claims, devices, inventory)
    matcher = _Matcher(inventory)
    classes = inventory.classes
    requests = [(ci, r) for ci, claim in enumerate(claims) for r in claim.requests]
    choices = [range(len(r.alternatives)) for _, r in requests]
    shared = [d.shared for d in devices]
    unknown = ""
    error = ""
    for n, combination in enumerate(itertools.product(*choices)):
        if n >= _MAX_COMBINATIONS:
            return FitAnswer(None, "too many firstAvailable combinations to try")
        slots: list[list[int]] = []
        taken: set[int] = set()
        per_claim = [0] * len(claims)
        failed = False
        for (claim_index, request), choice in zip(requests, combination, strict=True):
            sub = request.alternatives[choice]
            if sub.device_class not in classes:
                failed = True
                break
            eligible, problem, cannot_tell = _eligible(sub, devices, classes, matcher)
            error = error or problem
            if cannot_tell:
                unknown = unknown or problem
            need = len(eligible) if sub.all_devices else sub.count
            per_claim[claim_index] += need
            # Before any list as long as the count: a claim past AllocationResultsMaxSize
            # never fits, so no count past it becomes work.
            if per_claim[claim_index] > ALLOCATION_RESULTS_MAX_SIZE or (
                sub.all_devices and not eligible
            ):
                failed = True
                break
            if sub.admin:
                failed = len(eligible) < need
            elif sub.all_devices:
                clash = [d for d in eligible if d in taken and not shared[d]]
                taken.update(d for d in eligible if not shared[d])
                failed = bool(clash)
            else:
                slots.extend([eligible] * need)
            if failed:
                break
        if not failed and _assign(slots, taken, shared):
            return FitAnswer(True)
    if unknown:
        return FitAnswer(None, unknown)
    return FitAnswer(False, error)


# --- nodes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidates:
    """The device profiles of the nodes a pod can land on."""

    profiles: tuple[Profile, ...]
    # A declared node pool (scale from zero) is among them: its devices are unknown.
    pool: bool = False


def candidates(
    inventory: DeviceInventory,
    nodes: Inventory | None,
    placement: Placement,
    allowed: Sequence[tuple[Mapping[str, Any], ...] | None] = (),
) -> Candidates:
    """Distinct device profiles of the nodes ``placement`` admits (cordoned ones only for
    a pod that tolerates the cordon), and that the node selectors of already allocated
    claims in ``allowed`` admit."""
    key = ("nodes", id(nodes), placement.key(), tuple(map(repr, allowed)))
    memo = inventory._memo
    known = memo.get(key)
    if known is not None and known[0] is nodes:
        return known[1]  # type: ignore[no-any-return]
    pool = False
    members: list[Node] = []
    if nodes is None:
        members = [Node(name=name) for name in inventory.node_names()]
    else:
        names_nodes = placement.names_nodes(nodes.identity_labels)
        for shape in nodes.shapes:
            # NodeUnschedulable: a pod that tolerates the unschedulable taint may use it.
            if shape.unschedulable and not placement.may_use_cordoned:
                continue
            if shape.pool and shape.example.admits is not None:
                # A node Karpenter may create (issue 23): its rules, not labels, decide.
                pool = pool or shape.example.admits(placement)
                continue
            group = shape.members if names_nodes or allowed else shape.members[:1]
            admitted = [n for n in group if placement.admits(n.labels, n.name, shape.taints)]
            if not admitted:
                continue
            if shape.pool:
                pool = True
                continue
            members.extend(admitted if names_nodes or allowed else shape.members)
        # A pool of unknown size may bring nodes with any devices.
        pool = pool or bool(nodes.unbounded_for(placement))
    profiles: dict[Any, Profile] = {}
    for node in members:
        if any(t is not None and not terms_match(t, node.labels, node.name) for t in allowed):
            continue
        profile = inventory.profile(node)
        if profile.devices:
            profiles.setdefault(profile.key, profile)
    answer = Candidates(tuple(profiles.values()), pool)
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[key] = (nodes, answer)
    return answer


def reads_identity(claims: Sequence[ClaimSpec], inventory: DeviceInventory) -> bool:
    """Whether the claims' selectors (their classes' too) or constraints read devices'
    identity attributes: nodes of one profile key may then answer differently, so each
    node is asked on its own."""
    matcher = _Matcher(inventory)
    return any(
        matcher.exact(e)
        for claim in claims
        for r in claim.requests
        for a in r.alternatives
        for e in (*a.selectors, *getattr(inventory.classes.get(a.device_class), "selectors", ()))
    ) or any(c.attribute in inventory.identity for claim in claims for c in claim.constraints)


def fits_somewhere(
    claims: tuple[ClaimSpec, ...], found: Candidates, inventory: DeviceInventory
) -> FitAnswer:
    """True as soon as one candidate node fits; unknown if one cannot be told."""
    exact = reads_identity(claims, inventory)
    unknown: FitAnswer | None = None
    last = FitAnswer(False)
    for profile in found.profiles:
        key = ("fit", claims, profile.example if exact else profile.key)
        answer = inventory._memo.get(key)
        if answer is None:
            answer = fit(claims, profile.devices, inventory)
            if not review_spent():
                inventory._memo[key] = answer
        if answer.fits:
            return answer
        if answer.fits is None:
            unknown = answer
        else:
            last = answer
    if found.pool:
        return FitAnswer(None, "a node pool may add nodes whose devices are not known yet")
    return unknown or last


# --- findings ---------------------------------------------------------------------------


def _counts(
    sub: SubRequest, profiles: Sequence[Profile], inventory: DeviceInventory
) -> tuple[int, int, str]:
    """Most devices of the class on one node; most that also pass the request's
    selectors; the first request selector that leaves none."""
    matcher = _Matcher(inventory)
    classes = inventory.classes
    device_class = classes.get(sub.device_class)
    class_selectors = device_class.selectors if device_class else ()
    best_class = best_all = 0
    blocking = ""
    for profile in profiles:
        of_class = [
            d
            for d in profile.devices
            if all(matcher.matches(e, d) is True for e in class_selectors)
        ]
        best_class = max(best_class, len(of_class))
        remaining = of_class
        for expression in sub.selectors:
            remaining = [d for d in remaining if matcher.matches(expression, d) is True]
            if not remaining and of_class:
                blocking = blocking or expression
        best_all = max(best_all, len(remaining))
    return best_class, best_all, blocking


@dataclass(frozen=True, slots=True)
class DeviceCounts:
    """Devices of one request's class on the best usable node: all of them, those the
    request may take (selectors and taints), and why the others are kept from it."""

    of_class: int
    usable: int
    tainted: int = 0  # on that node: matching but tainted, not tolerated
    taint: str = ""  # "key=value:effect" of the first such taint
    example: str = ""  # the node
    # On that node: devices a selector could not be evaluated on (neither counted nor
    # excluded: a reader that would refuse for want of devices must count them).
    unknown: int = 0


def _undecided(matcher: _Matcher, expressions: Sequence[str], device: Device) -> bool:
    """No selector is false or fails the device, and one could not be evaluated."""
    results = [matcher.matches(e, device) for e in expressions]
    return all(
        r is True or (isinstance(r, SelectorError) and r.unsupported) for r in results
    ) and any(r is not True for r in results)


def device_counts(
    sub: SubRequest, profiles: Sequence[Profile], inventory: DeviceInventory
) -> DeviceCounts:
    """Most devices one usable node gives ``sub``; taints count as the allocator's
    ``taintPreventsAllocation`` does (NoSchedule and NoExecute, unless tolerated)."""
    matcher = _Matcher(inventory)
    device_class = inventory.classes.get(sub.device_class)
    expressions = (*(device_class.selectors if device_class else ()), *sub.selectors)
    best = DeviceCounts(0, 0)
    for profile in profiles:
        matching = [
            d for d in profile.devices if all(matcher.matches(e, d) is True for e in expressions)
        ]
        usable = [d for d in matching if sub.tolerates(d)]
        kept = [d for d in matching if not sub.tolerates(d)]
        taint = ""
        if kept:
            key, value, effect = next(
                t for t in kept[0].taints if t[2] in ("NoSchedule", "NoExecute")
            )
            taint = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
        unknown = sum(
            1 for d in profile.devices if sub.tolerates(d) and _undecided(matcher, expressions, d)
        )
        counts = DeviceCounts(
            len(matching), len(usable), len(kept), taint, profile.example, unknown
        )
        if (counts.usable, counts.of_class, counts.unknown) > (
            best.usable,
            best.of_class,
            best.unknown,
        ):
            best = counts
    return best


def request_shortfall(sub: SubRequest, profile: Profile, inventory: DeviceInventory) -> str:
    """Why one node's devices cannot serve ``sub``, in a few words naming the selector or
    the taint that keeps them away; "" when they can (for ``explain``'s per-node answer)."""
    of_class, matching, blocking = _counts(sub, (profile,), inventory)
    need = 1 if sub.all_devices else sub.count
    if not of_class:
        return f"no {sub.device_class} device"
    if not matching and blocking:
        return (
            f"selector {blocking!r} matches no {sub.device_class} device here ({of_class} of them)"
        )
    counts = device_counts(sub, (profile,), inventory)
    if counts.usable < need <= counts.of_class:
        return (
            f"{counts.usable} of {need} {sub.device_class} devices; {counts.tainted} more "
            f"tainted {counts.taint}, not tolerated"
        )
    if matching < need:
        return f"{matching} of {need} {sub.device_class} devices match"
    return ""


def class_devices(inventory: DeviceInventory, profile: Profile) -> tuple[tuple[str, int, int], ...]:
    """Per device class: the devices of the profile its selectors match, and how many of
    those are tainted NoSchedule or NoExecute (for ``gpu-webhook inventory``)."""
    out = []
    for name in sorted(inventory.classes):
        counts = device_counts(SubRequest(name=name, device_class=name), (profile,), inventory)
        if counts.of_class:
            out.append((name, counts.of_class, counts.of_class - counts.usable))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GPUDevices:
    """Where a snapshot's GPUs are (devices a GPU class selects): the nodes slices name, and
    the node selectors of GPUs that several nodes may use.

    A node ``holds`` GPUs when its ResourceSlices hold a device that a GPU class
    (``gpuDeviceClasses``) selects: a DRA driver serves GPUs there, device plugin or not.
    Taints do not matter (a tainted GPU is still in the node); a selector this webhook
    cannot evaluate selects nothing here, since calling a node a GPU node only ever adds
    findings."""

    named: frozenset[str]
    reachable: tuple[tuple[bool, tuple[Mapping[str, Any], ...] | None], ...]

    def holds(self, node: Node) -> bool:
        if node.name in self.named:
            return True
        return any(
            every or (terms is not None and terms_match(terms, node.labels, node.name))
            for every, terms in self.reachable
        )


def gpu_devices(inventory: DeviceInventory, is_gpu_class: Callable[[str], bool]) -> GPUDevices:
    """Where the snapshot's GPUs are (``GPUDevices``), once per snapshot and matcher: the
    cost follows the slices, not the nodes, most of which have none. Snapshots that differ
    only in claims share the answer (they share the memo)."""
    key = ("gpu-devices", id(is_gpu_class))
    known = inventory._memo.get(key)
    if known is not None and known[0] is is_gpu_class:
        return known[1]  # type: ignore[no-any-return]
    selectors = [c.selectors for name, c in sorted(inventory.classes.items()) if is_gpu_class(name)]
    matcher = _Matcher(inventory)
    exact = any(matcher.exact(e) for chosen in selectors for e in chosen)
    seen: dict[Any, bool] = {}

    def gpu(device: Device) -> bool:
        # Devices alike but for their identity (uuid, bus id) are matched once.
        key = device if exact else inventory.content(device)
        known = seen.get(key)
        if known is None:
            known = seen[key] = inventory.complete and any(
                all(matcher.matches(e, device) is True for e in chosen) for chosen in selectors
            )
        return known

    named = frozenset(name for name, device in inventory.named_devices() if gpu(device))
    reachable = tuple(
        (every, terms) for device, every, terms in inventory.reachable_devices if gpu(device)
    )
    answer = GPUDevices(named, reachable)
    if not review_spent():
        inventory._memo[key] = (is_gpu_class, answer)
    return answer


def shortfall(
    claims: Sequence[PodClaim],
    found: Candidates,
    everywhere: Candidates,
    inventory: DeviceInventory,
    usable: str = "the pod can use",
) -> tuple[str, str]:
    """What is missing, worded for the user: the first request no node can meet alone."""
    for pod_claim in claims:
        if pod_claim.claim is None:
            continue
        least = least_devices(pod_claim.claim.spec)
        if least > ALLOCATION_RESULTS_MAX_SIZE and pod_claim.counted:
            owner = f'claim "{pod_claim.name}" ({pod_claim.source})' if pod_claim.name else "it"
            return (
                f"{owner} needs at least {least} devices, and Kubernetes allocates at most "
                f"{ALLOCATION_RESULTS_MAX_SIZE} devices to one claim (AllocationResultsMaxSize), "
                "so the scheduler can never allocate it. Ask for at most "
                f"{ALLOCATION_RESULTS_MAX_SIZE} devices per claim, or spread them over more "
                "claims.",
                f"{least} devices in one claim, at most {ALLOCATION_RESULTS_MAX_SIZE} allowed",
            )
        for request in pod_claim.claim.spec.requests:
            sub = request.alternatives[0] if request.alternatives else None
            if sub is None:
                continue
            where = f'request "{request.name}"'
            if not pod_claim.counted:
                where = (
                    f"the pod's {pod_claim.name} (served by DRA device class {sub.device_class})"
                )
            elif pod_claim.name:
                where = f'claim "{pod_claim.name}" ({pod_claim.source}) {where}'
            need = 1 if sub.all_devices else sub.count
            of_class, matching, blocking = _counts(sub, found.profiles, inventory)
            if of_class == 0:
                anywhere, _, _ = _counts(sub, everywhere.profiles, inventory)
                text = (
                    f"{where} asks for devices of class {sub.device_class}, "
                    f"but no node {usable} has any"
                )
                if anywhere:
                    text += (
                        f"; other nodes have them (up to {anywhere} on one), but the pod's "
                        "nodeSelector, node affinity or tolerations exclude them. Let the pod "
                        "use those nodes."
                    )
                else:
                    text += (
                        ". No node publishes such devices: check the class name and the DRA driver."
                    )
                return text, f"no {sub.device_class} device on a usable node"
            if matching == 0 and blocking:
                return (
                    f"{where}: no device of class {sub.device_class} on a node {usable} "
                    f"matches the selector {blocking!r}. Fix or relax the selector.",
                    f"selector matches no {sub.device_class} device",
                )
            counts = device_counts(sub, found.profiles, inventory)
            if counts.usable < need <= counts.of_class and len(request.alternatives) == 1:
                return (
                    f"{where} asks for {need} devices of class {sub.device_class}; the node "
                    f"{usable} with the most such devices, {counts.example}, has "
                    f"{counts.of_class}, but {counts.tainted} of them are tainted "
                    f"{counts.taint} and the request does not tolerate that, which leaves "
                    f"{counts.usable}. Add a toleration for the taint to the request, or ask "
                    f"for at most {counts.usable}.",
                    f"{need} {sub.device_class} asked, {counts.usable} untainted on a usable node",
                )
            if matching < need and len(request.alternatives) == 1:
                return (
                    f"{where} asks for {need} devices of class {sub.device_class}, but the node "
                    f"{usable} with the most such devices has {matching}. Ask for at most "
                    f"{matching}, or spread the work over more pods.",
                    f"{need} {sub.device_class} asked, a usable node has at most {matching}",
                )
    for pod_claim in claims:
        constraints = pod_claim.claim.spec.constraints if pod_claim.claim else ()
        if constraints:
            names = ", ".join(sorted({"/".join(c.attribute) for c in constraints}))
            owner = f'claim "{pod_claim.name}"' if pod_claim.name else "the claim"
            return (
                f"{owner} needs devices that share {names} (matchAttribute), and no node "
                f"{usable} has enough matching devices that do. Relax the constraint or ask "
                "for fewer devices.",
                f"no usable node has enough devices sharing {names}",
            )
    specs = [c.claim.spec for c in claims if c.claim is not None and c.gpu_count]
    if any(
        _fit_by_search(specs, profile.devices, inventory, counters=False).fits
        for profile in found.profiles
        if any(d.consumes for d in profile.devices)
    ):
        return (
            f"the pod's claims cannot all be met on any one node {usable}: the devices they "
            "would take share their GPU's counters (partitions of one GPU, or the GPU itself) "
            "and together need more than it has. Ask for partitions that fit one GPU.",
            "claims need more of a GPU's partitions than it has",
        )
    if any(d.shared for profile in found.profiles for d in profile.devices):
        asked = sorted(
            {
                f"{quantity_text(name, int(amount))} of {name}"
                for c in claims
                if c.claim is not None
                for r in c.claim.spec.requests
                for sub in r.alternatives
                for name, amount in sub.capacity
            }
        )
        each = f" (each asks {', '.join(asked)})" if asked else ""
        return (
            f"the pod's claims cannot all be met on any one node {usable}: they share devices "
            f"that allow multiple allocations{each}, and what they consume of one device's "
            "capacity, rounded up by its requestPolicy, is more than it has. Ask for smaller "
            "shares, or fewer claims per pod.",
            "claims consume more of a shared device's capacity than it has",
        )
    return (
        "the pod's claims cannot all be met on any one node it can use: together they need "
        "more matching devices than a single node has. Ask for fewer devices per pod.",
        "claims need more devices together than any usable node has",
    )


def _finding(check: str, settings_action: str, message: str, summary: str, where: str) -> Finding:
    return Finding("builtin", check, action_of(settings_action), message, summary, where)


def unevaluated_selector(
    reason: str, *, actions: Mapping[str, str], where: str, subject: str = "the pod's claims"
) -> Finding:
    """A CEL selector the webhook could not evaluate: the claims' fit is unknown, never a
    denial (``deviceSelector``, a warning by default)."""
    return _finding(
        "deviceSelector",
        actions.get("deviceSelector", "warn"),
        f"the webhook could not evaluate a device selector ({reason}); "
        f"whether {subject} fit was not checked.",
        "device selector not evaluated; claims not checked",
        where,
    )


def invalid_claim_findings(
    spec: ClaimSpec, *, actions: Mapping[str, str], where: str, owner: str
) -> Iterator[Finding]:
    """A spec the API server refuses (a count of zero or past int64, more requests,
    sub-requests, selectors or tolerations than its validation allows): one finding per
    field, naming the bound, under ``deviceClaims``. Such a claim is never created, so
    none of its devices can be allocated."""
    for problem in spec.invalid[:4]:
        yield _finding(
            "deviceClaims",
            actions.get("deviceClaims", "deny"),
            f"{owner}is not a valid claim: {problem} (the API server's validation of "
            "resource.k8s.io refuses it, so its devices are never allocated). Fix the field.",
            "claim refused by the API server's validation",
            where,
        )


def claim_findings(
    claims: PodClaims,
    *,
    placement: Placement,
    nodes: Inventory | None,
    devices: DeviceInventory,
    actions: Mapping[str, str],
    where: str,
    judge_fit: bool = True,
) -> Iterator[Finding]:
    """Findings for the pod's claims: missing claims, unknown classes, no fit (unless
    ``judge_fit`` is false: ``wholepod`` judges claims and resources on one node)."""
    for missing in claims.missing:
        yield _finding(
            "missingClaim",
            actions.get("missingClaim", "warn"),
            f'claim "{missing.name}" refers to {missing.source}, which the webhook has not '
            "seen (not created yet, or not in its cache), so its devices were not checked. "
            "Create it before the pod.",
            f"{missing.source} not found; devices not checked",
            where,
        )
    known = [c for c in claims.claims if c.claim is not None]
    if not known or not devices.complete:
        return
    invalid = False
    for pod_claim in known:
        assert pod_claim.claim is not None
        owner = f'claim "{pod_claim.name}" ({pod_claim.source}) '
        for finding in invalid_claim_findings(
            pod_claim.claim.spec, actions=actions, where=where, owner=owner
        ):
            invalid = True
            yield finding
    if invalid:
        return
    unknown_classes = False
    for pod_claim in known:
        assert pod_claim.claim is not None
        for finding in class_findings(
            pod_claim.claim.spec, devices, actions, where, f'claim "{pod_claim.name}" '
        ):
            unknown_classes = True
            yield finding
    if unknown_classes or not any(c.gpu_count for c in known) or not judge_fit:
        return
    # Only GPU claims: other drivers' devices (a ComputeDomain's channels) may appear only
    # once their own controller has run, and judging them could deny a pod that will run.
    pending = tuple(
        c.claim.spec for c in known if c.claim is not None and not c.claim.allocated and c.gpu_count
    )
    allowed = tuple(
        c.claim.allocation_terms for c in known if c.claim is not None and c.claim.allocated
    )
    found = candidates(devices, nodes, placement, allowed)
    answer = (
        fits_somewhere(pending, found, devices)
        if pending
        else FitAnswer(bool(found.profiles) or None)
    )
    if answer.fits:
        return
    if answer.fits is None:
        if answer.reason and "selector" in answer.reason:
            yield unevaluated_selector(answer.reason, actions=actions, where=where)
        return
    everywhere = candidates(devices, nodes, EVERYWHERE)
    message, summary = shortfall(known, found, everywhere, devices)
    if answer.reason and "selector" in answer.reason:
        message += f" (CEL error: {answer.reason})"
    yield _finding("deviceClaims", actions.get("deviceClaims", "deny"), message, summary, where)


def looks_like_gpu_class(
    spec: ClaimSpec, devices: DeviceInventory, is_gpu_class: Callable[[str], bool]
) -> bool:
    """Whether a request names a class that does not exist but is close to a GPU class
    (a typo such as ``mig.nvidia.comm``): judged as the GPU claim it was meant to be."""
    gpu_classes = [name for name in devices.classes if is_gpu_class(name)]
    return any(
        sub.device_class not in devices.classes
        and difflib.get_close_matches(sub.device_class, gpu_classes, n=1)
        for request in spec.requests
        for sub in request.alternatives
    )


def class_findings(
    spec: ClaimSpec,
    devices: DeviceInventory,
    actions: Mapping[str, str],
    where: str,
    claim_name: str,
) -> Iterator[Finding]:
    for request in spec.requests:
        for sub in request.alternatives:
            if sub.device_class in devices.classes:
                continue
            offered = ", ".join(sorted(devices.classes)) or "none"
            close = difflib.get_close_matches(sub.device_class, list(devices.classes), n=1)
            hint = f" Did you mean {close[0]}?" if close else ""
            yield _finding(
                "unknownDeviceClass",
                actions.get("unknownDeviceClass", "deny"),
                f'{claim_name}request "{sub.name}" names device class '
                f"{sub.device_class!r}, which does not exist; this cluster has: {offered}.{hint}",
                f"device class {sub.device_class} does not exist",
                where,
            )


def gpu_class_matcher(
    devices: DeviceInventory, *, is_gpu_class: Callable[[str], bool], resources: GPUResources
) -> Callable[[str], bool]:
    """Which device classes are GPU classes: named in ``gpuDeviceClasses``, or serving an
    ``extendedResourceName`` that is a GPU resource."""
    memo = devices._memo
    key = ("gpu-classes", id(resources), id(is_gpu_class))
    known = memo.get(key)
    if known is not None and known[0] is resources and known[1] is is_gpu_class:
        return known[2]  # type: ignore[no-any-return]
    served = frozenset(
        name
        for name, c in devices.classes.items()
        if c.extended_resource and resources.is_gpu(c.extended_resource)
    )
    answer = (lambda name: name in served or is_gpu_class(name)) if served else is_gpu_class
    memo[key] = (resources, is_gpu_class, answer)
    return answer


def gpu_names(
    resources: GPUResources,
    *,
    is_gpu_class: Callable[[str], bool],
    devices: DeviceInventory | None,
) -> tuple[GPUResources, Callable[[str], bool]]:
    """The GPU resources and GPU device classes with what DRA adds to them (the names GPU
    classes serve, the classes that serve GPU names): one answer for every reader of a
    review, so that a pod is a GPU pod to the audit exactly when it is to the engine."""
    if devices is None:
        return resources, is_gpu_class
    gpus = served_gpu_resources(resources, devices=devices, is_gpu_class=is_gpu_class)
    return gpus, gpu_class_matcher(devices, is_gpu_class=is_gpu_class, resources=gpus)


def served_gpu_resources(
    resources: GPUResources,
    *,
    devices: DeviceInventory | None,
    is_gpu_class: Callable[[str], bool],
) -> GPUResources:
    """The policy's GPU resources, plus every extended resource a GPU device class serves
    (``gpuDeviceClasses``): its ``extendedResourceName`` and the implicit
    ``deviceclass.resource.kubernetes.io/<class>``. A pod asking for one gets devices of
    that class (KEP-5004), so it is a GPU demand whatever ``gpuResources`` lists; a name a
    non-GPU class serves stays an extended resource like any other. A class is a GPU class
    by name (``gpuDeviceClasses``) or by what it serves: NVIDIA's per-profile classes
    (``mig-1g-12gb.gpu.nvidia.com`` serving ``nvidia.com/mig-1g.12gb``, its
    demo/specs/extended-resources) are GPUs under any name."""
    if devices is None or not devices.extended:
        return resources
    memo = devices._memo
    known = memo.get("gpu-resources")
    if known is not None and known[0] is resources and known[1] is is_gpu_class:
        return known[2]  # type: ignore[no-any-return]
    gpu = gpu_class_matcher(devices, is_gpu_class=is_gpu_class, resources=resources)
    extra = sorted(
        name
        for name, device_class in devices.extended.items()
        if gpu(device_class) and not resources.is_gpu(name)
    )
    answer = (
        GPUResources((*resources.entries, *((n, False) for n in extra))) if extra else resources
    )
    memo["gpu-resources"] = (resources, is_gpu_class, answer)
    return answer


def extended_resource_claims(
    pod: PodGPUs, claims: PodClaims, *, devices: DeviceInventory | None
) -> tuple[PodGPUs, PodClaims]:
    """GPU resources that a device class serves (``extendedResourceName``, or the implicit
    ``deviceclass.resource.kubernetes.io/<class>``): taken out of the pod's request vector
    and held as a claim for that class, as the scheduler's DynamicResources plugin does
    (KEP-5004; ``extendeddynamicresources.go``, ``filterExtendedResources``).

    Which one a node uses is decided per node: where the node's allocatable has the
    resource (a device plugin) NodeResourcesFit counts it, else the class's devices serve
    it. ``webhook.engine.scheduling.wholepod`` judges the pod node by node; the claim made
    here (``counted`` False: its GPUs are already counted as the resource) stands for the
    DRA side only.

    Without the slices (``check`` given DeviceClasses but no ResourceSlices) the resource
    is still taken out: the nodes without it in allocatable may hold the class's devices,
    so no node count can deny it (the claim checks say the devices were not checked)."""
    if devices is None or not devices.extended:
        return pod, claims
    served = {r: devices.extended[r] for r in pod.effective if r in devices.extended}
    if not served:
        return pod, claims
    extra = []
    for resource, device_class in sorted(served.items()):
        need = pod.effective[resource]
        spec = ClaimSpec(_served_requests(pod, resource, device_class))
        source = f"resource {resource}, served by device class {device_class}"
        claim = Claim(namespace="", name="", spec=spec)
        extra.append(
            PodClaim(resource, source, claim, need, frozenset({resource}), (device_class,), False)
        )
    effective = {r: n for r, n in pod.effective.items() if r not in served}
    kept = replace(
        pod,
        effective=effective,
        vector=tuple((r, n) for r, n in pod.vector if r not in served),
        per_container=tuple((r, n) for r, n in pod.per_container if r not in served),
    )
    return kept, PodClaims(
        (*claims.claims, *extra),
        claims.holders,
        claims.held,
        served=tuple(served.items()),
        served_per_container=tuple((r, n) for r, n in pod.per_container if r in served),
        no_gpu=claims.no_gpu,
    )


def _served_requests(pod: PodGPUs, resource: str, device_class: str) -> tuple[DeviceRequest, ...]:
    """The requests of the claim the scheduler makes for ``resource`` on a node where the
    class serves it (``createRequestsAndMappings``, ``createResourceRequestAndMappings``):
    one ``ExactCount`` request of the class per long-lived container (app containers and
    sidecars) asking for it, and one for the most that an init container needs beyond the
    requests of the long-lived containers after it, which it reuses. Together they count
    the pod's effective request; apart, two of them may share a device that allows
    multiple allocations, as one request never does."""

    def request(index: int, count: int) -> DeviceRequest:
        name = f"container-{index}-{resource}"
        sub = SubRequest(name=name, device_class=device_class, count=count)
        return DeviceRequest(name=name, alternatives=(sub,))

    counts = [c.gpus.get(resource, 0) for c in pod.containers]
    short = [c.section == "initContainers" and not c.sidecar for c in pod.containers]
    requests = [request(i, n) for i, n in enumerate(counts) if n and not short[i]]
    most, where = 0, -1
    for i, n in enumerate(counts):
        if n and short[i]:
            later = sum(m for j, m in enumerate(counts) if j >= i and not short[j])
            if n - later > most:
                most, where = n - later, i
    if most:
        requests.append(request(where, most))
    return tuple(sorted(requests, key=lambda r: r.name))


def with_claim_gpus(pod: PodGPUs, claims: PodClaims) -> PodGPUs:
    """The pod's GPU asks with its claims' GPUs counted in ``total``: rules match it and
    per-pod limits see them (container and resource views stay as requested); containers
    whose claims give no GPU are marked so (``Container.claims_no_gpu``)."""
    if claims.no_gpu:
        containers = [
            replace(c, claims_no_gpu=True) if c.path in claims.no_gpu else c for c in pod.containers
        ]
        pod = replace(pod, containers=containers)
    if not claims.gpu_count:
        return pod
    return replace(pod, total=pod.total + claims.gpu_count)
