"""Which pods a Karpenter NodePool can take, decided as Karpenter decides it.

Read from kubernetes-sigs/karpenter (2266468104f3, 2026-08-20):

- ``pkg/scheduling/requirement.go``: a requirement is a set of values or its complement,
  with integer bounds (``Gt N`` becomes ``>= N+1``, ``Lt N`` becomes ``<= N-1``);
  ``Intersection`` and ``HasIntersection`` are ported as ``Requirement.intersection`` and
  ``Requirement.meets``.
- ``pkg/scheduling/requirements.go``: ``Compatible`` (a key the pod requires that the pool
  does not define is refused unless it is a well-known label or the pod's operator is
  ``NotIn``/``DoesNotExist``; then ``Intersects``) and ``Intersects`` (keys both define
  must share a value, two negative operators always do).
- ``pkg/controllers/provisioning/scheduling/nodeclaim.go`` ``CanAdd``: the pool's taints
  must all be tolerated (``scheduling.Taints.ToleratesPod``: every taint, whatever its
  effect; ``startupTaints`` are not asked), the pool's requirements (its requirements
  plus its template labels, ``nodeclaimtemplate.go``) compatible with the pod's, and some
  instance type compatible with both (``filterInstanceTypesByRequirements``:
  ``instanceType.Requirements.Intersects``) must hold the pod's requests.
- ``pkg/scheduling/requirements.go`` ``newPodRequirements``: the pod's nodeSelector plus
  one required node-affinity term; the provisioner relaxes to the next term when one
  fails (``preferences.go``), so a pod fits when any term does. Preferred terms are
  relaxed away entirely.
- ``scheduler.go`` ``filterByRemainingResources``: an instance type whose *capacity*
  exceeds what the pool's ``spec.limits`` leave is never launched. The webhook judges a
  pool as if it were empty, as it judges nodes: usage comes and goes, a pool too small for
  one node never fits.

Well-known labels are Karpenter's (``pkg/apis/v1/labels.go``) plus the provider's own
domain (aws/karpenter-provider-aws ``pkg/apis/v1/labels.go`` registers its
``karpenter.k8s.aws/*`` labels, Azure/karpenter-provider-azure ``AzureWellKnownLabels``
its ``karpenter.azure.com/*`` ones; EKS Auto Mode uses ``eks.amazonaws.com/*`` names,
docs.aws.amazon.com/eks/latest/userguide/create-node-pool.html).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.kube.selectors import tolerates
from webhook.engine.resources.instancetypes import Allowance, Catalogue, InstanceType
from webhook.engine.resources.inventory import Node, Placement, Taint
from webhook.engine.resources.nodepools import (
    NODEPOOL_LABEL,
    Autoscaler,
    KarpenterPool,
)

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
WELL_KNOWN = frozenset(
    {
        NODEPOOL_LABEL,
        ZONE,
        REGION,
        INSTANCE_TYPE,
        ARCH,
        OS,
        CAPACITY_TYPE,
        "node.kubernetes.io/windows-build",
    }
)
# Karpenter's NormalizedLabels: pods may still use the beta names.
NORMALIZED = {
    "failure-domain.beta.kubernetes.io/zone": ZONE,
    "failure-domain.beta.kubernetes.io/region": REGION,
    "beta.kubernetes.io/arch": ARCH,
    "beta.kubernetes.io/os": OS,
    "beta.kubernetes.io/instance-type": INSTANCE_TYPE,
}
# Where and how a node is bought, not what it is: every instance type may come with any
# of these, as far as the webhook can know (offerings are per zone and capacity type).
OFFERING_KEYS = frozenset(
    {
        ZONE,
        REGION,
        OS,
        CAPACITY_TYPE,
        NODEPOOL_LABEL,
        "node.kubernetes.io/windows-build",
        "topology.k8s.aws/zone-id",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
        "karpenter.k8s.aws/instance-tenancy",
        "karpenter.k8s.aws/placement-group-id",
        "karpenter.k8s.aws/placement-group-partition",
        "karpenter.sh/reservation-id",
    }
)
# karpenter.sh/capacity-type values an offering can have (pkg/apis/v1/labels.go).
CAPACITY_TYPES = ("on-demand", "spot", "reserved")
UNLIMITED_NODES = 1_000_000  # a pool without limits: as many nodes as the cloud gives


@dataclass(frozen=True, slots=True)
class Provider:
    """A Karpenter cloud provider, named by its node class group."""

    catalogue: str  # provider name in the catalogue
    name: str  # as people say it
    label_prefix: str  # where its instance-type labels live
    domains: tuple[str, ...]  # label domains that are well-known for it
    # Instance type names that can hold no GPU (so an unlisted one need not be feared).
    gpu_less: Callable[[str], bool] = field(default=lambda _name: False)


def _aws_gpu_less(name: str) -> bool:
    # The category is the letters before the generation (types.go instanceTypeScheme):
    # only g, gr and p instance types carry GPUs (inf, trn and dl accelerators are no GPU
    # resource the webhook knows).
    found = re.match(r"([a-z]+)\d", name)
    return bool(found) and found.group(1) not in ("g", "gr", "p") if found else False


def _azure_gpu_less(name: str) -> bool:
    # Azure sizes are Standard_<Family>...: N is the GPU (and FPGA) family
    # (learn.microsoft.com/azure/virtual-machines/vm-naming-conventions).
    found = re.match(r"Standard_([A-Z])", name)
    return bool(found) and found.group(1) != "N" if found else False


PROVIDERS = {
    "karpenter.k8s.aws": Provider(
        "aws",
        "Karpenter on AWS",
        "karpenter.k8s.aws/",
        ("karpenter.k8s.aws/", "topology.k8s.aws/"),
        gpu_less=_aws_gpu_less,
    ),
    "eks.amazonaws.com": Provider(
        "aws",
        "EKS Auto Mode",
        "eks.amazonaws.com/",
        ("eks.amazonaws.com/", "topology.k8s.aws/"),
        gpu_less=_aws_gpu_less,
    ),
    "karpenter.azure.com": Provider(
        "azure",
        "Karpenter on Azure",
        "karpenter.azure.com/",
        ("karpenter.azure.com/", "kubernetes.azure.com/"),
        gpu_less=_azure_gpu_less,
    ),
}


# --- the requirement algebra (requirement.go) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Requirement:
    """A set of label values (or, ``complement``, every value but these), bounded."""

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    gte: int | None = None
    lte: int | None = None

    @classmethod
    def of(cls, key: str, operator: str, values: Sequence[str] = ()) -> Requirement:
        key = NORMALIZED.get(key, key)
        if operator == "In":
            return cls(key, complement=False, values=frozenset(values))
        if operator == "DoesNotExist":
            return cls(key, complement=False)
        if operator == "NotIn":
            return cls(key, complement=True, values=frozenset(values))
        if operator in ("Gt", "Lt", "Gte", "Lte"):
            bound = _int(values[0]) if len(values) == 1 else None
            if bound is None:  # the API server refuses these; nothing can match them
                return cls(key, complement=False)
            if operator == "Gt":
                return cls(key, complement=True, gte=bound + 1)
            if operator == "Lt":
                return cls(key, complement=True, lte=bound - 1)
            if operator == "Gte":
                return cls(key, complement=True, gte=bound)
            return cls(key, complement=True, lte=bound)
        return cls(key, complement=True)  # Exists

    @property
    def negative(self) -> bool:
        """NotIn or DoesNotExist: Karpenter lets two such requirements meet even when
        their value sets do not."""
        return bool(self.values) if self.complement else not self.values

    def has(self, value: str) -> bool:
        if not _within(value, self.gte, self.lte):
            return False
        return (value not in self.values) if self.complement else (value in self.values)

    def meets(self, other: Requirement) -> bool:
        """``HasIntersection``: some value satisfies both."""
        gte = _max(self.gte, other.gte)
        lte = _min(self.lte, other.lte)
        if gte is not None and lte is not None and gte > lte:
            return False
        if self.complement and other.complement:
            return True
        if self.complement:
            return any(v not in self.values and _within(v, gte, lte) for v in other.values)
        if other.complement:
            return any(v not in other.values and _within(v, gte, lte) for v in self.values)
        return any(v in other.values and _within(v, gte, lte) for v in self.values)

    def intersection(self, other: Requirement) -> Requirement:
        gte = _max(self.gte, other.gte)
        lte = _min(self.lte, other.lte)
        if gte is not None and lte is not None and gte > lte:
            return Requirement(self.key, complement=False)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        values = frozenset(v for v in values if _within(v, gte, lte))
        complement = self.complement and other.complement
        if not complement:
            gte = lte = None
        return Requirement(self.key, complement=complement, values=values, gte=gte, lte=lte)


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _within(value: str, gte: int | None, lte: int | None) -> bool:
    if gte is None and lte is None:
        return True
    number = _int(value)
    if number is None:
        return False
    return (gte is None or number >= gte) and (lte is None or number <= lte)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


Requirements = dict[str, Requirement]


def add(requirements: Requirements, *more: Requirement) -> Requirements:
    """``Requirements.Add``: a key given twice means both must hold."""
    for requirement in more:
        existing = requirements.get(requirement.key)
        requirements[requirement.key] = (
            requirement if existing is None else requirement.intersection(existing)
        )
    return requirements


def from_labels(labels: Mapping[str, str]) -> Requirements:
    return add({}, *(Requirement.of(k, "In", (v,)) for k, v in labels.items()))


def intersects(existing: Requirements, incoming: Requirements) -> str | None:
    """``Intersects``: None when every key both define shares a value, else why not."""
    for key in existing.keys() & incoming.keys():
        ours, theirs = existing[key], incoming[key]
        if not ours.meets(theirs) and not (ours.negative and theirs.negative):
            return f"{key}: {_text(theirs)} not in {_text(ours)}"
    return None


def compatible(
    existing: Requirements, incoming: Requirements, *, well_known: Callable[[str], bool]
) -> str | None:
    """``Compatible`` with ``AllowUndefinedWellKnownLabels``: None, or why not."""
    for key, requirement in incoming.items():
        if well_known(key) or key in existing or requirement.negative:
            continue
        return f"the pool sets no label {key}"
    return intersects(existing, incoming)


def _text(requirement: Requirement) -> str:
    values = ", ".join(sorted(requirement.values))
    if requirement.complement:
        bounds = "".join(
            [
                f" >= {requirement.gte}" if requirement.gte is not None else "",
                f" <= {requirement.lte}" if requirement.lte is not None else "",
            ]
        )
        return f"not [{values}]{bounds}" if values else f"any{bounds}"
    return f"[{values}]" if values else "absent"


def pod_requirements(placement: Placement) -> list[Requirements] | None:
    """The pod's requirements, one set per required term it may be relaxed to; None when
    no term can match a node that does not exist yet (``matchFields`` names a node)."""
    selector = from_labels({k: str(v) for k, v in placement.node_selector.items()})
    terms = placement.required_terms
    if terms is None:
        return [selector]
    sets = []
    for term in terms:
        if term.get("matchFields"):
            continue
        expressions = [e for e in term.get("matchExpressions") or () if isinstance(e, dict)]
        if not expressions:
            continue  # an empty term matches no node (the scheduler's NodeAffinity)
        reqs = dict(selector)
        for expr in expressions:
            values = expr.get("values") or []
            add(
                reqs,
                Requirement.of(
                    str(expr.get("key", "")),
                    str(expr.get("operator", "")),
                    tuple(str(v) for v in values) if isinstance(values, list) else (),
                ),
            )
        sets.append(reqs)
    return sets or None


def tolerates_all(taints: Iterable[Taint], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """``Taints.ToleratesPod``: every taint, whatever its effect."""
    return all(
        any(
            tolerates(t, key=taint.key, value=taint.value, effect=taint.effect) for t in tolerations
        )
        for taint in taints
    )


# --- pools, sized through the catalogue ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolType:
    """One instance type a pool may launch for GPU pods, and how many within its limits."""

    instance: InstanceType
    allocatable: Mapping[str, int]
    nodes: int  # UNLIMITED_NODES without a limit


@dataclass(frozen=True, slots=True)
class ResolvedPool:
    """A Karpenter pool as the webhook sizes it.

    ``unbounded``: why its size cannot be known (then no capacity check denies a pod it
    may take); ``types``: the GPU instance types it may launch, largest first."""

    name: str
    provider: str
    types: tuple[PoolType, ...] = ()
    unbounded: str = ""
    excluded: tuple[tuple[str, str], ...] = ()  # (instance type, why it is never launched)
    limits: Mapping[str, int] = field(default_factory=dict)
    admits: Callable[[Placement], bool] = field(default=lambda _placement: True)
    # Instance types its node class's capacity reservations hold; None: not known.
    reserved: frozenset[str] | None = None
    replicas: int | None = None  # a static pool's spec.replicas

    @property
    def gpu_limit(self) -> int | None:
        gpus = [n for r, n in self.limits.items() if "/" in r]
        return min(gpus) if gpus else None


def resolve_pool(
    pool: KarpenterPool,
    *,
    catalogue: Catalogue,
    allowance: Allowance,
    node_classes: frozenset[tuple[str, str, str]] | None = None,
    reserved: frozenset[str] | None = None,
) -> ResolvedPool:
    """``reserved``: the instance types of its EC2NodeClass's capacity reservations
    (``status.capacityReservations``), when that status was read."""
    provider = PROVIDERS.get(pool.provider_group)
    name = provider.name if provider else (pool.provider_group or "unknown provider")
    base = _pool_requirements(pool)
    well_known = _well_known(provider)
    pool_admits = _admits(pool.taints, base, None, well_known)

    def unbounded(reason: str) -> ResolvedPool:
        return ResolvedPool(
            pool.name, name, unbounded=reason, limits=pool.limits, admits=pool_admits
        )

    if pool.problem:
        return unbounded(pool.problem)
    if provider is None or not catalogue.of(provider.catalogue):
        return unbounded(
            f"its node class group {pool.provider_group!r} is a provider the "
            "instance-type catalogue does not cover"
        )
    if node_classes is not None and pool.node_class not in node_classes:
        group, kind, cls = pool.node_class
        return unbounded(f"its {kind or 'node class'} {cls!r} ({group}) could not be read")
    rows = [_relabelled(row, provider) for row in catalogue.of(provider.catalogue)]
    modelled = {key for row in rows for key in row.labels}
    # Requirements only: template labels are the pool's own, whatever the instance type.
    unknown = sorted(
        key
        for key in {NORMALIZED.get(r.key, r.key) for r in pool.requirements}
        if key not in OFFERING_KEYS
        and key not in modelled
        and any(key.startswith(d) for d in provider.domains)
    )
    if unknown:
        return unbounded(f"its requirement on {', '.join(unknown)} is not in the catalogue")
    unlisted = _unlisted(base, provider, rows, complete=provider.catalogue in catalogue.complete)
    if unlisted:
        return unbounded(unlisted)
    capacity = base.get(CAPACITY_TYPE)
    if (
        capacity is not None
        and not any(capacity.has(t) for t in CAPACITY_TYPES if t != "reserved")
        and capacity.has("reserved")
        and reserved is None
    ):
        group, kind, cls = pool.node_class
        return unbounded(
            f"it launches reserved capacity only, and the capacity reservations of its "
            f"{kind or 'node class'} {cls!r} (status.capacityReservations) were not read"
        )
    types: list[PoolType] = []
    excluded: list[tuple[str, str]] = []
    for row in rows:
        row_reqs = _row_requirements(row, modelled, reserved)
        if intersects(row_reqs, base) is not None:
            continue
        nodes, why = _nodes_within(row, pool.limits)
        if why:
            excluded.append((row.name, why))
            continue
        if pool.replicas is not None:
            # Static: its nodes are the cluster's own (or about to be); it launches no
            # other for a pod. Kept as its types, at most ``replicas`` nodes of each.
            nodes = min(nodes, pool.replicas)
            if nodes < 1:
                excluded.append((row.name, "the pool is static with 0 replicas"))
                continue
        types.append(PoolType(row, allowance.allocatable(row), nodes))
    types.sort(key=lambda t: (-t.instance.gpu_count, -t.instance.memory_mib, t.instance.name))
    return ResolvedPool(
        pool.name,
        name,
        types=tuple(types),
        excluded=tuple(excluded),
        limits=pool.limits,
        admits=pool_admits,
        reserved=reserved,
        replicas=pool.replicas,
    )


def _relabelled(row: InstanceType, provider: Provider) -> InstanceType:
    """EKS Auto Mode writes the AWS provider's labels under its own domain."""
    if provider.label_prefix == "karpenter.k8s.aws/" or provider.catalogue != "aws":
        return row
    labels = {
        (provider.label_prefix + k.removeprefix("karpenter.k8s.aws/"))
        if k.startswith("karpenter.k8s.aws/")
        else k: v
        for k, v in row.labels.items()
    }
    return InstanceType(
        provider=row.provider,
        name=row.name,
        gpu_resource=row.gpu_resource,
        gpu_model=row.gpu_model,
        gpu_count=row.gpu_count,
        gpu_memory_mib=row.gpu_memory_mib,
        vcpu=row.vcpu,
        memory_mib=row.memory_mib,
        labels=labels,
        source=row.source,
        pods=row.pods,
    )


def _pool_requirements(pool: KarpenterPool) -> Requirements:
    reqs: Requirements = {}
    for r in pool.requirements:
        add(reqs, Requirement.of(r.key, r.operator, r.values))
    add(reqs, *from_labels({**pool.labels, NODEPOOL_LABEL: pool.name}).values())
    return reqs


def _row_requirements(
    row: InstanceType, modelled: set[str], reserved: frozenset[str] | None = None
) -> Requirements:
    """An instance type's requirements: its labels, and ``DoesNotExist`` for every label
    of its provider it lacks (aws types.go starts every GPU label as DoesNotExist).

    ``reserved``: where the node class's capacity reservations are known, only their
    instance types have ``reserved`` offerings (reserved_capacity_resolver.go)."""
    reqs = from_labels(row.labels)
    for key in modelled - reqs.keys():
        reqs[key] = Requirement(key, complement=False)
    # Offerings come in Karpenter's known capacity types only (WellKnownValuesForRequirements).
    kinds = (
        CAPACITY_TYPES
        if reserved is None or row.name in reserved
        else tuple(t for t in CAPACITY_TYPES if t != "reserved")
    )
    reqs.setdefault(CAPACITY_TYPE, Requirement.of(CAPACITY_TYPE, "In", kinds))
    return reqs


def _unlisted(
    base: Requirements, provider: Provider, rows: Sequence[InstanceType], *, complete: bool
) -> str | None:
    """Why the catalogue cannot bound the pool, or None.

    A pool that names instance types (or families) must name listed ones, or ones that
    hold no GPU: an instance type missing from the catalogue may be a GPU type it lacks
    (a retired or regional one). Where the catalogue lists only some of a provider's GPU
    types, a pool must name its types at all."""
    pins = {
        INSTANCE_TYPE: {row.name for row in rows},
        provider.label_prefix + "instance-family": {
            row.labels.get(provider.label_prefix + "instance-family", "") for row in rows
        },
        provider.label_prefix + "sku-name": {row.name for row in rows},
    }
    for key, listed in pins.items():
        pin = base.get(key)
        if pin is None or pin.complement:
            continue
        missing = sorted(v for v in pin.values if v not in listed and not provider.gpu_less(v))
        if missing:
            what = "instance family" if key.endswith("instance-family") else "instance type"
            return f"its {what} {', '.join(missing)} is not in the catalogue"
        return None
    if complete:
        return None
    family = base.get(provider.label_prefix + "sku-family")
    if family is not None and not family.has("N"):
        return None  # no GPU family allowed at all
    return (
        f"its requirements allow {provider.name} instance types the catalogue does not list "
        f"(name them with {INSTANCE_TYPE} to size the pool)"
    )


def _nodes_within(row: InstanceType, limits: Mapping[str, int]) -> tuple[int, str]:
    """How many nodes of ``row`` the pool's limits allow, or why not one."""
    capacity = row.capacity
    count = limits.get("nodes", UNLIMITED_NODES)
    if count < 1:
        return 0, "the pool's limit on nodes is 0"
    for resource, limit in limits.items():
        have = capacity.get(resource, 0)
        if resource == "nodes" or have == 0:
            continue
        if have > limit:
            return 0, f"one node has {have} {resource}, more than the pool's limit {limit}"
        count = min(count, limit // have)
    return count, ""


def _well_known(provider: Provider | None) -> Callable[[str], bool]:
    domains = provider.domains if provider else ()
    return lambda key: key in WELL_KNOWN or any(key.startswith(d) for d in domains)


def _admits(
    taints: tuple[Taint, ...],
    base: Requirements,
    row: Requirements | None,
    well_known: Callable[[str], bool],
) -> Callable[[Placement], bool]:
    def admits(placement: Placement) -> bool:
        if not tolerates_all(taints, placement.tolerations):
            return False
        for pod in pod_requirements(placement) or ():
            if compatible(base, pod, well_known=well_known) is not None:
                continue
            if row is None:
                return True
            # Keys the instance type does not carry (zones, capacity types, labels the
            # catalogue does not model) are not judged: Intersects reads shared keys only.
            if intersects(row, add(dict(base), *pod.values())) is None:
                return True
        return False

    return admits


def pool_nodes(
    resolved: ResolvedPool, pool: KarpenterPool, *, min_values: bool = True
) -> list[Node]:
    """One node per instance type, as ``Inventory.with_nodes`` takes them: labelled as
    Karpenter would label it, and admitting pods by Karpenter's rules, not by labels.

    ``min_values``: judge the pool's ``minValues`` (Karpenter's ``Strict`` policy, its
    default); only keys the catalogue's labels model are counted, since the values of
    others (zones, capacity types) are offerings the webhook cannot see."""
    provider = PROVIDERS[pool.provider_group]
    base = _pool_requirements(pool)
    well_known = _well_known(provider)
    nodes = []
    rows = [t.instance for t in resolved.types]
    modelled = {key for row in rows for key in row.labels}
    least = tuple(
        (key, r.min_values)
        for r in pool.requirements
        if min_values and r.min_values and (key := NORMALIZED.get(r.key, r.key)) in modelled
    )
    fixed = {
        k: next(iter(r.values)) for k, r in base.items() if not r.complement and len(r.values) == 1
    }
    for kind in resolved.types:
        row_reqs = _row_requirements(kind.instance, modelled, resolved.reserved)
        nodes.append(
            Node(
                name=f"nodepool/{pool.name}/{kind.instance.name}",
                labels={**fixed, **kind.instance.labels},
                taints=pool.taints,
                allocatable=dict(kind.allocatable),
                capacity=kind.instance.capacity,
                pool=pool.name,
                count=kind.nodes,
                admits=_admits(pool.taints, base, row_reqs, well_known),
                min_values=least,
                unavailable=_at_limits_now(kind.instance, pool),
            )
        )
    return nodes


def _at_limits_now(row: InstanceType, pool: KarpenterPool) -> str:
    """Why the pool cannot launch ``row`` now, as its ``status.resources`` stand: Karpenter
    subtracts its nodes' capacity (what ``status.resources`` sums) from ``spec.limits`` and
    launches no instance type larger than what is left (scheduler.go
    ``filterByRemainingResources``, and no node at all when ``nodes`` is used up). Usage
    comes and goes: only ever a warning."""
    capacity = row.capacity
    for resource, limit in sorted(pool.limits.items()):
        used = pool.usage.get(resource)
        if used is None:
            continue
        need = 1 if resource == "nodes" else capacity.get(resource, 0)
        if need and used + need > limit:
            return f"at its limits now ({used} of its {limit} {resource} in use)"
    return ""


def autoscaler_admits(autoscaler: Autoscaler) -> Callable[[Placement], bool]:
    """An undescribed autoscaler takes any pod that does not select something else on its
    selector's keys: its nodes' labels and taints are unknown, so no toleration is asked
    for, and a pod that names no ComputeClass may still get one (a namespace's or the
    cluster's default class, applied by GKE after this webhook may have run)."""
    wanted = from_labels(autoscaler.selector)
    if not wanted:
        return lambda _placement: True

    def admits(placement: Placement) -> bool:
        for pod in pod_requirements(placement) or ():
            if all(key not in pod or pod[key].meets(req) for key, req in wanted.items()):
                return True
        return False

    return admits


def describe_pool(resolved: ResolvedPool) -> str:
    """e.g. "pool h100 (Karpenter on AWS, p5.48xlarge: 8 x NVIDIA H100 80GB, scales from 0,
    limit 64 GPUs)"."""
    if resolved.unbounded:
        return f"pool {resolved.name} ({resolved.provider}, size unknown: {resolved.unbounded})"
    if not resolved.types:
        return f"pool {resolved.name} ({resolved.provider}, no GPU instance type)"
    shown = ", ".join(t.instance.describe() for t in resolved.types[:3])
    more = f" and {len(resolved.types) - 3} more types" if len(resolved.types) > 3 else ""
    gpus = resolved.gpu_limit
    limit = f", limit {gpus} GPUs" if gpus is not None else ", no GPU limit"
    scales = (
        "scales from 0"
        if resolved.replicas is None
        else f"static: {resolved.replicas} nodes, none created for pending pods"
    )
    return f"pool {resolved.name} ({resolved.provider}, {shown}{more}, {scales}{limit})"
