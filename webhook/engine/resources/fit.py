"""Whether a pod's whole request fits one node, as the scheduler's NodeResourcesFit decides.

The scheduler sums a pod's requests into one vector and keeps a node only when every entry
fits (``fitsRequest`` in kubernetes ``pkg/scheduler/framework/plugins/noderesources/fit.go``:
CPU and memory when requested, and every extended resource whose request is not zero). A
pod asking for ``nvidia.com/gpu`` and ``nvidia.com/mig-1g.10gb`` therefore needs one node
with both; comparing each resource with its own largest node admits pods that stay Pending.

The webhook judges an empty node (what could ever fit, not what is free now), in the units
the scheduler and the device plugin allocate: slots on shared nodes, MIG devices on MIG
nodes. It adds one rule that is not the scheduler's but the kubelet's: the NVIDIA device
plugin refuses a container more than one shared slot where its config says so
(``gpufacts.SlotRefusal``), and such a node takes the pod only to fail it.

Which extended resources count: the GPU resources of the policy. Other extended resources
are left out on purpose: schedulers are often configured to ignore some
(``ignoredResources``, e.g. HAMi's ``nvidia.com/gpumem``), and the webhook cannot see that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple, Protocol

from webhook.engine.kube.quantity import (
    QuantityError,
    format_bytes,
    format_quantity,
    parse_quantity,
)
from webhook.engine.resources.gpufacts import DEVICE_PLUGIN_DEFAULTS, GPUFacts, SlotRefusal


class Demand(NamedTuple):
    """A pod's request vector: what the scheduler compares with a node's allocatable.

    A tuple, not a dataclass: it is built and hashed (a memo key) on every admission."""

    gpus: tuple[tuple[str, int], ...]  # effective request per GPU resource, sorted, > 0
    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    # Per GPU resource, the most units one container asks for (the device plugin's rule).
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
    # Set when the node has the slots but its device plugin refuses a container ``need``
    # of them (``have`` is then 1, the most it gives one container).
    refused: bool = False


def shortfalls(
    allocatable: Mapping[str, int],
    facts: GPUFacts,
    demand: Demand,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
) -> tuple[Shortfall, ...]:
    """What keeps a pod off an empty node of this class; empty when it fits."""
    out: list[Shortfall] = []
    for name, need in demand.gpus:
        have = allocatable.get(name, 0)
        if need > have:
            out.append(Shortfall(name, need, have))
            continue
        device = facts.devices.get(name)
        if device is not None and device.shared:
            biggest = dict(demand.per_container).get(name, 0)
            if refusal.refuses(device, biggest):
                out.append(Shortfall(name, biggest, 1, refused=True))
    # CPU and memory: only where the node (or a declared pool) says how much it has.
    for name, need in (("cpu", demand.cpu), ("memory", demand.memory)):
        limit = allocatable.get(name)
        if need > 0 and limit is not None and need > limit:
            out.append(Shortfall(name, need, limit))
    return tuple(out)


def pods_per_node(allocatable: Mapping[str, int], facts: GPUFacts, demand: Demand) -> int | None:
    """How many pods of this request vector one empty node of this class holds at once:
    the least, over the entries of the vector, of what the node has divided by what one
    pod asks (``fitsRequest`` applied to the node again after each pod). ``None`` when no
    entry bounds it (a vector of amounts the node does not state).

    The one place gang checks ask "how many of this pod fit a node"; node pools from any
    source (declared pools, autoscaler node pools) answer through it with their
    allocatable. The node's ``pods`` limit is not read (the inventory keeps only cpu,
    memory and extended resources), so the count may be higher than the kubelet allows,
    never lower: a gang judged too large by it is too large.
    """
    if shortfalls(allocatable, facts, demand):
        return 0
    most: int | None = None
    for name, need in (*demand.gpus, ("cpu", demand.cpu), ("memory", demand.memory)):
        have = allocatable.get(name)
        if need <= 0 or have is None:
            continue
        count = have // need
        most = count if most is None else min(most, count)
    return most


def quantity_text(resource: str, amount: int) -> str:
    """An entry of the vector as people write it: ``64Gi`` of memory, ``500m`` of cpu."""
    if resource == "memory":
        return format_bytes(amount)
    if resource == "cpu":
        return format_quantity(Fraction(amount, 1000))
    return str(amount)


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


def requests_of(requests: Mapping[str, Any], limits: Mapping[str, Any]) -> tuple[int, int]:
    """A container's ``cpu`` (millicores) and ``memory`` (bytes) requests as the scheduler
    counts them: a missing request is the limit, as the API server defaults it
    (``SetDefaults_Pod``)."""
    cpu = requests.get("cpu") if requests else None
    if cpu is None and limits:
        cpu = limits.get("cpu")
    memory = requests.get("memory") if requests else None
    if memory is None and limits:
        memory = limits.get("memory")
    cpu_memo, memory_memo = _AMOUNTS[1], _AMOUNTS[0]
    try:  # quantities repeat: most lookups hit the memo
        millis = 0 if cpu is None else cpu_memo.get(cpu)
        size = 0 if memory is None else memory_memo.get(memory)
    except TypeError:
        millis = size = None  # unhashable, so ill-typed: _amount reads it as 0
    if millis is None:
        millis = _amount(cpu, cpu=True)
    if size is None:
        size = _amount(memory, cpu=False)
    return millis, size


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


class Requests(Protocol):
    """What a container contributes to the request vector (``gpus.Container``)."""

    section: str
    sidecar: bool

    @property
    def requests(self) -> tuple[int, int]: ...


def _app_only(containers: Sequence[Requests]) -> bool:
    for c in containers:  # noqa: SIM110 - a generator costs more, on every admission
        if c.section == "initContainers":
            return False
    return True


def container_requests(
    containers: Sequence[Requests], *, memory: Mapping[int, int] | None = None
) -> tuple[int, int]:
    """The containers' effective ``cpu`` and ``memory`` requests (component-helpers/resource
    ``AggregateContainerRequests``), without pod-level resources or overhead. ``memory``
    replaces the memory of the containers at those positions (a limit about to be set where
    no request is)."""
    extra = memory or {}
    if not extra and _app_only(containers):
        cpu = mem = 0  # the common case: app containers only, whose requests add up
        for c in containers:
            c_cpu, c_mem = c.requests
            cpu += c_cpu
            mem += c_mem
        return cpu, mem
    amounts = [c.requests for c in containers]
    cpu = effective((c.section, c.sidecar, a[0]) for c, a in zip(containers, amounts, strict=True))
    mem = effective(
        (c.section, c.sidecar, extra.get(i, a[1]))
        for i, (c, a) in enumerate(zip(containers, amounts, strict=True))
    )
    return cpu, mem


def pod_requests(
    spec: Mapping[str, Any],
    containers: Sequence[Requests],
    *,
    memory: Mapping[int, int] | None = None,
) -> tuple[int, int]:
    """The pod's effective ``cpu`` and ``memory`` requests as the scheduler counts them
    (component-helpers/resource ``PodRequests``): the containers' aggregate, replaced by
    pod-level requests where the pod sets them, overhead included (``spec.overhead``, set
    by a RuntimeClass). ``memory`` as in ``container_requests``."""
    cpu, mem = container_requests(containers, memory=memory)
    # KEP-2837 and overhead: most pods set neither, and pay one lookup for each.
    resources, overhead = spec.get("resources"), spec.get("overhead")
    if not resources and not overhead:
        return cpu, mem
    if resources:
        cpu, mem = _with_pod_level(spec, cpu, mem)
    if overhead:
        overhead = overhead if isinstance(overhead, dict) else {}
        cpu += _amount(overhead.get("cpu", 0), cpu=True)
        mem += _amount(overhead.get("memory", 0), cpu=False)
    return cpu, mem


# --- pod-level resources (KEP-2837, PodLevelResources: beta and on by default since 1.34) ---

# What ``spec.resources`` may hold (component-helpers/resource
# ``IsSupportedPodLevelResource``): cpu, memory and hugepages-*; the API server refuses any
# other name there (pkg/apis/core/validation ``validatePodResourceName``), extended resources
# such as nvidia.com/gpu among them, so only cpu and memory are read here, and a GPU is asked
# in a container's resources alone.


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def pod_level(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The pod's own ``spec.resources`` requests and limits (empty when it sets none)."""
    resources = _map(spec.get("resources"))
    return _map(resources.get("requests")), _map(resources.get("limits"))


def containers_ask(spec: Mapping[str, Any], name: str) -> bool:
    """Whether any container (init, sidecar or app) names ``name`` in its requests or
    limits: a limit becomes the container's request (``SetDefaults_Pod``)."""
    for section in ("initContainers", "containers"):
        for body in spec.get(section) or ():
            resources = _map(_map(body).get("resources"))
            if name in _map(resources.get("requests")) or name in _map(resources.get("limits")):
                return True
    return False


def pod_level_request(spec: Mapping[str, Any], name: str, *, cpu: bool) -> int | None:
    """The pod-level request of ``cpu`` or ``memory`` as the API server leaves it: written,
    or defaulted where only the pod-level limit is (pkg/apis/core/v1/defaults.go
    ``defaultPodRequests``: the containers' effective requests when any container asks
    for it, else the pod-level limit). ``None``: the pod sets neither, or containers ask
    and the aggregate stands."""
    requests, limits = pod_level(spec)
    if name in requests:
        return _amount(requests[name], cpu=cpu)
    if name in limits and not containers_ask(spec, name):
        return _amount(limits[name], cpu=cpu)
    return None


def pod_level_limit(spec: Mapping[str, Any], name: str, *, cpu: bool) -> int | None:
    limits = pod_level(spec)[1]
    return _amount(limits[name], cpu=cpu) if name in limits else None


def _with_pod_level(spec: Mapping[str, Any], cpu: int, mem: int) -> tuple[int, int]:
    """The pod's effective requests as the scheduler reads them: pod-level requests replace
    the containers' aggregate (component-helpers/resource ``PodRequests``,
    ``applyPodLevelResources``)."""
    pod_cpu = pod_level_request(spec, "cpu", cpu=True)
    pod_mem = pod_level_request(spec, "memory", cpu=False)
    return (cpu if pod_cpu is None else pod_cpu), (mem if pod_mem is None else pod_mem)


def demand_of(
    spec: Mapping[str, Any],
    gpus: tuple[tuple[str, int], ...],
    per_container: tuple[tuple[str, int], ...],
    containers: Sequence[Requests],
) -> Demand:
    """The request vector of a pod (after the webhook's own mutations); ``gpus`` and
    ``per_container`` as ``PodGPUs`` holds them."""
    cpu, memory = pod_requests(spec, containers)
    return Demand(gpus, cpu, memory, per_container)
