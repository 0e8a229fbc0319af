"""What Dynamic Resource Allocation (``resource.k8s.io/v1``) offers and asks: an immutable
snapshot of device classes, the devices of ResourceSlices, claims and claim templates.

Read from raw JSON, tolerant of missing parts, like ``webhook.engine.resources.inventory`` reads
nodes. Which devices a node can use follows the allocator's ``GatherPools``
(``k8s.io/dynamic-resource-allocation/structured/internal/stable/pools_stable.go``): a
slice's devices belong to the node it names, to every node (``allNodes``), or to the
nodes its ``nodeSelector`` selects; of a pool only the slices of its newest generation
count.

Admission cost must not grow with the number of nodes and devices. Devices are compared
by *content* (driver, attributes, capacity) without the attributes that name one device
(uuid, PCI bus id: found by counting, like identity labels of nodes), so the thousand
nodes of one kind share one *profile* and its answers.
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.kube.selectors import clean_terms, dig, terms_match, tolerates
from webhook.engine.resources.cel.values import DeviceView, UnreadValue, Version
from webhook.engine.resources.inventory import Node

GROUP = "resource.k8s.io"
# A class may be asked for as this extended resource name without extendedResourceName
# (KEP-5004, DRAExtendedResource).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
# Read from files and, where the API server serves it (resource.k8s.io/v1beta2 in 1.36,
# behind DRADeviceTaintRules), from the cluster: not one of the four every snapshot has.
TAINT_RULE = "DeviceTaintRule"
# Bounds of a claim's spec, from Kubernetes' API (k8s.io/api/resource/v1/types.go) and
# enforced by its validation (pkg/apis/resource/validation/validation.go,
# validateDeviceClaim, validateDeviceRequest, validateSelectorSlice, validateCELSelector,
# validateDeviceAllocationMode). A spec past one of them is refused by the API server, so it
# is never allocated; every count is bounded by them before it becomes work here.
# AllocationResultsMaxSize: more devices than this in one claim never fit (the allocator's
# "exceeds the claim limit of 32").
ALLOCATION_RESULTS_MAX_SIZE = 32
DEVICE_REQUESTS_MAX_SIZE = 32  # DeviceRequestsMaxSize = AllocationResultsMaxSize
FIRST_AVAILABLE_MAX_SIZE = 8  # FirstAvailableDeviceRequestMaxSize
DEVICE_SELECTORS_MAX_SIZE = 32  # DeviceSelectorsMaxSize
DEVICE_CONSTRAINTS_MAX_SIZE = 32  # DeviceConstraintsMaxSize
DEVICE_TOLERATIONS_MAX_LENGTH = 16  # DeviceTolerationsMaxLength
CEL_SELECTOR_EXPRESSION_MAX_LENGTH = 10 * 1024  # CELSelectorExpressionMaxLength
# ``count`` is an int64 (``Count int64``): the API server refuses a larger number when it
# decodes the object, and a count must be greater than zero (validateDeviceAllocationMode).
COUNT_MAX = 2**63 - 1
# Attribute names that name one device wherever they appear (NVIDIA's driver's uuid).
ALWAYS_IDENTITY_ATTRIBUTES = frozenset({"uuid"})
# What a device is, never which one: two devices of a slice may differ in every one of them
# (an H100 beside an A100, MIG devices of three profiles on one GPU), and the policy reads
# them outside any CEL selector (``devicepolicy.device_labels``), so they are never taken
# for identity, whatever values a slice holds. NVIDIA's DRA driver publishes them on every
# GPU and MIG device (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go,
# ``GpuInfo.GetDevice``, ``MigDeviceInfo.GetDevice``).
DESCRIPTIVE_ATTRIBUTES = frozenset(
    {
        "type",
        "productName",
        "profile",
        "brand",
        "architecture",
        "cudaComputeCapability",
        "driverVersion",
        "cudaDriverVersion",
    }
)
Identity = frozenset[tuple[str, str]]


def _intern(text: object) -> str:
    """The one copy of ``text``, made apart from the raw JSON it came from: a parsed
    device that kept the decoder's own string would keep the memory of the whole decoded
    file alive around it (issue 35: 4.6 KB a device, where the parsed device is 0.5 KB)."""
    return sys.intern("".join((str(text), "")) if isinstance(text, str) else str(text))


# Equal immutable parts of devices, kept once: the thousand nodes of one kind publish the
# same attributes, capacities and policies on every device but for their identity
# attributes (issue 35: 25,600 devices held 12 attribute triples each). Bounded: past it
# the table starts again, which only shares less.
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 200_000


def shared(value: Any) -> Any:
    """The one kept object equal to ``value`` (``value`` itself the first time)."""
    kept = _SHARED.get(value)
    if kept is not None:
        return kept
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    _SHARED[value] = value
    return value


def forget_shared() -> None:
    """Empty the tables of kept parts (they refill as devices are parsed). A copy of parsed
    devices (``files/inventoryfile``) must not leave the first parse's parts alive: kept
    among a decoded file's freed memory, they would hold all of it."""
    _SHARED.clear()
    _TRIPLES.clear()
    _QUALIFIED.clear()


def _same(one: tuple[Any, ...], other: tuple[Any, ...]) -> bool:
    return all(a is b for a, b in zip(one, other, strict=True))


def _attributes(
    found: list[tuple[str, str, Any]],
) -> tuple[tuple[str, str, Any], ...]:
    """Attribute (or capacity) triples kept once each, and the device's tuple of them kept
    once too. An equal triple of another type (``True == 1``, and CEL tells a bool from an
    int) is not shared."""
    triples = []
    for triple in sorted(found, key=lambda a: (a[0], a[1])):
        kept = shared(triple)
        triples.append(kept if type(kept[2]) is type(triple[2]) else triple)
    whole = tuple(triples)
    kept_whole = shared(whole)
    return kept_whole if _same(kept_whole, whole) else whole


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def is_dra_object(obj: Mapping[str, Any]) -> bool:
    api = str(obj.get("apiVersion", ""))
    return api.partition("/")[0] == GROUP and (
        obj.get("kind") in KINDS or obj.get("kind") == TAINT_RULE
    )


@dataclass(frozen=True, slots=True)
class TaintRule:
    """A ``DeviceTaintRule``: a taint on every device its selector names.

    The selector's ``driver``, ``pool`` and ``device`` are matched here
    (``pkg/controller/devicetainteviction``, ``k8s.io/dynamic-resource-allocation``'s
    taint lookup: every field that is set must match). A rule whose selector asks for more
    (a class, CEL selectors of older versions) taints nothing here: a taint only ever
    takes capacity away, so one applied where it may not belong could deny a pod that
    will run."""

    driver: str
    pool: str
    device: str
    taint: tuple[str, str, str]
    exact: bool = True

    def applies(self, device: Device) -> bool:
        return (
            self.exact
            and (not self.driver or self.driver == device.driver)
            and (not self.pool or self.pool == device.pool)
            and (not self.device or self.device == device.name)
        )


def taint_rule_from_json(raw: Mapping[str, Any]) -> TaintRule:
    spec = _map(raw.get("spec"))
    selector = _map(spec.get("deviceSelector"))
    taint = _map(spec.get("taint"))
    return TaintRule(
        driver=str(selector.get("driver") or ""),
        pool=str(selector.get("pool") or ""),
        device=str(selector.get("device") or ""),
        taint=(
            str(taint.get("key", "")),
            str(taint.get("value") or ""),
            str(taint.get("effect", "")),
        ),
        exact=not selector.get("deviceClassName") and not selector.get("selectors"),
    )


def with_rule_taints(s: Slice, rules: Sequence[TaintRule]) -> Slice:
    """The slice with the taints of the rules that name its devices added."""
    if not any(r.driver in ("", s.driver) and r.pool in ("", s.pool) for r in rules):
        return s

    def tainted(device: Device) -> Device:
        extra = tuple(r.taint for r in rules if r.applies(device) and r.taint not in device.taints)
        return replace(device, taints=(*device.taints, *extra)) if extra else device

    devices = tuple(map(tainted, s.devices))
    per_device = tuple((tainted(d), node, every, terms) for d, node, every, terms in s.per_device)
    if devices == s.devices and per_device == s.per_device:
        return s
    return replace(s, devices=devices, per_device=per_device, _signatures={})


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """A capacity's ``requestPolicy`` (``DRAConsumableCapacity``, beta and on in 1.36):
    ``structured/internal/incubating/consumable_capacity.go``."""

    default: Fraction | None = None
    minimum: Fraction | None = None
    maximum: Fraction | None = None
    step: Fraction | None = None
    values: tuple[Fraction, ...] = ()

    def round_up(self, want: Fraction) -> Fraction:
        """``roundUpRange`` / ``roundUpValidValues``."""
        if self.minimum is not None:
            if want < self.minimum:
                return self.minimum
            if self.step:
                steps = -((self.minimum - want) // self.step)  # ceiling
                return self.minimum + self.step * steps
            return want
        if self.values:
            return next((v for v in self.values if want <= v), want)
        return want

    def refuses(self, used: Fraction) -> bool:
        """``violatesPolicy``: over the range's maximum, off its steps, or not a valid value."""
        if self.default is not None and used == self.default:
            return False
        if self.minimum is not None or self.maximum is not None or self.step is not None:
            if self.maximum is not None and used > self.maximum:
                return True
            base = self.minimum or Fraction(0)
            return bool(self.step) and (used - base) % self.step != 0  # type: ignore[operator]
        if self.values:
            return used not in self.values
        return False


def _policy(raw: object) -> RequestPolicy | None:
    policy = _map(raw)
    if not policy:
        return None

    def amount(value: object) -> Fraction | None:
        try:
            return parse_quantity(value) if value is not None else None
        except QuantityError:
            return None

    valid = _map(policy.get("validRange"))
    values = tuple(v for v in map(amount, _list(policy.get("validValues"))) if v is not None)
    return RequestPolicy(
        default=amount(policy.get("default")),
        minimum=amount(valid.get("min")),
        maximum=amount(valid.get("max")),
        step=amount(valid.get("step")),
        values=tuple(sorted(values)),
    )


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice, as selectors and the fit see it."""

    driver: str
    pool: str
    name: str
    # (domain, name, value) sorted; values are str, int, bool or Version.
    attributes: tuple[tuple[str, str, Any], ...]
    capacity: tuple[tuple[str, str, Fraction], ...]
    # allowMultipleAllocations: one device may serve several requests.
    shared: bool = False
    # consumesCounters (partitionable devices): (counter set, ((counter, amount), ...)).
    consumes: tuple[tuple[str, tuple[tuple[str, Fraction], ...]], ...] = ()
    # taints: (key, value, effect); NoSchedule and NoExecute keep requests that do not
    # tolerate them away (``taintPreventsAllocation``).
    taints: tuple[tuple[str, str, str], ...] = ()
    # capacity[...].requestPolicy (consumable capacity), per capacity (domain, name).
    policies: tuple[tuple[str, str, RequestPolicy], ...] = ()

    def consumption(
        self, requests: tuple[tuple[str, Fraction], ...]
    ) -> dict[tuple[str, str], Fraction] | None:
        """What one allocation takes of each capacity (``GetConsumedCapacityFromRequest``,
        ``calculateConsumedCapacity``: the request rounded up by the capacity's
        requestPolicy; unrequested, its default, else the whole capacity); None when the
        request names a capacity the device lacks or the policy refuses the amount
        (``requestsContainNonExistCapacity``, ``violatesPolicy``), or it exceeds the
        capacity (``CmpRequestOverCapacity``)."""
        asked = {_qualified(name, self.driver): amount for name, amount in requests}
        values = {(d, n): v for d, n, v in self.capacity}
        if any(key not in values for key in asked):
            return None
        policies = {(d, n): p for d, n, p in self.policies}
        out: dict[tuple[str, str], Fraction] = {}
        for key, value in values.items():
            policy = policies.get(key)
            want = asked.get(key)
            if want is None:
                used = (
                    policy.default if policy is not None and policy.default is not None else value
                )
            else:
                used = policy.round_up(want) if policy is not None else want
            if (policy is not None and policy.refuses(used)) or used > value:
                return None
            out[key] = used
        return out

    def view(self) -> DeviceView:
        attributes: dict[str, dict[str, Any]] = {}
        for domain, name, value in self.attributes:
            attributes.setdefault(domain, {})[name] = value
        capacity: dict[str, dict[str, Fraction]] = {}
        for domain, name, amount in self.capacity:
            capacity.setdefault(domain, {})[name] = amount
        return DeviceView(self.driver, attributes, capacity, self.shared)

    def attribute(self, key: tuple[str, str]) -> Any:
        """``lookupAttribute``: by domain and name (a bare name is the driver's)."""
        return next((v for d, n, v in self.attributes if (d, n) == key), None)

    def content(self, identity: frozenset[tuple[str, str]]) -> tuple[Any, ...]:
        """What selectors that name no identity attribute can tell apart."""
        return (
            self.driver,
            tuple(a for a in self.attributes if (a[0], a[1]) not in identity),
            self.capacity,
            self.shared,
            self.consumes,
            self.taints,
            self.policies,
        )


_QUALIFIED: dict[tuple[str, str], tuple[str, str]] = {}


def _qualified(name: str, driver: str) -> tuple[str, str]:
    """An attribute or capacity name with its domain (a bare name is the driver's); the
    few names of a cluster are worked out once."""
    known = _QUALIFIED.get((name, driver))
    if known is not None:
        return known
    domain, slash, ident = name.partition("/")
    found = (_intern(domain), _intern(ident)) if slash else (_intern(driver), _intern(name))
    if len(_QUALIFIED) < 10_000:
        _QUALIFIED[(_intern(name), _intern(driver))] = found
    return found


def _attribute(raw: Mapping[str, Any]) -> Any:
    if "string" in raw:
        return _intern(raw["string"])
    if "bool" in raw:
        return bool(raw["bool"])
    if "int" in raw:
        return int(raw["int"])
    if "version" in raw:
        return Version(_intern(raw["version"]))
    return UnreadValue(json.dumps(raw, sort_keys=True, default=str)) if raw else None


# Attribute triples by what the JSON says (driver, name, type, value): most devices of a
# cluster repeat most of them, and a hit skips parsing and sharing. Keys hold the kept
# copies only (a lookup with the decoder's equal string finds them). Bounded like _SHARED.
_TRIPLES: dict[tuple[str, str, str, Any], tuple[str, str, Any]] = {}


def _attribute_triple(name: str, value: object, driver: str) -> tuple[str, str, Any] | None:
    raw = _map(value)
    kind, plain = next(iter(raw.items())) if len(raw) == 1 else ("", None)
    hashable = isinstance(plain, (str, int))  # bool is an int; a Version is written as str
    if hashable:
        hit = _TRIPLES.get((driver, name, kind, plain))
        if hit is not None:
            return hit
    parsed = _attribute(raw)
    if parsed is None:
        return None
    triple: tuple[str, str, Any] = shared((*_qualified(str(name), driver), parsed))
    if type(triple[2]) is not type(parsed):  # True == 1: not the same attribute
        triple = (*_qualified(str(name), driver), parsed)
    if hashable:
        if len(_TRIPLES) >= _SHARED_MAX:
            _TRIPLES.clear()
        key_value = parsed.text if isinstance(parsed, Version) else parsed
        _TRIPLES[(_intern(driver), _intern(name), _intern(kind), key_value)] = triple
    return triple


def device_from_json(raw: Mapping[str, Any], *, driver: str, pool: str) -> Device:
    attributes = []
    for name, value in _map(raw.get("attributes")).items():
        triple = _attribute_triple(name, value, driver)
        if triple is not None:
            attributes.append(triple)
    capacity = []
    policies = []
    for name, value in _map(raw.get("capacity")).items():
        try:
            amount = parse_quantity(_map(value).get("value"))
        except QuantityError:
            continue
        capacity.append((*_qualified(str(name), driver), amount))
        policy = _policy(_map(value).get("requestPolicy"))
        if policy is not None:
            policies.append((*_qualified(str(name), driver), policy))
    return Device(
        driver=_intern(driver),
        pool=_intern(pool),
        name=_intern(raw.get("name", "")),
        attributes=_attributes(attributes),
        capacity=_attributes(capacity),
        shared=bool(raw.get("allowMultipleAllocations")),
        consumes=shared(
            tuple(
                (_intern(c.get("counterSet", "")), _counters(c.get("counters")))
                for c in map(_map, _list(raw.get("consumesCounters")))
            )
        ),
        taints=shared(
            tuple(
                (str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
                for t in map(_map, _list(raw.get("taints")))
            )
        ),
        policies=shared(tuple(sorted(policies, key=lambda p: (p[0], p[1])))),
    )


def _amounts(raw: object) -> tuple[tuple[str, Fraction], ...]:
    """``capacity.requests``: quantities by capacity name. One that does not parse is
    dropped (the API server validates them; less asked never denies)."""
    out = []
    for name, value in _map(raw).items():
        try:
            out.append((str(name), parse_quantity(value)))
        except QuantityError:
            continue
    return tuple(sorted(out))


def _counters(raw: object) -> tuple[tuple[str, Fraction], ...]:
    out = []
    for name, value in _map(raw).items():
        try:
            out.append((str(name), parse_quantity(_map(value).get("value"))))
        except QuantityError:
            continue
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class Slice:
    """A ResourceSlice: its pool, which nodes it serves, its devices."""

    name: str
    driver: str
    pool: str
    generation: int
    node_name: str = ""
    all_nodes: bool = False
    node_terms: tuple[Mapping[str, Any], ...] | None = None
    devices: tuple[Device, ...] = ()
    # perDeviceNodeSelection: (device, node name, all nodes, terms) per device.
    per_device: tuple[tuple[Device, str, bool, tuple[Mapping[str, Any], ...] | None], ...] = ()
    # Attributes that tell this slice's devices apart (a different value on each).
    identity: Identity = frozenset()
    # sharedCounters: (counter set, ((counter, amount), ...)) of the pool.
    counters: tuple[tuple[str, tuple[tuple[str, Fraction], ...]], ...] = ()
    # The number of its devices' contents per identity set: a slice is parsed once and
    # lives across snapshots, so nodes are grouped without looking at devices again.
    _signatures: dict[Identity, int] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    def signature(self, identity: Identity) -> int:
        known = self._signatures.get(identity)
        if known is None:
            contents = tuple(sorted((d.content(identity) for d in self.devices), key=hash))
            known = self._signatures[identity] = _signature_number(contents)
        return known


_SIGNATURES: dict[tuple[Any, ...], int] = {}
_NUMBERS = itertools.count(1)


def _signature_number(contents: tuple[Any, ...]) -> int:
    """One number per distinct set of device contents, so that a node's key is cheap to
    hash. Numbers are never reused: forgetting them (past a bound) only groups less."""
    known = _SIGNATURES.get(contents)
    if known is None:
        if len(_SIGNATURES) >= 100_000:
            _SIGNATURES.clear()
        known = _SIGNATURES[contents] = next(_NUMBERS)
    return known


def _slice_identity(devices: Sequence[Device]) -> Identity:
    """Attributes with a different value on every device of the slice (uuid, bus id,
    index): what names a device rather than describes it. Only groups nodes; selectors
    and constraints that name such an attribute are evaluated per device."""
    found = {
        (d, n)
        for device in devices
        for d, n, _ in device.attributes
        if n in ALWAYS_IDENTITY_ATTRIBUTES
    }
    if len(devices) < 2:
        return frozenset(found)
    values: dict[tuple[str, str], set[Any]] = {}
    for device in devices:
        for domain, name, value in device.attributes:
            values.setdefault((domain, name), set()).add(value)
    found.update(
        k
        for k, v in values.items()
        if len(v) == len(devices) and k[1] not in DESCRIPTIVE_ATTRIBUTES
    )
    return frozenset(found)


def _terms(raw: object) -> tuple[Mapping[str, Any], ...] | None:
    terms = clean_terms(raw)
    return None if terms is None else tuple(terms)


def slice_from_json(raw: Mapping[str, Any]) -> Slice:
    spec = _map(raw.get("spec"))
    driver = str(spec.get("driver", ""))
    pool = _map(spec.get("pool"))
    pool_name = str(pool.get("name", ""))
    devices = [_map(d) for d in _list(spec.get("devices"))]
    parsed = tuple(device_from_json(d, driver=driver, pool=pool_name) for d in devices)
    per_device: tuple[Any, ...] = ()
    if spec.get("perDeviceNodeSelection"):
        per_device = tuple(
            (
                device,
                str(d.get("nodeName") or ""),
                bool(d.get("allNodes")),
                _terms(d.get("nodeSelector")),
            )
            for device, d in zip(parsed, devices, strict=True)
        )
        parsed = ()
    every = (*parsed, *(entry[0] for entry in per_device))
    return Slice(
        identity=_slice_identity(every),
        counters=tuple(
            (str(c.get("name", "")), _counters(c.get("counters")))
            for c in map(_map, _list(spec.get("sharedCounters")))
        ),
        name=str(dig(raw, "metadata", "name") or ""),
        driver=_intern(driver),
        pool=_intern(pool_name),
        generation=int(pool.get("generation") or 0),
        node_name=str(spec.get("nodeName") or ""),
        all_nodes=bool(spec.get("allNodes")),
        node_terms=_terms(spec.get("nodeSelector")),
        devices=parsed,
        per_device=per_device,
    )


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    extended_resource: str = ""
    # metadata.creationTimestamp (RFC 3339, UTC): which of two classes naming the same
    # extendedResourceName serves it.
    created: str = ""


def _selectors(raw: object) -> tuple[str, ...]:
    return tuple(
        str(dig(s, "cel", "expression"))
        for s in _list(raw)
        if isinstance(dig(s, "cel", "expression"), str)
    )


def class_from_json(raw: Mapping[str, Any]) -> DeviceClass:
    spec = _map(raw.get("spec"))
    return DeviceClass(
        name=str(dig(raw, "metadata", "name") or ""),
        selectors=_selectors(spec.get("selectors")),
        extended_resource=str(spec.get("extendedResourceName") or ""),
        created=str(dig(raw, "metadata", "creationTimestamp") or ""),
    )


@dataclass(frozen=True, slots=True)
class SubRequest:
    """One way to satisfy a request: ``exactly``, or one entry of ``firstAvailable``."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    all_devices: bool = False  # allocationMode: All
    count: int = 1
    admin: bool = False
    # Each toleration as its sorted items: a request is part of memo keys, so hashable.
    tolerations: tuple[tuple[tuple[str, Any], ...], ...] = ()
    # capacity.requests (consumable capacity): (capacity name, amount), sorted.
    capacity: tuple[tuple[str, Fraction], ...] = ()

    def tolerates(self, device: Device) -> bool:
        """No NoSchedule or NoExecute taint of the device that this request does not
        tolerate (``taintPreventsAllocation``; other effects are ignored)."""
        return all(
            effect not in ("NoSchedule", "NoExecute")
            or any(
                tolerates(dict(t), key=key, value=value, effect=effect) for t in self.tolerations
            )
            for key, value, effect in device.taints
        )


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    # One entry for ``exactly``; the ``firstAvailable`` alternatives in order otherwise.
    alternatives: tuple[SubRequest, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    """``matchAttribute``: the devices of ``requests`` (all of the claim's when empty) must
    all have ``attribute`` (domain, name), with one value."""

    requests: frozenset[str]
    attribute: tuple[str, str]

    def applies(self, request: str, sub_request: str) -> bool:
        return not self.requests or request in self.requests or sub_request in self.requests


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """``spec.devices`` of a ResourceClaim (or of a template's claim)."""

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    # Why the API server would refuse this spec (field, value, bound), for the denial; the
    # parts past a bound are not read.
    invalid: tuple[str, ...] = ()


def _count(raw: Mapping[str, Any], mode: object, where: str, invalid: list[str]) -> int:
    """The request's count as the API server validates it; an invalid one counts one (the
    denial says why) so that nothing downstream sees zero, a negative or a huge number."""
    count = raw.get("count")
    if mode == "All":
        if count not in (None, 0):
            invalid.append(f"{where}.count: must not be set when allocationMode is All")
        return 1
    if count is None:
        return 1
    if isinstance(count, bool) or not isinstance(count, int):
        invalid.append(f"{where}.count: {count!r} is not an integer")
        return 1
    if count <= 0:
        invalid.append(f"{where}.count: {count} must be greater than zero")
        return 1
    if count > COUNT_MAX:
        invalid.append(f"{where}.count: {count} is more than an int64 holds ({COUNT_MAX})")
        return 1
    return count


def _bounded(items: list[Any], bound: int, where: str, invalid: list[str]) -> list[Any]:
    if len(items) > bound:
        invalid.append(f"{where}: {len(items)} entries, at most {bound} are allowed")
        return items[:bound]
    return items


def _sub_request(raw: Mapping[str, Any], name: str, where: str, invalid: list[str]) -> SubRequest:
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        invalid.append(f"{where}.allocationMode: {mode!r} is neither ExactCount nor All")
    selectors = _bounded(
        _list(raw.get("selectors")), DEVICE_SELECTORS_MAX_SIZE, f"{where}.selectors", invalid
    )
    for index, selector in enumerate(selectors):
        expression = dig(selector, "cel", "expression")
        if isinstance(expression, str) and len(expression) > CEL_SELECTOR_EXPRESSION_MAX_LENGTH:
            invalid.append(
                f"{where}.selectors[{index}].cel.expression: {len(expression)} characters, at "
                f"most {CEL_SELECTOR_EXPRESSION_MAX_LENGTH} are allowed"
            )
            selectors = selectors[:index]
            break
    tolerations = _bounded(
        _list(raw.get("tolerations")),
        DEVICE_TOLERATIONS_MAX_LENGTH,
        f"{where}.tolerations",
        invalid,
    )
    return SubRequest(
        name=name,
        device_class=str(raw.get("deviceClassName") or ""),
        selectors=_selectors(selectors),
        all_devices=mode == "All",
        count=_count(raw, mode, where, invalid),
        admin=bool(raw.get("adminAccess")),
        tolerations=tuple(
            tuple(sorted((str(k), v) for k, v in t.items() if isinstance(v, str | int)))
            for t in map(_map, tolerations)
        ),
        capacity=_amounts(dig(raw, "capacity", "requests")),
    )


def claim_spec_from_json(spec: object, *, path: str = "spec.devices") -> ClaimSpec:
    """Read ``spec`` of a ResourceClaim; the v1 shape (``exactly`` / ``firstAvailable``).

    What the API server's validation bounds (requests, sub-requests, selectors and their
    length, tolerations, constraints, counts) is read only up to the bound, and each
    excess is named in ``invalid``: no number in the object becomes work past its bound."""
    invalid: list[str] = []
    requests = []
    raw_requests = _bounded(
        _list(dig(spec, "devices", "requests")),
        DEVICE_REQUESTS_MAX_SIZE,
        f"{path}.requests",
        invalid,
    )
    for index, item in enumerate(raw_requests):
        raw = _map(item)
        name = str(raw.get("name", ""))
        where = f"{path}.requests[{index}]"
        if isinstance(raw.get("exactly"), dict):
            alternatives: tuple[SubRequest, ...] = (
                _sub_request(raw["exactly"], name, f"{where}.exactly", invalid),
            )
        else:
            subs = _bounded(
                _list(raw.get("firstAvailable")),
                FIRST_AVAILABLE_MAX_SIZE,
                f"{where}.firstAvailable",
                invalid,
            )
            alternatives = tuple(
                _sub_request(
                    _map(s),
                    f"{name}/{_map(s).get('name', '')}",
                    f"{where}.firstAvailable[{i}]",
                    invalid,
                )
                for i, s in enumerate(subs)
            )
        requests.append(DeviceRequest(name=name, alternatives=alternatives))
    raw_constraints = _bounded(
        _list(dig(spec, "devices", "constraints")),
        DEVICE_CONSTRAINTS_MAX_SIZE,
        f"{path}.constraints",
        invalid,
    )
    constraints = tuple(
        Constraint(
            requests=frozenset(str(r) for r in _list(c.get("requests"))),
            attribute=_qualified(str(c["matchAttribute"]), ""),
        )
        for c in map(_map, raw_constraints)
        if isinstance(c.get("matchAttribute"), str)
    )
    return ClaimSpec(requests=tuple(requests), constraints=constraints, invalid=tuple(invalid))


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim or ResourceClaimTemplate, by namespace and name."""

    namespace: str
    name: str
    spec: ClaimSpec
    # Set for an allocated claim: the nodes its devices are reachable from (None: any).
    allocated: bool = False
    allocation_terms: tuple[Mapping[str, Any], ...] | None = None


def claim_from_json(raw: Mapping[str, Any]) -> Claim:
    meta = _map(raw.get("metadata"))
    template = raw.get("kind") == "ResourceClaimTemplate"
    spec = dig(raw, "spec", "spec") if template else raw.get("spec")
    allocation = dig(raw, "status", "allocation")
    return Claim(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        spec=claim_spec_from_json(spec, path="spec.spec.devices" if template else "spec.devices"),
        allocated=isinstance(allocation, dict),
        allocation_terms=_terms(_map(allocation).get("nodeSelector")),
    )


@dataclass(frozen=True, slots=True)
class Profile:
    """The devices one node can use. Nodes with equal ``key`` get equal answers."""

    devices: tuple[Device, ...]
    key: tuple[Any, ...]
    example: str  # a node name, for messages


@dataclass
class DeviceInventory:
    """A frozen DRA snapshot: build a new one for every change, never mutate one.

    ``complete`` is false when only claims and templates are known (``check`` without an
    inventory of classes and slices): fit and class checks are then skipped.
    """

    classes: Mapping[str, DeviceClass]
    slices: Sequence[Slice]
    claims: Mapping[tuple[str, str], Claim]
    templates: Mapping[tuple[str, str], Claim]
    complete: bool = True
    resource_version: str = ""
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)
    taint_rules: Sequence[TaintRule] = ()

    def __post_init__(self) -> None:
        if self.taint_rules:
            self.slices = [with_rule_taints(s, self.taint_rules) for s in self.slices]
        # Costs what the slices number, not their devices: a live cache builds one per change.
        self._local: dict[str, list[Slice]] = {}
        self._placed: dict[str, list[Device]] = {}  # perDeviceNodeSelection by node name
        self._network: list[tuple[Device, bool, tuple[Mapping[str, Any], ...] | None]] = []
        newest: dict[tuple[str, str], int] = {}
        for s in self.slices:
            key = (s.driver, s.pool)
            newest[key] = max(newest.get(key, s.generation), s.generation)
        identity: set[tuple[str, str]] = set()
        count = 0
        # Counters per pool (driver, pool) and counter set: what partitions share.
        self.counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        for s in self.slices:
            if s.generation != newest[(s.driver, s.pool)]:
                continue  # an older generation of a pool being updated
            identity.update(s.identity)
            for set_name, counters in s.counters:
                self.counters.setdefault((s.driver, s.pool), {})[set_name] = dict(counters)
            count += len(s.devices) + len(s.per_device)
            if s.per_device:
                for device, node, every, terms in s.per_device:
                    if node:
                        self._placed.setdefault(node, []).append(device)
                    else:
                        self._network.append((device, every, terms))
            elif s.node_name:
                self._local.setdefault(s.node_name, []).append(s)
            elif s.all_nodes or s.node_terms is not None:
                self._network.extend((device, s.all_nodes, s.node_terms) for device in s.devices)
        self.device_count = count
        self.identity: Identity = frozenset(identity)
        self._contents: dict[Device, tuple[Any, ...]] = {}
        # Extended resources served by DRA: resource name to device class.
        self.extended: dict[str, str] = {}
        # Of classes naming the same extendedResourceName, the newest serves it, the
        # alphabetically first on a tie (the scheduler's extended resource cache,
        # ``betterDeviceClass``); the implicit name is every class's own.
        ranked = sorted(self.classes.values(), key=lambda c: c.name, reverse=True)
        for device_class in sorted(ranked, key=lambda c: c.created):
            self.extended[IMPLICIT_EXTENDED_PREFIX + device_class.name] = device_class.name
            if device_class.extended_resource:
                self.extended[device_class.extended_resource] = device_class.name

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]], *, complete: bool = True) -> DeviceInventory:
        classes: dict[str, DeviceClass] = {}
        slices: list[Slice] = []
        claims: dict[tuple[str, str], Claim] = {}
        templates: dict[tuple[str, str], Claim] = {}
        rules: list[TaintRule] = []
        for obj in objects:
            kind = obj.get("kind")
            if kind == TAINT_RULE:
                rules.append(taint_rule_from_json(obj))
            if kind == "DeviceClass":
                c = class_from_json(obj)
                classes[c.name] = c
            elif kind == "ResourceSlice":
                slices.append(slice_from_json(obj))
            elif kind == "ResourceClaim":
                claim = claim_from_json(obj)
                claims[(claim.namespace, claim.name)] = claim
            elif kind == "ResourceClaimTemplate":
                template = claim_from_json(obj)
                templates[(template.namespace, template.name)] = template
        return cls(classes, slices, claims, templates, complete=complete, taint_rules=rules)

    def with_claims(self, objects: Iterable[Mapping[str, Any]]) -> DeviceInventory:
        """This snapshot plus claims and templates (``check`` adds those it is given)."""
        extra = DeviceInventory.of(objects, complete=False)
        if not extra.claims and not extra.templates:
            return self
        return self.with_claim_objects(
            {**self.claims, **extra.claims},
            {**self.templates, **extra.templates},
            resource_version=self.resource_version,
        )

    def with_classes(self, objects: Iterable[Mapping[str, Any]]) -> DeviceInventory:
        """This snapshot plus DeviceClasses (``check`` adds those in the files it checks: a
        class's ``extendedResourceName`` serves its pods once applied together). Without
        slices the snapshot stays incomplete: devices are still unknown."""
        classes = {c.name: c for c in (class_from_json(o) for o in objects)}
        if not classes:
            return self
        return DeviceInventory(
            {**self.classes, **classes},
            self.slices,
            self.claims,
            self.templates,
            complete=self.complete,
            resource_version=self.resource_version,
            taint_rules=self.taint_rules,
        )

    def with_claim_objects(
        self,
        claims: Mapping[tuple[str, str], Claim],
        templates: Mapping[tuple[str, str], Claim],
        *,
        resource_version: str,
    ) -> DeviceInventory:
        """A snapshot with other claims and templates and these very devices: it shares
        this one's index and answers, which depend on devices only. Claims change with
        every pod made from a template; devices seldom do."""
        snapshot = copy.copy(self)
        snapshot.claims = claims
        snapshot.templates = templates
        snapshot.resource_version = resource_version
        return snapshot

    def extended_class(self, resource: str) -> str | None:
        """The device class that serves ``resource`` as an extended resource, or None.

        KEP-5004 (``extended/cache.go``, ``OnDeviceClassEvent``): a class's
        ``extendedResourceName``, and always ``deviceclass.resource.kubernetes.io/<class>``.
        Whether a node uses it depends on the node: one whose allocatable has the resource
        uses its device plugin (``filterExtendedResources``)."""
        return self.extended.get(resource)

    def content(self, device: Device) -> tuple[Any, ...]:
        known = self._contents.get(device)
        if known is None:
            known = self._contents[device] = device.content(self.identity)
        return known

    def _extra(self, node: Node) -> list[Device]:
        extra = list(self._placed.get(node.name, ()))
        extra.extend(
            device
            for device, every, terms in self._network
            if every or (terms is not None and terms_match(terms, node.labels, node.name))
        )
        return extra

    def devices_for(self, node: Node) -> tuple[Device, ...]:
        local = [d for s in self._local.get(node.name, ()) for d in s.devices]
        return (*local, *self._extra(node))

    def profile(self, node: Node) -> Profile:
        """The node's devices and the key of nodes with the same devices."""
        slices = self._local.get(node.name, ())
        extra = self._extra(node) if self._placed or self._network else []
        if len(slices) == 1 and not extra:
            key: tuple[Any, ...] = (slices[0].signature(self.identity),)
        else:
            numbers = sorted(s.signature(self.identity) for s in slices)
            contents = sorted((self.content(d) for d in extra), key=hash)
            key = (*numbers, *contents)
        devices = (*(d for s in slices for d in s.devices), *extra)
        if self.counters:
            pools = sorted({(d.driver, d.pool) for d in devices if d.consumes})
            key = (
                *key,
                tuple(
                    tuple(
                        sorted(
                            (n, tuple(sorted(c.items())))
                            for n, c in self.counters.get(p, {}).items()
                        )
                    )
                    for p in pools
                ),
            )
        return Profile(devices=devices, key=key, example=node.name)

    def named_devices(self) -> Iterator[tuple[str, Device]]:
        """(node, device) for every device given to one named node (its slice's
        ``nodeName``, or ``perDeviceNodeSelection`` naming it)."""
        for name, slices in self._local.items():
            for s in slices:
                for device in s.devices:
                    yield name, device
        for name, devices in self._placed.items():
            for device in devices:
                yield name, device

    @property
    def reachable_devices(
        self,
    ) -> Sequence[tuple[Device, bool, tuple[Mapping[str, Any], ...] | None]]:
        """Devices several nodes may use: (device, every node, the node selector's terms)."""
        return self._network

    def node_names(self) -> list[str]:
        """Nodes named by slices: what to judge when no node inventory is given."""
        return sorted({*self._local, *self._placed})
