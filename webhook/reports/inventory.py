"""What the webhook sees of the cluster, summarised for people: ``gpu-webhook inventory``.

Node classes group nodes by GPU product and by what they advertise, so that a cluster of
thousands of nodes reads as a handful of lines; the largest node per resource is the figure
that "more GPUs than exist" checks compare a request with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from webhook.engine.resources.gpufacts import gpu_facts
from webhook.engine.resources.inventory import Inventory, Node
from webhook.reports.wording import counted

PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MEMORY_LABEL = "nvidia.com/gpu.memory"
NO_GPU = "(no GPU)"
LISTED_NAMES = 20


def is_gpu_resource(name: str) -> bool:
    """``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-1g.10gb``,
    ``amd.com/gpu``, ``gpu.intel.com/i915``: extended resources that are accelerators."""
    return "/" in name and ("gpu" in name or "/mig-" in name)


@dataclass(frozen=True, slots=True)
class NodeClass:
    product: str
    nodes: int
    ready: int
    cordoned: int
    gpu_resources: Mapping[str, int]
    mig_strategy: str
    mig_profiles: tuple[str, ...]
    sharing_strategy: str
    replicas: int
    gpu_memory_mib: str
    example: str
    # Physical GPUs per node where the labels say (None: not labelled, or MIG single).
    physical_gpus: int | None = None
    units: tuple[GPUUnit, ...] = ()


@dataclass(frozen=True, slots=True)
class GPUUnit:
    """What one unit of a GPU resource is on a node class."""

    resource: str
    per_node: int
    unit: str  # "whole GPU", "shared slot, time-slicing x4", "MIG 1g.10gb slice"
    kind: str  # whole | shared | mig
    product: str  # the product a pod gets
    physical_gpus: int | None
    memory_mib: int | None


@dataclass(frozen=True, slots=True)
class LargestNode:
    resource: str
    amount: int
    node: str
    total: int
    nodes: int


@dataclass(frozen=True, slots=True)
class InventoryReport:
    source: str
    resource_version: str
    nodes: int
    classes: tuple[NodeClass, ...]
    largest: tuple[LargestNode, ...]
    cordoned: tuple[str, ...]
    not_ready: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def class_key(node: Node) -> tuple[Any, ...]:
    labels = node.labels
    gpus = tuple(sorted((k, v) for k, v in node.allocatable.items() if is_gpu_resource(k)))
    return (
        labels.get(PRODUCT_LABEL) or (NO_GPU if not any(v for _, v in gpus) else "(unlabelled)"),
        gpus,
        labels.get(MIG_STRATEGY_LABEL, ""),
        labels.get(SHARING_LABEL, ""),
        labels.get(REPLICAS_LABEL, ""),
        labels.get(MEMORY_LABEL, ""),
    )


def summarize(inventory: Inventory) -> InventoryReport:
    groups: dict[tuple[Any, ...], list[Node]] = {}
    for node in inventory.nodes:
        groups.setdefault(class_key(node), []).append(node)
    classes = []
    for (product, gpus, mig, sharing, replicas, memory), members in groups.items():
        facts = gpu_facts(members[0].labels, dict(gpus))
        units = tuple(
            GPUUnit(
                resource=name,
                per_node=amount,
                unit=device.describe,
                kind=device.kind,
                product=device.product or product,
                physical_gpus=device.physical,
                memory_mib=device.memory_mib,
            )
            for name, amount in gpus
            if amount
            for device in (facts.device(name, amount),)
        )
        classes.append(
            NodeClass(
                product=product,
                nodes=len(members),
                ready=sum(1 for n in members if n.ready),
                cordoned=sum(1 for n in members if n.unschedulable),
                gpu_resources=dict(gpus),
                mig_strategy=mig,
                mig_profiles=tuple(
                    name.split("/mig-", 1)[1] for name, amount in gpus if "/mig-" in name and amount
                ),
                sharing_strategy=sharing,
                replicas=int(replicas) if replicas.isdigit() else 1,
                gpu_memory_mib=memory,
                example=members[0].name,
                physical_gpus=facts.physical,
                units=units,
            )
        )
    classes.sort(key=lambda c: (c.product == NO_GPU, c.product, -c.nodes))
    largest = []
    for resource in sorted(n for n in inventory.resource_names if is_gpu_resource(n)):
        fit = inventory.largest(resource)
        if fit.node is None:
            continue
        largest.append(
            LargestNode(
                resource=resource,
                amount=fit.amount,
                node=fit.node.name,
                total=inventory.total(resource),
                nodes=sum(1 for n in inventory.nodes if n.allocatable.get(resource, 0) > 0),
            )
        )
    return InventoryReport(
        source=inventory.source,
        resource_version=inventory.resource_version,
        nodes=len(inventory),
        classes=tuple(classes),
        largest=tuple(largest),
        cordoned=tuple(sorted(n.name for n in inventory.nodes if n.unschedulable)),
        not_ready=tuple(sorted(n.name for n in inventory.nodes if not n.ready)),
    )


def render_text(report: InventoryReport) -> str:
    version = f" at resource version {report.resource_version}" if report.resource_version else ""
    lines = [
        f"{counted(report.nodes, 'node')} from {report.source}{version}: "
        f"{report.nodes - len(report.not_ready)} ready, {len(report.not_ready)} not ready, "
        f"{len(report.cordoned)} cordoned",
        "",
        "Node classes",
    ]
    rows = [("PRODUCT", "NODES", "READY", "CORDONED", "GPU RESOURCES PER NODE", "MIG", "SHARING")]
    for c in report.classes:
        resources = " ".join(f"{k}={v}" for k, v in c.gpu_resources.items()) or "-"
        mig = c.mig_strategy or "-"
        if c.mig_profiles:
            mig += f" ({', '.join(c.mig_profiles)})"
        sharing = "-"
        if c.sharing_strategy not in ("", "none") or c.replicas > 1:
            sharing = f"{c.sharing_strategy or 'time-slicing'} x{c.replicas}"
        rows.append(
            (c.product, str(c.nodes), str(c.ready), str(c.cordoned), resources, mig, sharing)
        )
    lines += table(rows)
    lines += ["", "What one unit of each GPU resource is (capacity counts physical GPUs)"]
    unit_rows = [("PRODUCT", "RESOURCE", "PER NODE", "ONE UNIT IS", "PHYSICAL GPUS", "MEMORY")]
    for c in report.classes:
        for u in c.units:
            memory = f"{u.memory_mib} MiB" if u.memory_mib is not None else "-"
            physical = str(u.physical_gpus) if u.physical_gpus is not None else "-"
            unit_rows.append((u.product, u.resource, str(u.per_node), u.unit, physical, memory))
    lines += table(unit_rows) if len(unit_rows) > 1 else ["  none"]
    lines += ["", "Largest node per GPU resource"]
    if report.largest:
        lines += table(
            [("RESOURCE", "LARGEST", "NODE", "TOTAL", "NODES")]
            + [
                (b.resource, str(b.amount), b.node, str(b.total), str(b.nodes))
                for b in report.largest
            ]
        )
    else:
        lines.append("  none: no node advertises a GPU resource")
    lines += ["", f"Cordoned: {_names(report.cordoned)}", f"Not ready: {_names(report.not_ready)}"]
    return "\n".join(lines) + "\n"


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def _names(names: tuple[str, ...]) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return f"{shown} and {more} more" if more > 0 else shown
