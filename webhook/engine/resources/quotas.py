"""The cluster's ResourceQuotas, as far as GPUs go: hard limits and what is used now.

Kubernetes quotas an extended resource only by its request, ``requests.<name>`` (an
extended resource cannot be overcommitted, so ``limits.<name>`` is not allowed; "Resource
quota for extended resources", kubernetes.io/docs/concepts/policy/resource-quotas), and DRA
devices per device class as ``<class>.deviceclass.resource.k8s.io/devices``, counted over
the namespace's ResourceClaims. The ResourceQuota admission plugin refuses a pod (or a
claim) that would take ``status.used`` over ``spec.hard``; a ReplicaSet then retries its
pods forever with only an event to show.

A quota with ``scopes`` or a ``scopeSelector`` applies only to the pods that match every
scope, as the pod evaluator decides it (pkg/quota/v1/evaluator/core/pods.go,
``podMatchesScopeFunc``, ANDed by ``generic.Matches`` over ``scopes`` as ``Exists``
requirements and ``scopeSelector.matchExpressions``); the claim evaluator matches no scope
at all (``generic.MatchesNoScopeFunc`` in resource_claims.go), so a scoped quota never
limits DRA devices. What admission may still change about a template is not guessed:
a pod without ``priorityClassName`` may get the cluster's default class from the Priority
plugin, and one without CPU or memory requests may get them from a LimitRange, so scopes
that read those are "may match" (``None``) for it, never a proof.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.kube.quantity import QuantityError, parse_quantity

REQUESTS_PREFIX = "requests."
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"


@dataclass(frozen=True, slots=True)
class Scope:
    """One scope requirement: ``scopes`` entries are ``Exists``; ``scopeSelector`` entries
    keep their operator and values."""

    name: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.operator == "Exists":
            return self.name
        return f"{self.name} {self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True, slots=True)
class Quota:
    namespace: str
    name: str
    hard: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)
    scopes: tuple[Scope, ...] = ()

    @property
    def scoped(self) -> bool:
        return bool(self.scopes)

    def applies(self, pod: PodScopes) -> bool | None:
        """Whether the quota counts this pod: every scope must match (None: may)."""
        seen_unknown = False
        for scope in self.scopes:
            matched = pod.matches(scope)
            if matched is False:
                return False
            seen_unknown = seen_unknown or matched is None
        return None if seen_unknown else True

    def limit(self, key: str) -> tuple[int, int] | None:
        """(hard, used) for a quota key such as ``requests.nvidia.com/gpu``; None if unset."""
        if key not in self.hard:
            return None
        return self.hard[key], self.used.get(key, 0)


def _amounts(raw: object) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if not isinstance(key, str) or "/" not in key:
            continue  # cpu, memory, pods, count/...: not what GPU checks read
        try:
            amount = parse_quantity(value)
        except QuantityError:
            continue
        # Counts of devices and GPUs are whole: a fractional limit holds its whole part.
        out[key] = max(amount.numerator // amount.denominator, 0)
    return out


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def quota_from_json(raw: Mapping[str, Any]) -> Quota:
    meta, spec, status = (_map(raw.get(k)) for k in ("metadata", "spec", "status"))
    return Quota(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        hard=_amounts(spec.get("hard")),
        used=_amounts(status.get("used")),
        scopes=_scopes(spec),
    )


def _scopes(spec: Mapping[str, Any]) -> tuple[Scope, ...]:
    """``getScopeSelectorsFromQuota``: the ``scopes`` as ``Exists``, then the selector's."""
    found = [Scope(str(name)) for name in spec.get("scopes") or () if isinstance(name, str)]
    selector = _map(spec.get("scopeSelector"))
    for item in selector.get("matchExpressions") or ():
        if isinstance(item, dict):
            values = item.get("values")
            found.append(
                Scope(
                    str(item.get("scopeName", "")),
                    str(item.get("operator", "")),
                    tuple(str(v) for v in values) if isinstance(values, list) else (),
                )
            )
    return tuple(found)


# The pod evaluator's scopes (corev1.ResourceQuotaScope); any other matches no pod.
TERMINATING, NOT_TERMINATING = "Terminating", "NotTerminating"
BEST_EFFORT, NOT_BEST_EFFORT = "BestEffort", "NotBestEffort"
PRIORITY_CLASS = "PriorityClass"
CROSS_NAMESPACE_AFFINITY = "CrossNamespacePodAffinity"
_QOS_RESOURCES = ("cpu", "memory")  # what QoS classes read (pkg/apis/core/v1/helper/qos)


@dataclass(frozen=True, slots=True)
class PodScopes:
    """What the quota scopes read of a pod template."""

    terminating: bool
    best_effort: bool | None  # None: no CPU/memory asked, a LimitRange may still add some
    priority_class: str  # "" when unset: the Priority plugin may set the default one
    cross_namespace_affinity: bool

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> PodScopes:
        deadline = spec.get("activeDeadlineSeconds")
        priority = spec.get("priorityClassName")
        return cls(
            # IsTerminating: activeDeadlineSeconds set and >= 0.
            terminating=isinstance(deadline, int) and deadline >= 0,
            best_effort=None if not _asks_cpu_or_memory(spec) else False,
            priority_class=priority if isinstance(priority, str) else "",
            cross_namespace_affinity=_cross_namespace_affinity(spec),
        )

    def matches(self, scope: Scope) -> bool | None:
        """``podMatchesScopeFunc`` for one requirement; None where admission may still
        change what it reads."""
        name = scope.name
        if name in (TERMINATING, NOT_TERMINATING):
            return self.terminating is (name == TERMINATING)
        if name in (BEST_EFFORT, NOT_BEST_EFFORT):
            if self.best_effort is None:
                return None
            return self.best_effort is (name == BEST_EFFORT)
        if name == PRIORITY_CLASS:
            return self._priority(scope)
        if name == CROSS_NAMESPACE_AFFINITY:
            return self.cross_namespace_affinity
        return False

    def _priority(self, scope: Scope) -> bool | None:
        """``podMatchesSelector``: the label set {PriorityClass: name} (empty without one)
        against the requirement as a label selector."""
        if not self.priority_class:
            return None
        op = scope.operator
        if op == "Exists":
            return True
        if op == "DoesNotExist":
            return False
        if op == "In":
            return self.priority_class in scope.values
        if op == "NotIn":
            return self.priority_class not in scope.values
        return None  # an operator the API server would have refused


def _asks_cpu_or_memory(spec: Mapping[str, Any]) -> bool:
    """Any CPU or memory request or limit, in the pod's or any container's resources."""
    bodies: list[Any] = [spec]
    for section in ("containers", "initContainers"):
        items = spec.get(section)
        if isinstance(items, list):
            bodies.extend(items)
    for body in bodies:
        resources = _map(_map(body).get("resources"))
        for kind in ("requests", "limits"):
            amounts = _map(resources.get(kind))
            if any(name in amounts for name in _QOS_RESOURCES):
                return True
    return False


def _cross_namespace_affinity(spec: Mapping[str, Any]) -> bool:
    """``usesCrossNamespacePodAffinity``: a pod (anti-)affinity term, required or
    preferred, with ``namespaces`` or a ``namespaceSelector``."""
    affinity = _map(spec.get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = _map(affinity.get(kind))
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        for weighted in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or ():
            terms.append(_map(weighted).get("podAffinityTerm"))
        for raw in terms:
            term = _map(raw)
            if term.get("namespaces") or term.get("namespaceSelector") is not None:
                return True
    return False


@dataclass(frozen=True, slots=True)
class Quotas:
    """ResourceQuotas by namespace: every quota the cluster has (or a file lists)."""

    by_namespace: Mapping[str, tuple[Quota, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, quotas: Iterable[Quota]) -> Quotas:
        grouped: dict[str, list[Quota]] = {}
        for quota in quotas:
            grouped.setdefault(quota.namespace, []).append(quota)
        return cls({ns: tuple(sorted(qs, key=lambda q: q.name)) for ns, qs in grouped.items()})

    def limits(self, namespace: str, key: str) -> Iterator[tuple[Quota, int, int]]:
        """Every quota of the namespace that limits ``key``, with hard and used; scoped
        quotas never limit DRA devices (the claim evaluator matches no scope)."""
        for quota in self.by_namespace.get(namespace, ()):
            found = quota.limit(key)
            if found is None or (quota.scoped and key.endswith(DEVICE_CLASS_SUFFIX)):
                continue
            yield quota, found[0], found[1]

    def __len__(self) -> int:
        return sum(len(qs) for qs in self.by_namespace.values())


def resource_key(resource: str) -> str:
    return REQUESTS_PREFIX + resource


def device_class_key(device_class: str) -> str:
    return device_class + DEVICE_CLASS_SUFFIX
