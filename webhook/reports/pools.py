"""Nodes that could exist, for people: the pools ``inventory`` and ``explain`` list beside
node classes, e.g. "pool h100 (Karpenter on AWS, p5.48xlarge: 8 x NVIDIA H100 80GB,
scales from 0, limit 64 GPUs)", and for a pod, whether each pool could take it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.fit import Demand, shortfalls
from webhook.engine.resources.gpufacts import gpu_facts
from webhook.engine.resources.inventory import Inventory, Node, Placement, min_values_unmet
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.scheduling.karpenter import autoscaler_admits, describe_pool
from webhook.engine.scheduling.poolsizing import PoolSizing, size_pools


@dataclass(frozen=True, slots=True)
class PoolLine:
    """One pool as ``inventory`` lists it."""

    name: str
    kind: str
    text: str
    bounded: bool
    reason: str  # why its size is unknown ("" when bounded)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "text": self.text,
            "bounded": self.bounded,
            "reason": self.reason,
        }


def sizing(
    pools: PoolInventory | None, *, policy: Policy, inventory: Inventory | None
) -> PoolSizing:
    """The pools as the webhook sizes them under ``policy``'s settings; none unless the
    settings detect autoscalers."""
    if pools is None or policy.settings.autoscaling != "detect":
        return PoolSizing()
    return size_pools(
        pools,
        catalogue=policy.catalogue,
        allowance=policy.settings.allowance,
        declared=frozenset(n.pool for n in policy.node_pools),
        node_labels=[s.labels for s in inventory.shapes] if inventory is not None else (),
        min_values=policy.settings.min_values_policy != "BestEffort",
    )


def pool_lines(found: PoolSizing) -> tuple[PoolLine, ...]:
    lines = [
        PoolLine(p.name, p.provider, describe_pool(p), not p.unbounded, p.unbounded)
        for p in found.resolved
    ]
    lines += [
        PoolLine(
            a.name,
            a.kind,
            f"pool {a.name} ({a.kind}, size unknown: {a.reason})",
            False,
            a.reason,
        )
        for a in found.autoscalers
    ]
    return tuple(lines)


def render_pools(lines: Sequence[PoolLine]) -> list[str]:
    out = ["", "Node pools (nodes that could exist)"]
    if not lines:
        return [*out, "  none: no Karpenter NodePool or autoscaler seen"]
    out += [f"  {line.text}" for line in lines]
    unknown = [line for line in lines if not line.bounded]
    if unknown:
        out.append(
            f"  {len(unknown)} of size unknown: no capacity check denies a pod they may take"
        )
    return out


@dataclass(frozen=True, slots=True)
class PoolAnswer:
    """Whether one pool could create a node for one pod template."""

    pool: str
    text: str
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "text": self.text, "answer": self.answer}


def pool_answers(
    found: PoolSizing, spec: Mapping[str, Any], demand: Demand
) -> tuple[PoolAnswer, ...]:
    placement = Placement.of(spec)
    answers = []
    for pool in found.resolved:
        text = describe_pool(pool)
        if pool.unbounded:
            verdict = "may take it (size unknown)" if pool.admits(placement) else "excluded"
        elif not pool.admits(placement):
            verdict = "excluded: requirements, labels or taints"
        else:
            verdict = _fit_verdict(
                [n for n in found.nodes if n.pool == pool.name], placement, demand
            )
        answers.append(PoolAnswer(pool.name, text, verdict))
    # The engine's own pools of unknown size: GKE node auto-provisioning's takes only the
    # pods whose selection does not keep it to listed machine types.
    unknown = {u.name: u for u in found.unbounded}
    for autoscaler in found.autoscalers:
        sized = unknown.get(autoscaler.name)
        admits = sized.admits if sized is not None else autoscaler_admits(autoscaler)
        bounded = [n for n in found.nodes if n.pool == autoscaler.name]
        if admits(placement):
            verdict = "may take it (size unknown)"
        elif bounded:
            verdict = _fit_verdict(bounded, placement, demand)
        else:
            verdict = "excluded: its selector"
        answers.append(
            PoolAnswer(
                autoscaler.name,
                f"pool {autoscaler.name} ({autoscaler.kind}, size unknown: {autoscaler.reason})",
                verdict,
            )
        )
    return tuple(answers)


def _fit_verdict(nodes: Sequence[Node], placement: Placement, demand: Demand) -> str:
    """As ``Inventory.fit`` judges the pool's nodes: the first that holds the pod, unless
    the pool's ``minValues`` are not met by all that hold it; a node the pool cannot
    create now (at its limits) is said so."""
    usable = [n for n in nodes if n.admits is None or n.admits(placement)]
    if not usable:
        return "excluded: no instance type matches the pod's selection"
    holding = [
        n
        for n in usable
        if not shortfalls(n.allocatable, gpu_facts(n.labels, n.allocatable), demand)
    ]
    if not holding:
        return "too small: no instance type holds the whole pod"
    unmet = min_values_unmet(holding[0].min_values, [n.labels for n in holding])
    if unmet is not None:
        key, need, have = unmet
        return f"excluded: {have} distinct {key} hold the pod, and its minValues asks for {need}"
    node = holding[0]
    kind = node.labels.get("node.kubernetes.io/instance-type", node.name)
    if all(n.unavailable for n in holding):
        return f"fits ({kind}), but the pool is {node.unavailable}"
    return f"fits ({kind})"
