"""Whether a pod's whole request fits one node, as the scheduler's NodeResourcesFit decides.

The scheduler sums a pod's requests into one vector and keeps a node only when every entry
fits (``fitsRequest`` in kubernetes ``pkg/scheduler/framework/plugins/noderesources/fit.go``:
CPU and memory when requested, and every extended resource whose request is not zero). A
pod asking for ``nvidia.com/gpu`` and ``nvidia.com/mig-1g.10gb`` therefore needs one node
with both; comparing each resource with its own largest node admits pods that stay Pending.

The webhook judges an empty node (what could ever fit, not what is free now) and adds one
rule of its own, from the device plugin's documentation: on a node whose GPUs are shared
(time-slicing or MPS), a container cannot get more GPUs than the node physically has, however
many slots it asks for.

Which extended resources count: the GPU resources of the policy. Other extended resources
are left out on purpose: schedulers are often configured to ignore some
(``ignoredResources``, e.g. HAMi's ``nvidia.com/gpumem``), and the webhook cannot see that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

from webhook.engine.gpufacts import GPUFacts
from webhook.engine.quantity import QuantityError, parse_quantity


class Demand(NamedTuple):
    """A pod's request vector: what the scheduler compares with a node's allocatable.

    A tuple, not a dataclass: it is built and hashed (a memo key) on every admission."""

    gpus: tuple[tuple[str, int], ...]  # effective request per GPU resource, sorted, > 0
    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    # Per GPU resource, the most units one container asks for (the physical-GPU rule).
    per_container: tuple[tuple[str, int], ...] = ()

    def amount(self, resource: str) -> int:
        if resource == "cpu":
            return self.cpu
        if resource == "memory":
            return self.memory
        return dict(self.gpus).get(resource, 0)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One entry of the vector a node lacks."""

    resource: str
    need: int
    have: int
    # Set when the node has the slots but fewer physical GPUs than one container asks for.
    physical: bool = False


def shortfalls(
    allocatable: Mapping[str, int], facts: GPUFacts, demand: Demand
) -> tuple[Shortfall, ...]:
    """What keeps a pod off an empty node of this class; empty when it fits."""
    out: list[Shortfall] = []
    for name, need in demand.gpus:
        have = allocatable.get(name, 0)
        if need > have:
            out.append(Shortfall(name, need, have))
            continue
        device = facts.devices.get(name)
        if device is not None and device.kind == "shared" and device.physical is not None:
            biggest = dict(demand.per_container).get(name, 0)
            if biggest > device.physical:
                out.append(Shortfall(name, biggest, device.physical, physical=True))
    # CPU and memory: only where the node (or a declared pool) says how much it has.
    for name, need in (("cpu", demand.cpu), ("memory", demand.memory)):
        limit = allocatable.get(name)
        if need > 0 and limit is not None and need > limit:
            out.append(Shortfall(name, need, limit))
    return tuple(out)


# --- the pod's side of the vector ---------------------------------------------------------


# Pods of one cluster repeat a few dozen quantities: memoised by the raw value (1, "1" and
# 1.0 are the same amount), one map for CPU and one for memory.
_AMOUNTS: tuple[dict[object, int], dict[object, int]] = ({}, {})


def _amount(raw: object, *, cpu: bool) -> int:
    """Whole millicores or bytes, rounded up as ``resource.Quantity`` does."""
    memo = _AMOUNTS[cpu]
    try:
        hit = memo.get(raw)
    except TypeError:
        return 0  # unhashable, so ill-typed: the API server's validation rejects it
    if hit is not None:
        return hit
    try:
        value = parse_quantity(raw)
    except QuantityError:
        value = Fraction(0)
    value = max(value * 1000 if cpu else value, Fraction(0))
    amount = -(-value.numerator // value.denominator)
    if len(memo) < 4096:
        memo[raw] = amount
    return amount


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def container_request(body: Mapping[str, Any], name: str) -> int:
    """A container's request for ``cpu`` or ``memory``; the API server defaults a missing
    request to the limit (``SetDefaults_Pod``), so a limit alone counts."""
    resources = _map(body.get("resources"))
    raw = _map(resources.get("requests")).get(name)
    if raw is None:
        raw = _map(resources.get("limits")).get(name)
    return 0 if raw is None else _amount(raw, cpu=name == "cpu")


def effective(amounts: Iterable[tuple[str, bool, int]]) -> int:
    """The effective pod request of one resource from (section, sidecar, amount) rows.

    As ``PodRequests`` in ``k8s.io/component-helpers/resource``: the app containers plus
    every restartable init container (native sidecar), or the largest init container plus
    the sidecars started before it, whichever is larger.
    """
    sidecars = init_peak = app = 0
    for section, sidecar, amount in amounts:
        if section == "initContainers":
            if sidecar:
                sidecars += amount
                init_peak = max(init_peak, sidecars)
            else:
                init_peak = max(init_peak, sidecars + amount)
        else:
            app += amount
    return max(init_peak, app + sidecars)


def _cpu_memory(body: object) -> tuple[int, int]:
    resources = body.get("resources") if isinstance(body, dict) else None
    if not isinstance(resources, dict):
        return 0, 0
    requests = resources.get("requests")
    limits = resources.get("limits")
    requests = requests if isinstance(requests, dict) else {}
    limits = limits if isinstance(limits, dict) else {}
    cpu = requests.get("cpu", limits.get("cpu"))
    memory = requests.get("memory", limits.get("memory"))
    return (
        0 if cpu is None else _amount(cpu, cpu=True),
        0 if memory is None else _amount(memory, cpu=False),
    )


def pod_requests(spec: Mapping[str, Any], singles: tuple[str, ...] = ()) -> tuple[int, int]:
    """The pod's effective ``cpu`` (millicores) and ``memory`` (bytes) requests, overhead
    included (``spec.overhead``, set by a RuntimeClass), as the scheduler counts them.
    A missing request is the limit, as the API server defaults it (``SetDefaults_Pod``).
    ``singles``: keys holding one app container each (KServe's ``model``)."""
    cpu = memory = 0
    containers = spec.get("containers")
    for body in containers if isinstance(containers, list) else ():
        c, m = _cpu_memory(body)
        cpu += c
        memory += m
    for key in singles:
        c, m = _cpu_memory(spec.get(key))
        cpu += c
        memory += m
    inits = spec.get("initContainers")
    if isinstance(inits, list) and inits:
        rows = [
            ("initContainers", isinstance(b, dict) and b.get("restartPolicy") == "Always", b)
            for b in inits
        ]
        amounts = [(section, sidecar, _cpu_memory(body)) for section, sidecar, body in rows]
        cpu = effective([(s, side, a[0]) for s, side, a in amounts] + [("containers", False, cpu)])
        memory = effective(
            [(s, side, a[1]) for s, side, a in amounts] + [("containers", False, memory)]
        )
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        cpu += _amount(overhead.get("cpu", 0), cpu=True)
        memory += _amount(overhead.get("memory", 0), cpu=False)
    return cpu, memory


def pod_memory(
    spec: Mapping[str, Any],
    extra: Mapping[tuple[str | int, ...], int],
    singles: tuple[str, ...] = (),
) -> int:
    """The pod's effective memory request if the containers at ``extra``'s paths
    (``(section, index)``, or ``(key,)`` for a single) had those amounts as limits and no
    request of their own."""
    rows: list[tuple[str, bool, int]] = []
    for key in singles:
        amount = extra.get((key,))
        rows.append((key, False, _cpu_memory(spec.get(key))[1] if amount is None else amount))
    for section in ("initContainers", "containers"):
        items = spec.get(section)
        for index, body in enumerate(items if isinstance(items, list) else ()):
            sidecar = (
                section == "initContainers"
                and isinstance(body, dict)
                and body.get("restartPolicy") == "Always"
            )
            amount = extra.get((section, index))
            rows.append((section, sidecar, _cpu_memory(body)[1] if amount is None else amount))
    overhead = spec.get("overhead")
    memory = _amount(overhead.get("memory", 0), cpu=False) if isinstance(overhead, dict) else 0
    return effective(rows) + memory


def demand_of(
    spec: Mapping[str, Any],
    gpus: tuple[tuple[str, int], ...],
    per_container: tuple[tuple[str, int], ...],
    singles: tuple[str, ...] = (),
) -> Demand:
    """The request vector of a pod spec (after the webhook's own mutations); ``gpus`` and
    ``per_container`` as ``PodGPUs`` holds them."""
    cpu, memory = pod_requests(spec, singles)
    return Demand(gpus, cpu, memory, per_container)
