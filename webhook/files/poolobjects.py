"""Autoscaler objects, read the same way from a file and from the API server.

Karpenter ``NodePool``s and ``NodeOverlay``s (karpenter.sh), their node classes (``EC2NodeClass``,
EKS Auto Mode's ``NodeClass``, ``AKSNodeClass``), the cluster-autoscaler's status
ConfigMap and GKE ``ComputeClass``es become one ``PoolInventory`` for the engine. The
status ConfigMap's YAML is parsed here: the engine reads no YAML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from webhook.engine.resources.nodepools import (
    CA_STATUS_NAME,
    CA_STATUS_NAMESPACE,
    Autoscaler,
    GKEComputeClass,
    KarpenterPool,
    PoolInventory,
    cluster_autoscaler_groups,
    compute_class_from_json,
    karpenter_pool_from_json,
    node_overlay,
)

# (API group, kind) of the node classes Karpenter's providers define.
NODE_CLASS_KINDS = frozenset(
    {
        ("karpenter.k8s.aws", "EC2NodeClass"),
        ("eks.amazonaws.com", "NodeClass"),
        ("karpenter.azure.com", "AKSNodeClass"),
    }
)


def _group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    version = str(obj.get("apiVersion", ""))
    group = version.rpartition("/")[0] if "/" in version else ""
    return group, str(obj.get("kind", ""))


def is_pool_object(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is one of the autoscaler objects this module reads."""
    group, kind = _group_kind(obj)
    return (
        (group, kind) in (("karpenter.sh", "NodePool"), ("karpenter.sh", "NodeOverlay"))
        or (group, kind) == ("cloud.google.com", "ComputeClass")
        or (group, kind) in NODE_CLASS_KINDS
        or (kind == "ConfigMap" and _is_ca_status(obj))
    )


def _is_ca_status(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return (meta or {}).get("name") == CA_STATUS_NAME and (meta or {}).get(
        "namespace", CA_STATUS_NAMESPACE
    ) == CA_STATUS_NAMESPACE


def status_of(configmap: Mapping[str, Any]) -> object:
    """The status ConfigMap's ``data.status``: parsed YAML (cluster-autoscaler 1.30+) or
    the text of older versions, as ``nodepools.cluster_autoscaler_groups`` takes it."""
    data = configmap.get("data") if isinstance(configmap.get("data"), Mapping) else {}
    text = (data or {}).get("status")
    if not isinstance(text, str):
        return None
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    # The old text report is YAML too, by accident: only the new format has nodeGroups
    # and clusterWide (ClusterAutoscalerStatus, clusterstate/api/types.go).
    if isinstance(parsed, Mapping) and ("nodeGroups" in parsed or "clusterWide" in parsed):
        return parsed
    return text


def pool_inventory(
    objects: Iterable[Mapping[str, Any]], *, node_classes_read: bool | None = None
) -> PoolInventory:
    """Everything ``objects`` say about nodes that could exist.

    ``node_classes_read``: whether node classes were listed at all (a reader without
    access to them passes False); by default, whether ``objects`` hold any."""
    pools: list[KarpenterPool] = []
    autoscalers: list[Autoscaler] = []
    compute_classes: list[GKEComputeClass] = []
    classes: set[tuple[str, str, str]] = set()
    reservations: dict[tuple[str, str, str], frozenset[str]] = {}
    for obj in objects:
        group, kind = _group_kind(obj)
        if (group, kind) == ("karpenter.sh", "NodePool"):
            pools.append(karpenter_pool_from_json(obj))
        elif (group, kind) == ("cloud.google.com", "ComputeClass"):
            compute_classes.append(compute_class_from_json(obj))
        elif (group, kind) == ("karpenter.sh", "NodeOverlay"):
            overlay = node_overlay(obj)
            if overlay is not None:
                autoscalers.append(overlay)
        elif (group, kind) in NODE_CLASS_KINDS:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
            ref = (group, kind, str((meta or {}).get("name", "")))
            classes.add(ref)
            held = reserved_types(obj)
            if held is not None:
                reservations[ref] = held
        elif kind == "ConfigMap" and _is_ca_status(obj):
            autoscalers.extend(cluster_autoscaler_groups(status_of(obj)))
    read = bool(classes) if node_classes_read is None else node_classes_read
    return PoolInventory(
        pools=tuple(pools),
        autoscalers=tuple(autoscalers),
        node_classes=frozenset(classes) if read else None,
        compute_classes=tuple(compute_classes),
        reservations=reservations,
    )


def reserved_types(node_class: Mapping[str, Any]) -> frozenset[str] | None:
    """Instance types an EC2NodeClass's capacity reservations can launch, or None when its
    status was not read. aws/karpenter-provider-aws pkg/providers/instancetype/offering/
    reserved_capacity_resolver.go makes a reserved offering for each reservation's
    ``instanceType``, unavailable while it is ``expiring``."""
    if _group_kind(node_class) != ("karpenter.k8s.aws", "EC2NodeClass"):
        return None
    status = node_class.get("status")
    if not isinstance(status, Mapping):
        return None
    return frozenset(
        str(r.get("instanceType", ""))
        for r in status.get("capacityReservations") or ()
        if isinstance(r, Mapping) and r.get("state", "active") != "expiring"
    )
