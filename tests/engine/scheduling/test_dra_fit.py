"""The DRA fit against the Kubernetes allocator's semantics, on random claims and devices.

The reference below is a plain transcription of the structured allocator's search
(``k8s.io/dynamic-resource-allocation/structured/internal/stable/allocator_stable.go``:
``Allocate``, ``validateDeviceRequest``, ``allocateOne``, ``isSelectable``,
``allocateDevice``): claims one after the other, requests in order, ``firstAvailable``
sub-requests tried in order, devices tried one by one with backtracking, a device in use
by any of the pod's claims skipped (unless it allows multiple allocations), ``All`` taking
every selectable device of the node and needing at least one, ``matchAttribute``
constraints checked as each device is added (``matchAttributeConstraint.add``), shared
counters of partitionable devices (``checkAvailableCounters``) and device taints that the
request does not tolerate (``taintPreventsAllocation``). Its selectors are Python
predicates; the engine gets the same selectors as CEL text, so the CEL evaluation is
under test too. The engine answers the same question with a matching per combination of
choices; the two must agree on every generated case.
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
        out.append(
            Device(
                driver=DRIVER,
                pool="node-0",
                name=f"gpu-{i}",
                attributes=tuple(sorted(attributes, key=lambda a: a[1])),
                capacity=((DRIVER, "memory", memory),),
                shared=draw(st.integers(0, 9)) == 0,
                consumes=(("gpu", (("slices", Fraction(slices)),)),) if slices else (),
                taints=(("maintenance", "", "NoSchedule"),) if draw(st.integers(0, 4)) == 0 else (),
            )
        )
    return out


MAINTENANCE = (("key", "maintenance"), ("operator", "Exists"))


def _tolerated(sub: SubRequest, device: Device) -> bool:
    return not device.taints or MAINTENANCE in sub.tolerations


def _slices(device: Device) -> Fraction:
    return sum((a for _, counters in device.consumes for _, a in counters), Fraction(0))


@st.composite
def sub_request(draw: st.DrawFn, name: str) -> tuple[SubRequest, list[Sel]]:
    chosen = draw(st.lists(st.sampled_from(SELECTORS), max_size=1))
    all_devices = draw(st.integers(0, 5)) == 0
    sub = SubRequest(
        name=name,
        device_class=draw(st.sampled_from(sorted(CLASSES))),
        selectors=tuple(s.cel for s in chosen),
        all_devices=all_devices,
        count=1 if all_devices else draw(st.integers(1, 2)),
        tolerations=(MAINTENANCE,) if draw(st.integers(0, 2)) == 0 else (),
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
        )

    consumed = [Fraction(0)]

    def counters_allow(devices: list[int]) -> bool:
        return consumed[0] + sum((_slices(node[d]) for d in devices), Fraction(0)) <= slices

    slots = [(ci, r) for ci, spec in enumerate(specs) for r in spec.requests]
    in_use: set[int] = set()
    # Per claim and constraint: the devices added so far that it applies to.
    members: list[list[list[int]]] = [[[] for _ in spec.constraints] for spec in specs]

    def agrees(ci: int, request: str, sub: str, device: int) -> bool:
        for constraint, held in zip(specs[ci].constraints, members[ci], strict=True):
            if constraint.requests and not constraint.requests & {request, sub}:
                continue
            value = _attr(node[device], constraint.attribute[1])
            if value is None or any(_attr(node[h], constraint.attribute[1]) != value for h in held):
                return False
        return True

    def join(ci: int, request: str, sub: str, device: int, sign: int) -> None:
        for constraint, held in zip(specs[ci].constraints, members[ci], strict=True):
            if constraint.requests and not constraint.requests & {request, sub}:
                continue
            if sign > 0:
                held.append(device)
            else:
                held.remove(device)

    def take(devices: list[int]) -> list[int]:
        taken = [d for d in devices if not node[d].shared]
        in_use.update(taken)
        consumed[0] += sum((_slices(node[d]) for d in devices), Fraction(0))
        return taken

    def give_back(taken: list[int], devices: list[int]) -> None:
        in_use.difference_update(taken)
        consumed[0] -= sum((_slices(node[d]) for d in devices), Fraction(0))

    def allocate(slot: int, per_claim: list[int]) -> bool:
        if slot == len(slots):
            return True
        claim_index, request = slots[slot]
        for sub in request.alternatives:  # firstAvailable: in order, first that works
            matching = [i for i, d in enumerate(node) if selectable(sub, d)]
            if sub.all_devices:
                if not matching or any(i in in_use for i in matching):
                    continue
                joined = []
                for i in matching:
                    if not agrees(claim_index, request.name, sub.name, i):
                        break
                    join(claim_index, request.name, sub.name, i, +1)
                    joined.append(i)
                if len(joined) == len(matching) and counters_allow(matching):
                    taken = take(matching)
                    per_claim[claim_index] += len(matching)
                    if per_claim[claim_index] <= 32 and allocate(slot + 1, per_claim):
                        return True
                    per_claim[claim_index] -= len(matching)
                    give_back(taken, matching)
                for i in joined:
                    join(claim_index, request.name, sub.name, i, -1)
                continue
            if pick(sub, matching, left=sub.count, slot=slot, per_claim=per_claim, ci=claim_index):
                return True
        return False

    def pick(
        sub: SubRequest, matching: list[int], *, left: int, slot: int, per_claim: list[int], ci: int
    ) -> bool:
        if left == 0:
            per_claim[ci] += sub.count
            done = per_claim[ci] <= 32 and allocate(slot + 1, per_claim)
            per_claim[ci] -= sub.count
            return done
        request = slots[slot][1].name
        for i in matching:
            if i in in_use or not agrees(ci, request, sub.name, i) or not counters_allow([i]):
                continue
            taken = take([i])
            join(ci, request, sub.name, i, +1)
            if pick(sub, matching, left=left - 1, slot=slot, per_claim=per_claim, ci=ci):
                return True
            join(ci, request, sub.name, i, -1)
            give_back(taken, [i])
        return False

    return allocate(0, [0] * len(specs))


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
