"""Every autoscaler's pools, sized: Karpenter NodePools through the catalogue
(``karpenter``), GKE ComputeClasses and node auto-provisioning (``gke``), and each
autoscaler the webhook cannot size as a pool of unknown size.

Its own module so that ``gke`` may use ``karpenter``'s requirements without ``karpenter``
importing ``gke`` back (the two imported each other).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.engine.resources.instancetypes import Allowance, Catalogue
from webhook.engine.resources.inventory import Node, UnboundedPool
from webhook.engine.resources.nodepools import Autoscaler, PoolInventory
from webhook.engine.scheduling.gke import auto_provisioning, size_compute_classes
from webhook.engine.scheduling.karpenter import (
    ResolvedPool,
    autoscaler_admits,
    pool_nodes,
    resolve_pool,
)


@dataclass(frozen=True, slots=True)
class PoolSizing:
    """What the API's autoscaler objects add to an inventory."""

    resolved: tuple[ResolvedPool, ...] = ()
    autoscalers: tuple[Autoscaler, ...] = ()
    nodes: tuple[Node, ...] = ()
    unbounded: tuple[UnboundedPool, ...] = ()


def size_pools(
    pools: PoolInventory,
    *,
    catalogue: Catalogue,
    allowance: Allowance,
    declared: frozenset[str] = frozenset(),
    node_labels: Sequence[Mapping[str, str]] = (),
    min_values: bool = True,
) -> PoolSizing:
    """Karpenter pools sized through the catalogue, and every autoscaler the webhook
    cannot size as a pool of unknown size. An autoscaler pool that a declared ``NodePool``
    rule document names (same name) is described by that document instead."""
    resolved: list[ResolvedPool] = []
    nodes: list[Node] = []
    unbounded: list[UnboundedPool] = []
    for pool in pools.pools:
        if pool.name in declared:
            continue
        sized = resolve_pool(
            pool,
            catalogue=catalogue,
            allowance=allowance,
            node_classes=pools.node_classes,
            reserved=pools.reservations.get(pool.node_class),
        )
        resolved.append(sized)
        if sized.unbounded:
            unbounded.append(
                UnboundedPool(sized.name, sized.provider, sized.unbounded, sized.admits)
            )
        elif sized.types:
            nodes.extend(pool_nodes(sized, pool, min_values=min_values))
    gke = size_compute_classes(
        pools.compute_classes, catalogue=catalogue, allowance=allowance, declared=declared
    )
    resolved.extend(gke.resolved)
    nodes.extend(gke.nodes)
    unbounded.extend(gke.unbounded)
    autoscalers = [a for a in pools.autoscalers if a.name not in declared]
    for autoscaler in autoscalers:
        unbounded.append(
            UnboundedPool(
                autoscaler.name, autoscaler.kind, autoscaler.reason, autoscaler_admits(autoscaler)
            )
        )
    autoscalers.extend(gke.autoscalers)
    nap = auto_provisioning(
        node_labels, catalogue=catalogue, allowance=allowance, declared=declared
    )
    if nap is not None:
        autoscalers.append(nap[0])
        nodes.extend(nap[1])
        unbounded.append(nap[2])
    return PoolSizing(tuple(resolved), tuple(autoscalers), tuple(nodes), tuple(unbounded))
