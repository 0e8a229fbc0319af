"""The cluster's ResourceQuotas, as far as GPUs go: hard limits and what is used now.

Kubernetes quotas an extended resource only by its request, ``requests.<name>`` (an
extended resource cannot be overcommitted, so ``limits.<name>`` is not allowed; "Resource
quota for extended resources", kubernetes.io/docs/concepts/policy/resource-quotas), and DRA
devices per device class as ``<class>.deviceclass.resource.k8s.io/devices``, counted over
the namespace's ResourceClaims. The ResourceQuota admission plugin refuses a pod (or a
claim) that would take ``status.used`` over ``spec.hard``; a ReplicaSet then retries its
pods forever with only an event to show.

A quota with ``scopes`` or a ``scopeSelector`` applies to some pods only (a priority class,
best-effort, terminating); the webhook cannot always tell which, so such quotas are kept
out of every judgment (``scoped``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.kube.quantity import QuantityError, parse_quantity

REQUESTS_PREFIX = "requests."
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"


@dataclass(frozen=True, slots=True)
class Quota:
    namespace: str
    name: str
    hard: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)
    scoped: bool = False

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
        scoped=bool(spec.get("scopes") or spec.get("scopeSelector")),
    )


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
        """Every unscoped quota of the namespace that limits ``key``, with hard and used."""
        for quota in self.by_namespace.get(namespace, ()):
            found = quota.limit(key)
            if found is not None and not quota.scoped:
                yield quota, found[0], found[1]

    def __len__(self) -> int:
        return sum(len(qs) for qs in self.by_namespace.values())


def resource_key(resource: str) -> str:
    return REQUESTS_PREFIX + resource


def device_class_key(device_class: str) -> str:
    return device_class + DEVICE_CLASS_SUFFIX
