"""The DRA fit against the Kubernetes allocator's semantics, on random claims and devices.

The reference below is a plain transcription of the structured allocator's search as 1.36
runs it (``k8s.io/dynamic-resource-allocation/structured/internal/incubating/
allocator_incubating.go``: ``Allocate``, ``validateDeviceRequest``, ``allocateOne``,
``isSelectable``, ``allocateDevice``; ``consumable_capacity.go``): claims one after the
other, requests in order, ``firstAvailable`` sub-requests tried in order, devices tried one
by one with backtracking and each request going on from the device after the last one it
took (``nextLocation``); a device held by any of the pod's claims skipped, except by an
``adminAccess`` request of another claim (``allocatingDeviceForClaim``); a device that
allows multiple allocations shared while what its allocations consume of its memory fits
(``CmpRequestOverCapacity``, with ``requestPolicy`` rounding and refusals, an unrequested
capacity taken at its default or whole), and its counters consumed once
(``skipCounterCheck``); ``All`` taking every selectable device of the node and needing at
least one; ``matchAttribute`` constraints checked as each device is added
(``matchAttributeConstraint.add``); shared counters of partitionable devices
(``checkAvailableCounters``) and device taints that the request does not tolerate
(``taintPreventsAllocation``). Requests without selectors of their own stand for the claim
the scheduler makes for an extended resource that a class maps (KEP-5004,
``createRequestsAndMappings``: the class's selectors, ``ExactCount``, no tolerations). Its
selectors are Python predicates; the engine gets the same selectors as CEL text, so the
CEL evaluation is under test too. The engine answers the same question with a matching per
combination of choices or its own search; the two must agree on every generated case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.resources.devices import (
    ClaimSpec,
    Constraint,
    Device,
    DeviceClass,
    DeviceInventory,
    DeviceRequest,
    RequestPolicy,
    Slice,
    SubRequest,
)
from webhook.engine.scheduling.dra import fit

DRIVER = "gpu.example.com"
GI = 1024**3


@dataclass(frozen=True)
class Sel:
    """A selector as CEL text (for the engine) and as a predicate (for the reference)."""

    cel: str
    test: Callable[[Device], bool]


def _attr(device: Device, name: str) -> object:
    return next((v for d, n, v in device.attributes if (d, n) == (DRIVER, name)), None)


def _memory(device: Device) -> Fraction:
    return next(v for d, n, v in device.capacity if (d, n) == (DRIVER, "memory"))


MODELS = ("a100", "h100", "l40s")
SELECTORS = [
    *(
        Sel(f'device.attributes["{DRIVER}"].model == "{m}"', lambda d, m=m: _attr(d, "model") == m)
        for m in MODELS
    ),
    *(
        Sel(
            f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{g}Gi")) >= 0',
            lambda d, g=g: _memory(d) >= g * GI,
        )
        for g in (24, 48, 80)
    ),
    Sel(f'"nvlink" in device.attributes["{DRIVER}"]', lambda d: _attr(d, "nvlink") is not None),
    Sel('"x" in device.attributes["other.example.com"]', lambda _: False),
]
CLASSES = {
    "gpu": DeviceClass("gpu", (f'device.driver == "{DRIVER}"',)),
    "big": DeviceClass(
        "big", (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) > 0',)
    ),
}
CLASS_TESTS: dict[str, Callable[[Device], bool]] = {
    "gpu": lambda d: d.driver == DRIVER,
    "big": lambda d: _memory(d) > 40 * GI,
}


# Capacity request policies a device's memory may carry (consumable capacity).
POLICIES = (
    None,
    RequestPolicy(default=Fraction(10 * GI), minimum=Fraction(10 * GI), step=Fraction(10 * GI)),
    RequestPolicy(values=(Fraction(20 * GI), Fraction(40 * GI))),
)


@st.composite
def devices(draw: st.DrawFn) -> list[Device]:
    out = []
    # One node in three has partitionable devices (consuming the GPU's shared counter).
    partitionable = draw(st.integers(0, 2)) == 0
    for i in range(draw(st.integers(0, 8))):
        attributes = [(DRIVER, "model", draw(st.sampled_from(MODELS)))]
        if draw(st.booleans()):
            attributes.append((DRIVER, "nvlink", True))
        attributes.append((DRIVER, "pcieRoot", draw(st.sampled_from(("pci0", "pci1")))))
        memory = Fraction(draw(st.sampled_from((16, 40, 80))) * GI)
        slices = draw(st.sampled_from((0, 1, 2))) if partitionable else 0
        shared = draw(st.integers(0, 4)) == 0
        policy = draw(st.sampled_from(POLICIES)) if shared else None
        out.append(
            Device(
                driver=DRIVER,
                pool="node-0",
                name=f"gpu-{i}",
                attributes=tuple(sorted(attributes, key=lambda a: a[1])),
                capacity=((DRIVER, "memory", memory),),
                shared=shared,
                consumes=(("gpu", (("slices", Fraction(slices)),)),) if slices else (),
                taints=(("maintenance", "", "NoSchedule"),) if draw(st.integers(0, 4)) == 0 else (),
                policies=((DRIVER, "memory", policy),) if policy is not None else (),
            )
        )
    return out


MAINTENANCE = (("key", "maintenance"), ("operator", "Exists"))


def _tolerated(sub: SubRequest, device: Device) -> bool:
    return not device.taints or MAINTENANCE in sub.tolerations


def _slices(device: Device) -> Fraction:
    return sum((a for _, counters in device.consumes for _, a in counters), Fraction(0))


def _consumed(sub: SubRequest, device: Device) -> Fraction | None:
    """Memory one allocation takes (``calculateConsumedCapacity``), or None: refused."""
    policy = device.policies[0][2] if device.policies else None
    asked = dict(sub.capacity).get("memory")
    if asked is None:
        used = policy.default if policy and policy.default is not None else _memory(device)
    elif policy is None:
        used = asked
    elif policy.minimum is not None:
        step = policy.step or Fraction(1)
        used = policy.minimum
        while used < asked:
            used += step
    else:
        used = next((v for v in policy.values if asked <= v), asked)
    if policy is not None and used != policy.default:
        if policy.values and used not in policy.values:
            return None
        if policy.step and (used - (policy.minimum or 0)) % policy.step:
            return None
    return used if used <= _memory(device) else None


@st.composite
def sub_request(draw: st.DrawFn, name: str) -> tuple[SubRequest, list[Sel]]:
    chosen = draw(st.lists(st.sampled_from(SELECTORS), max_size=1))
    all_devices = draw(st.integers(0, 5)) == 0
    memory = draw(st.sampled_from((None, None, 10, 20, 30, 90)))
    sub = SubRequest(
        name=name,
        # "served": the claim the scheduler makes for an extended resource that the class
        # maps (its selectors only: extendeddynamicresources.go, createRequestsAndMappings).
        device_class=draw(st.sampled_from(sorted(CLASSES))),
        selectors=tuple(s.cel for s in chosen),
        all_devices=all_devices,
        count=1 if all_devices else draw(st.integers(1, 2)),
        admin=draw(st.integers(0, 5)) == 0,
        tolerations=(MAINTENANCE,) if draw(st.integers(0, 2)) == 0 else (),
        capacity=(("memory", Fraction(memory * GI)),) if memory else (),
    )
    return sub, chosen


@st.composite
def claims(draw: st.DrawFn) -> tuple[list[ClaimSpec], dict[str, list[Sel]]]:
    specs = []
    tests: dict[str, list[Sel]] = {}
    for c in range(draw(st.integers(1, 2))):
        requests = []
        for r in range(draw(st.integers(1, 2))):
            alternatives = []
            for a in range(draw(st.integers(1, 2))):
                sub, chosen = draw(sub_request(f"c{c}r{r}a{a}"))
                tests[sub.name] = chosen
                alternatives.append(sub)
            requests.append(DeviceRequest(name=f"c{c}r{r}", alternatives=tuple(alternatives)))
        constraints = []
        if draw(st.integers(0, 2)) == 0:
            names = [r.name for r in requests] + [a.name for r in requests for a in r.alternatives]
            constraints.append(
                Constraint(
                    requests=frozenset(draw(st.lists(st.sampled_from(names), max_size=2))),
                    attribute=(DRIVER, draw(st.sampled_from(("pcieRoot", "nvlink", "model")))),
                )
            )
        specs.append(ClaimSpec(tuple(requests), tuple(constraints)))
    return specs, tests


def reference(
    specs: Sequence[ClaimSpec], node: Sequence[Device], tests: dict[str, list[Sel]], slices: int
) -> bool:
    """The allocator's exhaustive search (``slices``: the GPU's shared counter)."""

    def selectable(sub: SubRequest, device: Device) -> bool:
        return (
            CLASS_TESTS[sub.device_class](device)
            and all(s.test(device) for s in tests[sub.name])
            and _tolerated(sub, device)
            and _consumed(sub, device) is not None
        )

    consumed = [Fraction(0)]
    slots = [(ci, r) for ci, spec in enumerate(specs) for r in spec.requests]
    holders: dict[int, set[int]] = {}  # allocatingDevices: non-shared device -> claims
    shares: dict[int, list[Fraction]] = {}  # shared device -> memory of each allocation
    # Per claim and constraint: the devices added so far that it applies to.
    members: list[list[list[int]]] = [[[] for _ in spec.constraints] for spec in specs]
    per_claim = [0] * len(specs)

    def applies(constraint: Constraint, request: str, sub: str) -> bool:
        return not constraint.requests or bool(constraint.requests & {request, sub})

    def add(ci: int, request: str, sub: SubRequest, i: int) -> Callable[[], None] | None:
        """``allocateDevice``: the undo on success, None when the device cannot be taken."""
        device = node[i]
        held = holders.get(i, set())
        if not device.shared and held and (not sub.admin or ci in held):
            return None
        if per_claim[ci] >= 32:
            return None
        for constraint, have in zip(specs[ci].constraints, members[ci], strict=True):
            if not applies(constraint, request, sub.name):
                continue
            value = _attr(device, constraint.attribute[1])
            if value is None or any(_attr(node[h], constraint.attribute[1]) != value for h in have):
                return None
        memory = _consumed(sub, device)
        assert memory is not None
        if device.shared and sum(shares.get(i, []), memory) > _memory(device):
            return None
        counted = not (device.shared and shares.get(i))
        if counted and consumed[0] + _slices(device) > slices:
            return None
        if counted:
            consumed[0] += _slices(device)
        for constraint, have in zip(specs[ci].constraints, members[ci], strict=True):
            if applies(constraint, request, sub.name):
                have.append(i)
        if device.shared:
            shares.setdefault(i, []).append(memory)
        else:
            holders.setdefault(i, set()).add(ci)
        per_claim[ci] += 1

        def undo() -> None:
            per_claim[ci] -= 1
            if device.shared:
                shares[i].pop()
            else:
                holders[i].discard(ci)
            for constraint, have in zip(specs[ci].constraints, members[ci], strict=True):
                if applies(constraint, request, sub.name):
                    have.remove(i)
            if counted:
                consumed[0] -= _slices(device)

        return undo

    def allocate(slot: int) -> bool:
        if slot == len(slots):
            return True
        ci, request = slots[slot]
        for sub in request.alternatives:  # firstAvailable: in order, first that works
            matching = [i for i, d in enumerate(node) if selectable(sub, d)]
            if sub.all_devices:
                if not matching:
                    continue
                undos = []
                for i in matching:
                    undo = add(ci, request.name, sub, i)
                    if undo is None:
                        break
                    undos.append(undo)
                if len(undos) == len(matching) and allocate(slot + 1):
                    return True
                for undo in reversed(undos):
                    undo()
                continue
            if pick(sub, matching, left=sub.count, start=0, slot=slot):
                return True
        return False

    def pick(sub: SubRequest, matching: list[int], *, left: int, start: int, slot: int) -> bool:
        if left == 0:
            return allocate(slot + 1)
        ci, request = slots[slot]
        for position in range(start, len(matching)):  # on from the next device
            undo = add(ci, request.name, sub, matching[position])
            if undo is None:
                continue
            if pick(sub, matching, left=left - 1, start=position + 1, slot=slot):
                return True
            undo()
        return False

    return allocate(0)


@settings(max_examples=150, deadline=None)
@given(node=devices(), pod=claims(), slices=st.integers(1, 6))
def test_the_fit_agrees_with_the_allocators_search(
    node: list[Device], pod: tuple[list[ClaimSpec], dict[str, list[Sel]]], slices: int
) -> None:
    specs, tests = pod
    # The pool's shared counters, in a slice of their own (as drivers may publish them).
    counters = Slice(
        name="counters",
        driver=DRIVER,
        pool="node-0",
        generation=1,
        counters=(("gpu", (("slices", Fraction(slices)),)),),
    )
    inventory = DeviceInventory(CLASSES, (counters,), {}, {})
    answer = fit(specs, node, inventory)
    assert answer.fits is reference(specs, node, tests, slices), (answer, specs, node)
