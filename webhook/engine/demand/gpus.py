"""What a pod template asks of GPUs: per container, and the pod's effective request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.engine.kube.quantity import QuantityError, parse_quantity, whole_quantity
from webhook.engine.kube.workloads import Path
from webhook.engine.policy.ruleset import GPUResources
from webhook.engine.resources.fit import effective as effective_request
from webhook.engine.resources.fit import requests_of
from webhook.engine.resources.gpufacts import MIG_PREFIX


@dataclass(frozen=True, slots=True)
class QuantityProblem:
    """A GPU quantity Kubernetes would reject (or, in a template, a controller would)."""

    check: str  # a built-in check name
    resource: str
    detail: str
    request: Fraction | None = None
    limit: Fraction | None = None
    # As the user wrote them ("0.5", not "500m"): messages quote the spec back.
    request_text: str = ""
    limit_text: str = ""


@dataclass(slots=True)
class Container:
    section: str  # "containers" or "initContainers"
    index: int
    name: str
    body: Mapping[str, Any]
    sidecar: bool
    gpus: dict[str, int] = field(default_factory=dict)
    problems: list[QuantityProblem] = field(default_factory=list)
    # cpu (millicores) and memory (bytes) requests as the scheduler counts them
    # (``fit.requests_of``), read while the container's resources are at hand.
    cpu: int = 0
    memory: int = 0
    # A memory limit this webhook sets where no request is: Kubernetes copies it there.
    memory_set: int | None = None
    # Extended resources it asks for that are no GPU to the policy (read with the GPUs, so
    # that a misspelt one costs no second pass): ``checks.misspelled_findings``.
    others: list[str] | None = None
    # It names DRA claims in ``resources.claims``, and the inventory shows that none of
    # them can give a GPU (``dra.pod_claims``): it asks for no GPU through them.
    claims_no_gpu: bool = False

    @property
    def requests(self) -> tuple[int, int]:
        return self.cpu, self.memory if self.memory_set is None else self.memory_set

    @property
    def path(self) -> Path:
        # A single container under its own key (KServe's ``model``) has no index.
        return (self.section, self.index) if self.index >= 0 else (self.section,)

    @property
    def gpu_count(self) -> int:
        return sum(self.gpus.values())


@dataclass(slots=True)
class PodGPUs:
    """Computed once per template; checks and matchers read these many times."""

    containers: list[Container]
    effective: dict[str, int]
    total: int = 0
    resources: list[str] = field(default_factory=list)
    problems: list[tuple[Container, QuantityProblem]] = field(default_factory=list)
    # The GPU part of the request vector (``fit.Demand``), sorted by resource.
    vector: tuple[tuple[str, int], ...] = ()
    # Per resource, the most one container asks for.
    per_container: tuple[tuple[str, int], ...] = ()
    # Keys of the pod spec holding one container each (``pod_gpus``'s ``singles``).
    singles: tuple[str, ...] = ()
    # Some container asks for more than one GPU unit (several slots or MIG devices).
    crowded: bool = False
    # Some resource is a MIG slice or a shared slot by its name alone.
    partial: bool = False

    @classmethod
    def of(
        cls,
        containers: list[Container],
        effective: dict[str, int],
        singles: tuple[str, ...] = (),
        *,
        gpus: GPUResources | None = None,
    ) -> PodGPUs:
        # One pass over the containers, and the answer built by position: this runs on
        # every admission, where comprehensions and a keyword call cost a third of it.
        problems: list[tuple[Container, QuantityProblem]] = []
        most: dict[str, int] = {}
        crowded = False
        for c in containers:
            if c.problems:
                problems.extend((c, p) for p in c.problems)
            asked = c.gpus
            if not asked or not effective:
                continue
            if not most:
                most = asked  # the common case: one GPU container
            else:
                most = {n: max(most.get(n, 0), asked.get(n, 0)) for n in {*most, *asked}}
            if not crowded:
                crowded = sum(asked.values()) > 1
        if not effective:
            return cls(containers, effective, 0, [], problems, (), (), singles)
        vector: list[tuple[str, int]] = []
        partial = False
        for name, count in effective.items():
            if count > 0:
                vector.append((name, count))
                if not partial:
                    partial = name.startswith(MIG_PREFIX) or (
                        gpus is not None and gpus.is_shared(name)
                    )
        if len(vector) > 1:
            vector.sort()
        return cls(
            containers,
            effective,
            sum(effective.values()),  # total
            [vector[0][0]] if len(vector) == 1 else [r for r, _ in vector],  # resources
            problems,
            tuple(vector),
            tuple(sorted(most.items())) if len(most) > 1 else tuple(most.items()),
            singles,
            crowded,
            partial,
        )


_NO_MAP: Mapping[str, Any] = {}


def _container(body: Mapping[str, Any], section: str, index: int, gpus: GPUResources) -> Container:
    """One container's GPU asks, cpu and memory (called by position: once per container of
    every review)."""
    name = body.get("name", "")
    container = Container(
        section,
        index,
        name if type(name) is str else str(name),
        body,
        section == "initContainers" and body.get("restartPolicy") == "Always",
        {},  # a literal, not the fields' factories: cheaper, per container of every review
        [],
    )
    resources = body.get("resources")
    if not resources or not isinstance(resources, dict):
        return container
    # Read in line, not through a helper: this runs for every container of every review.
    requests = resources.get("requests")
    if not isinstance(requests, dict):
        requests = _NO_MAP
    limits = resources.get("limits")
    if not isinstance(limits, dict):
        limits = _NO_MAP
    if not requests and not limits:
        return container
    container.cpu, container.memory = requests_of(requests, limits)
    is_gpu = gpus.is_gpu
    for resource in requests:
        if is_gpu(resource):
            _read(container, resource, requests[resource], limits.get(resource))
        elif "/" in resource:
            _other(container, resource)
    for resource in limits:
        if resource not in requests:
            if is_gpu(resource):
                _read(container, resource, None, limits[resource])
            elif "/" in resource:
                _other(container, resource)
    return container


def _other(container: Container, resource: object) -> None:
    if isinstance(resource, str):
        if container.others is None:
            container.others = [resource]
        else:
            container.others.append(resource)


# Device counts by their text ("4": 4; -1 where not a whole count): the API server sends
# quantities as strings, and a cluster's pods repeat a few of them.
_COUNTS: dict[str, int] = {}


def _count(raw: object) -> int | None:
    """``whole_quantity``, remembered by text."""
    if type(raw) is not str:
        return whole_quantity(raw)
    hit = _COUNTS.get(raw)
    if hit is None:
        whole = whole_quantity(raw)
        hit = -1 if whole is None else whole
        if len(_COUNTS) < 1024 and len(raw) <= 32:
            _COUNTS[raw] = hit
    return None if hit < 0 else hit


def _read(container: Container, name: str, raw_request: object, raw_limit: object) -> None:
    if raw_limit is not None and (raw_request is None or raw_request == raw_limit):
        # The common, valid case: a whole limit, and no request or the same one.
        whole = _count(raw_limit)
        if whole is not None:
            if whole:
                container.gpus[name] = whole
            return

    def parse(raw: object, what: str) -> Fraction | None:
        if raw is None:
            return None
        try:
            return parse_quantity(raw)
        except QuantityError as exc:
            container.problems.append(QuantityProblem("invalidQuantity", name, f"{what} {exc}"))
            return None

    request, limit = parse(raw_request, "request"), parse(raw_limit, "limit")
    if container.problems and container.problems[-1].resource == name:
        return
    amount = request if request is not None else limit
    if amount is None:
        return
    problems = container.problems
    said_request, said_limit = _spelled(raw_request), _spelled(raw_limit)
    if request is not None and limit is None:
        problems.append(
            QuantityProblem(
                "requestsWithoutLimits", name, "", request=request, request_text=said_request
            )
        )
    elif request is not None and limit is not None and request != limit:
        problems.append(
            QuantityProblem(
                "requestsNotEqualLimits",
                name,
                "",
                request=request,
                limit=limit,
                request_text=said_request,
                limit_text=said_limit,
            )
        )
    # Fractions hash slowly: a tuple, not a set, of the one or two distinct values.
    values = (
        ((limit, raw_limit),)
        if request is None or request == limit
        else ((request, raw_request), (limit, raw_limit))
    )
    for value, raw in values:
        if value is None:
            continue
        text = _spelled(raw)
        if value < 0:
            problems.append(
                QuantityProblem("negativeQuantity", name, "", request=value, request_text=text)
            )
        elif value.denominator != 1:
            problems.append(
                QuantityProblem("fractionalQuantity", name, "", request=value, request_text=text)
            )
    if amount > 0:
        # A fractional request still reserves at least that share: round up for capacity.
        container.gpus[name] = -(-amount.numerator // amount.denominator)


def _spelled(raw: object) -> str:
    return "" if raw is None else str(raw)


def pod_gpus(spec: Mapping[str, Any], gpus: GPUResources, singles: tuple[str, ...] = ()) -> PodGPUs:
    """Containers' GPU asks and the effective pod request, as the scheduler computes it.

    For each resource: max(the largest init container plus the sidecars started before
    it, the app containers plus all sidecars). Limits stand in for missing requests, as
    the API server defaults them on pods (and controllers do from templates). ``singles``
    name keys that hold one app container each (KServe's ``model``).
    """
    containers: list[Container] = []
    for section in ("initContainers", "containers"):
        items = spec.get(section)
        if isinstance(items, list):
            for i, body in enumerate(items):
                if isinstance(body, dict):
                    containers.append(_container(body, section, i, gpus))
    for key in singles:
        body = spec.get(key)
        if isinstance(body, dict):
            single = _container(body, key, -1, gpus)
            # KServe names the container it makes from the model or framework form this way.
            single.name = single.name or "kserve-container"
            containers.append(single)
    effective: dict[str, int] = {}
    if "initContainers" in spec and any(
        c.section == "initContainers" and c.gpus for c in containers
    ):
        for name in {n for c in containers for n in c.gpus}:
            rows = ((c.section, c.sidecar, c.gpus.get(name, 0)) for c in containers)
            effective[name] = effective_request(rows)
    else:  # the common case: app containers only, whose requests add up
        for c in containers:
            for name, count in c.gpus.items():
                effective[name] = effective.get(name, 0) + count
    return PodGPUs.of(containers, effective, singles, gpus=gpus)
