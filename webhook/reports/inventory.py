"""What the webhook sees of the cluster, summarised for people: ``gpu-webhook inventory``.

Node classes group nodes by GPU product and by what they advertise, so that a cluster of
thousands of nodes reads as a handful of lines; the largest node per resource is the figure
that "more GPUs than exist" checks compare a request with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.gpufacts import gpu_facts
from webhook.engine.resources.inventory import Inventory, Node
from webhook.engine.scheduling.dra import class_devices
from webhook.engine.scheduling.wholepod import served_capacity
from webhook.reports.escape import for_terminal, terminal_text
from webhook.reports.pools import PoolLine, render_pools
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
    # DRA devices per node, by the device classes whose selectors match them.
    dra_devices: tuple[DRADevices, ...] = ()


@dataclass(frozen=True, slots=True)
class DRADevices:
    """Devices of one DeviceClass on each node of a class, from its ResourceSlices."""

    device_class: str
    per_node: int
    tainted: int  # of those, tainted NoSchedule or NoExecute (no capacity for a request
    # that does not tolerate the taint)
    extended_resource: str  # the class's extendedResourceName ("" if none)


@dataclass(frozen=True, slots=True)
class ServedResource:
    """An extended resource a device class serves on nodes without it in allocatable."""

    resource: str
    device_class: str
    largest: int
    node: str


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
    # Nodes that could exist (Karpenter NodePools, autoscalers): one line each.
    pools: tuple[PoolLine, ...] = ()
    served: tuple[ServedResource, ...] = ()
    # False when no DRA objects were read (a file of nodes, a cluster without DRA).
    dra: bool = False

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["pools"] = [p.to_json() for p in self.pools]
        return out


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


def _dra(devices: DeviceInventory | None, node: Node) -> tuple[tuple[str, int, int], ...]:
    if devices is None or not devices.complete:
        return ()
    return class_devices(devices, devices.profile(node))


def dra_products(devices: DeviceInventory | None, node: Node) -> tuple[str, ...]:
    """The product names NVIDIA's DRA driver publishes (``productName``) for the node's
    devices: nodes that no label tells apart are told apart by their devices (issue 31)."""
    if devices is None or not devices.complete:
        return ()
    names = {
        value
        for device in devices.profile(node).devices
        for _, name, value in device.attributes
        if name == "productName" and isinstance(value, str)
    }
    return tuple(sorted(names))


def dra_product(devices: DeviceInventory, node: Node) -> str:
    """The product name(s) of the node's DRA devices, for nodes whose labels name none."""
    return " + ".join(dra_products(devices, node)) or "(DRA devices)"


def _served(inventory: Inventory, devices: DeviceInventory) -> tuple[ServedResource, ...]:
    """Resources a class names as its extendedResourceName (the implicit
    ``deviceclass.resource.kubernetes.io/<class>`` every class has is left out)."""
    out = []
    for device_class in sorted(devices.classes.values(), key=lambda c: c.name):
        resource = device_class.extended_resource
        answer = served_capacity(resource, devices=devices, nodes=inventory) if resource else None
        if answer is not None and answer.most:
            out.append(ServedResource(resource, answer.device_class, answer.most, answer.node))
    return tuple(out)


def summarize(
    inventory: Inventory,
    devices: DeviceInventory | None = None,
    *,
    pools: Sequence[PoolLine] = (),
) -> InventoryReport:
    groups: dict[tuple[Any, ...], list[Node]] = {}
    for node in inventory.nodes:
        key = (*class_key(node), _dra(devices, node), dra_products(devices, node))
        groups.setdefault(key, []).append(node)
    extended = {c.name: c.extended_resource for c in devices.classes.values()} if devices else {}
    classes = []
    for (label, gpus, mig, sharing, replicas, memory, dra, _), members in groups.items():
        product = label
        if label == NO_GPU and dra and devices is not None:
            product = dra_product(devices, members[0])
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
                dra_devices=tuple(
                    DRADevices(name, count, tainted, extended.get(name, ""))
                    for name, count, tainted in dra
                ),
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
    served = _served(inventory, devices) if devices is not None else ()
    return InventoryReport(
        served=served,
        dra=devices is not None and devices.complete,
        source=inventory.source,
        resource_version=inventory.resource_version,
        nodes=len(inventory),
        classes=tuple(classes),
        largest=tuple(largest),
        cordoned=tuple(sorted(n.name for n in inventory.nodes if n.unschedulable)),
        not_ready=tuple(sorted(n.name for n in inventory.nodes if not n.ready)),
        pools=tuple(pools),
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
    lines += [
        "",
        "What one unit of each GPU resource is (capacity counts units, as the scheduler does)",
    ]
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
    lines += _dra_lines(report)
    lines += render_pools(report.pools)
    lines += ["", f"Cordoned: {_names(report.cordoned)}", f"Not ready: {_names(report.not_ready)}"]
    return terminal_text(lines)


def _dra_lines(report: InventoryReport) -> list[str]:
    if not report.dra:
        return []
    lines = ["", "DRA devices per node class (ResourceSlices, by DeviceClass)"]
    rows = [("PRODUCT", "NODES", "EXAMPLE", "DEVICE CLASS", "PER NODE", "TAINTED", "SERVES")]
    for c in report.classes:
        for d in c.dra_devices:
            rows.append(
                (
                    c.product,
                    str(c.nodes),
                    c.example,
                    d.device_class,
                    str(d.per_node),
                    str(d.tainted) if d.tainted else "-",
                    d.extended_resource or "-",
                )
            )
    lines += table(rows) if len(rows) > 1 else ["  none: no node has DRA devices"]
    if report.served:
        lines += ["", "Extended resources served by DRA (on nodes without them in allocatable)"]
        lines += table(
            [("RESOURCE", "DEVICE CLASS", "LARGEST", "NODE")]
            + [(s.resource, s.device_class, str(s.largest), s.node) for s in report.served]
        )
    return lines


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows in aligned columns, each cell escaped first (names come from the cluster), so
    that the widths are those the terminal shows."""
    rows = [[for_terminal(cell) for cell in row] for row in rows]
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
