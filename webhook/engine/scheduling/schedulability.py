"""Rules that would make the pods they match unschedulable: warnings for ``rules lint``.

A memory limit becomes the container's memory request when it sets none (the API server
defaults requests from limits), and the scheduler's NodeResourcesFit filter keeps a pod off
every node whose allocatable memory is smaller than the pod's requests. A rule that sets
more memory than any GPU node it can reach has therefore makes its pods pending forever.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.engine.kube.quantity import format_bytes
from webhook.engine.policy.ruleset import Policy, PolicyProblem, Rule
from webhook.engine.resources.inventory import Node, Placement

_TOLERATE_ALL = ({"operator": "Exists"},)


def memory_warnings(policy: Policy, nodes: Sequence[Node]) -> list[PolicyProblem]:
    """For each rule with a fixed or per-GPU memory limit: the GPU nodes it can reach (by
    the node affinity it adds) that could not hold it. ``nodes`` are the inventory's, if
    any; the policy's declared node pools always count."""
    warnings: list[PolicyProblem] = []
    for rule in policy.rules:
        limit = rule.mutations.memory_limit
        if limit is None or limit.mode == "inventoryShare":
            continue
        reachable = _gpu_nodes(rule, policy, [*nodes, *policy.node_pools])
        if not reachable:
            continue
        path = f"spec.mutate.memoryLimit.{limit.mode}"
        largest = max(reachable, key=lambda n: n.allocatable["memory"])
        most = largest.allocatable["memory"]
        if limit.amount > most:
            unit = "GPU" if limit.mode == "perGPU" else "container"
            warnings.append(
                PolicyProblem(
                    rule.document,
                    path,
                    f"{format_bytes(limit.amount)} per {unit} is more memory than any GPU "
                    f"node the rule's pods can use has (the "
                    f"largest, {_name(largest)}, has {format_bytes(most)} allocatable): "
                    f"{_too_large_outcome(limit.when_too_large, 'every GPU pod it matches')}",
                )
            )
            continue
        if limit.mode != "perGPU":
            continue
        short = [n for n in reachable if limit.amount * _gpus(n, policy) > n.allocatable["memory"]]
        if short:
            node = short[0]
            count = _gpus(node, policy)
            warnings.append(
                PolicyProblem(
                    rule.document,
                    path,
                    f"a pod using all {count} GPUs of {_name(node)} would get "
                    f"{count} x {format_bytes(limit.amount)} = "
                    f"{format_bytes(limit.amount * count)} of memory, more than its "
                    f"{format_bytes(node.allocatable['memory'])} allocatable "
                    f"({len(short)} of {len(reachable)} GPU node"
                    f"{'s' if len(reachable) != 1 else ''} too small): "
                    f"{_too_large_outcome(limit.when_too_large, 'such a pod')}",
                )
            )
    return warnings


# What the engine does with limits no node the pod can use holds
# (``enforcement.mutators``, ``whenTooLarge``): lint says that, not what would happen if
# the limit were set as written.
_TOO_LARGE = {
    "cap": (
        "{pods} gets its memory limits lowered to what the largest node it can use holds "
        "(whenTooLarge: cap, the default), with a memoryLimit warning, or left out where "
        "even that does not fit; lower the amount to have it applied as written, or set "
        "whenTooLarge: deny to refuse such pods"
    ),
    "skip": (
        "{pods} is admitted without the rule's memory limits (whenTooLarge: skip), with a "
        "memoryLimit warning; lower the amount to have it applied"
    ),
    "deny": (
        "{pods} is denied (whenTooLarge: deny) unless it sets its own memory limits; lower "
        "the amount, or use whenTooLarge: cap to lower it per pod"
    ),
}


def _too_large_outcome(when_too_large: str, pods: str) -> str:
    return _TOO_LARGE[when_too_large].format(pods=pods)


def _gpu_nodes(rule: Rule, policy: Policy, nodes: Sequence[Node]) -> list[Node]:
    required = rule.mutations.required_affinity
    placement = Placement(
        node_selector={},
        required_terms=[{"matchExpressions": list(required)}] if required else None,
        tolerations=_TOLERATE_ALL,
    )
    return [
        n
        for n in nodes
        if _gpus(n, policy) > 0
        and n.allocatable.get("memory")
        and placement.admits(n.labels, n.name, n.taints)
    ]


def _gpus(node: Node, policy: Policy) -> int:
    is_gpu = policy.settings.gpu_resources.is_gpu
    return max((a for r, a in node.allocatable.items() if is_gpu(r)), default=0)


def _name(node: Node) -> str:
    return f"node pool {node.pool}" if node.pool else f"node {node.name}"
