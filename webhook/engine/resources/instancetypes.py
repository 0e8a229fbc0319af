"""A catalogue of cloud GPU instance types: what a node that an autoscaler creates offers.

A Karpenter NodePool names instance types only through requirements; the catalogue turns
them into GPUs, CPU and memory. It is plain data (the shell loads the shipped file,
``webhook/data/instance-types.json``, and ``InstanceType`` rule documents extend or
override it), so every answer it gives can be traced to the row and the page it came from.

A provider marked *complete* lists every instance type that advertises a GPU resource:
a pool there is bounded by what the catalogue holds. For other providers a pool is bounded
only when it names its instance types and every one is listed (``scheduling.karpenter``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20
# The kubelet's default pod limit, for rows that publish none (it sets kube-reserved memory).
DEFAULT_PODS = 110


class CatalogueError(ValueError):
    """A catalogue row that cannot be read: the message names the row and the field."""


@dataclass(frozen=True, slots=True)
class InstanceType:
    provider: str  # "aws", "azure", "gcp"
    name: str
    gpu_resource: str
    gpu_model: str  # as people say it, e.g. "NVIDIA H100 80GB"
    gpu_count: int
    gpu_memory_mib: int  # per GPU
    vcpu: int
    memory_mib: int
    labels: Mapping[str, str]  # the labels the provider's Karpenter sets on such a node
    source: str  # the provider's published spec page
    pods: int = DEFAULT_PODS

    @property
    def capacity(self) -> dict[str, int]:
        """What the instance has before anything is reserved: Karpenter's pool limits
        compare this, not allocatable (``filterByRemainingResources`` reads ``Capacity``)."""
        return {
            "cpu": self.vcpu * 1000,
            "memory": self.memory_mib * MIB,
            self.gpu_resource: self.gpu_count,
        }

    def describe(self) -> str:
        return f"{self.name}: {self.gpu_count} x {self.gpu_model}"


@dataclass(frozen=True, slots=True)
class Allowance:
    """What a new node keeps back from pods: the hypervisor's share of memory, kube and
    system reserved, and the eviction threshold.

    The default is Karpenter's own estimate for AWS (aws/karpenter-provider-aws
    pkg/providers/instancetype/types.go: ``--vm-memory-overhead-percent`` 7.5 %,
    kube-reserved memory 11 MiB per pod plus 255 MiB, CPU 6 % of the first core, 1 % of
    the second, 0.5 % of the next two and 0.25 % of the rest, eviction at 100 MiB). It
    reproduces Karpenter's published allocatable for the AWS rows exactly or leaves more
    (tests/engine/resources/test_instancetypes.py), so it never claims a pod cannot fit
    where Karpenter would place it. ``cpu``/``memory`` replace the formulas with fixed
    amounts (millicores, bytes)."""

    memory_overhead_percent: float = 7.5
    cpu: int | None = None
    memory: int | None = None
    eviction_memory: int = 100 * MIB

    def allocatable(self, instance: InstanceType) -> dict[str, int]:
        cpu = instance.vcpu * 1000 - (
            self.cpu if self.cpu is not None else _kube_reserved_cpu(instance.vcpu)
        )
        total = instance.memory_mib * MIB
        gke = instance.provider == "gcp"
        # GKE nodes: no hypervisor share is hidden from the guest the way EC2's is, and
        # GKE reserves by its own tiers (_gke_reserved_memory): Karpenter's AWS estimate
        # would keep back more than GKE does on large machines and deny pods that fit.
        percent = 0.0 if gke else self.memory_overhead_percent
        overhead = math.ceil(instance.memory_mib * percent / 100) * MIB
        if self.memory is not None:
            reserved = self.memory
        elif gke:
            reserved = (
                _gke_reserved_memory(instance.memory_mib, instance.pods) + self.eviction_memory
            )
        else:
            reserved = (11 * instance.pods + 255) * MIB + self.eviction_memory
        return {
            "cpu": max(0, cpu),
            "memory": max(0, total - overhead - reserved),
            instance.gpu_resource: instance.gpu_count,
        }


def _gke_reserved_memory(memory_mib: int, pods: int) -> int:
    """Bytes GKE reserves on a Standard node, at least: 25 % of the first 4 GiB, 20 % of the
    next 4, 10 % of the next 8, 6 % of the next 112 and 2 % of the rest (cloud.google.com/
    kubernetes-engine/docs/concepts/plan-node-sizes, "Memory and CPU reservations"; its CPU
    tiers are ``_kube_reserved_cpu``'s); from GKE 1.37 the lesser of that and 15 MiB per
    pod plus a base, so the lesser of the two without the base is what any version keeps
    at least. The guest kernel keeps a little more: a pod asking within that margin is
    admitted and may wait, never denied."""
    tiers = ((4096, 0.25), (4096, 0.20), (8192, 0.10), (112 * 1024, 0.06))
    left, reserved = float(memory_mib), 0.0
    for size, share in tiers:
        part = min(left, size)
        reserved += part * share
        left -= part
    reserved += left * 0.02
    return math.floor(min(reserved, 15.0 * pods)) * MIB


def _kube_reserved_cpu(vcpu: int) -> int:
    """Millicores: 6 % of the first core, 1 % of the second, 0.5 % of cores 3 and 4, and
    0.25 % of each core above 4 (the EKS AMI's and Karpenter's kube-reserved CPU)."""
    reserved = 60.0 if vcpu >= 1 else 0.0
    reserved += 10 if vcpu >= 2 else 0
    reserved += 5 * min(max(vcpu - 2, 0), 2)
    reserved += 2.5 * max(vcpu - 4, 0)
    return math.ceil(reserved)


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Instance types by provider and name; immutable, extended by rule documents."""

    types: Mapping[tuple[str, str], InstanceType] = field(default_factory=dict)
    complete: frozenset[str] = frozenset()

    def of(self, provider: str) -> tuple[InstanceType, ...]:
        return tuple(t for (p, _), t in self.types.items() if p == provider)

    def get(self, provider: str, name: str) -> InstanceType | None:
        return self.types.get((provider, name))

    def providers(self) -> frozenset[str]:
        return frozenset(p for p, _ in self.types)

    def extended(self, extra: Iterable[InstanceType]) -> Catalogue:
        """This catalogue with ``extra`` added; a row of the same provider and name
        replaces the shipped one (an admin knows their instance types best)."""
        types = dict(self.types)
        for row in extra:
            types[(row.provider, row.name)] = row
        return Catalogue(types=types, complete=self.complete)

    @classmethod
    def from_data(cls, doc: Mapping[str, Any], *, where: str = "catalogue") -> Catalogue:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("types"), list):
            raise CatalogueError(f"{where}: needs a list under 'types'")
        providers = doc.get("providers") or {}
        complete = frozenset(
            name
            for name, about in providers.items()
            if isinstance(about, Mapping) and about.get("complete") is True
        )
        types: dict[tuple[str, str], InstanceType] = {}
        for index, row in enumerate(doc["types"]):
            item = instance_type_from_data(row, where=f"{where}: types[{index}]")
            types[(item.provider, item.name)] = item
        return cls(types=types, complete=complete)


def instance_type_from_data(row: object, *, where: str) -> InstanceType:
    """One row as the data file (or an ``InstanceType`` rule document's spec) writes it."""
    if not isinstance(row, Mapping):
        raise CatalogueError(f"{where}: must be an object")
    gpu = row.get("gpu")
    if not isinstance(gpu, Mapping):
        raise CatalogueError(f"{where}.gpu: must be an object with resource, model, count")
    labels = row.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise CatalogueError(f"{where}.labels: must map label keys to string values")
    name = _text(row, "name", where)
    return InstanceType(
        provider=_text(row, "provider", where),
        name=name,
        gpu_resource=_text(gpu, "resource", f"{where}.gpu"),
        gpu_model=_text(gpu, "model", f"{where}.gpu"),
        gpu_count=_count(gpu, "count", f"{where}.gpu"),
        gpu_memory_mib=_count(gpu, "memoryMiB", f"{where}.gpu", minimum=0),
        vcpu=_count(row, "vcpu", where),
        memory_mib=_count(row, "memoryMiB", where),
        pods=_count(row, "pods", where) if "pods" in row else DEFAULT_PODS,
        labels={"node.kubernetes.io/instance-type": name, **labels},
        source=_text(row, "source", where),
    )


def _text(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise CatalogueError(f"{where}.{key}: must be a non-empty string")
    return value


def _count(row: Mapping[str, Any], key: str, where: str, *, minimum: int = 1) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CatalogueError(f"{where}.{key}: must be a whole number of at least {minimum}")
    return value
