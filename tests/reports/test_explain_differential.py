"""``explain`` against the webhook's capacity check, on random pods and inventories.

Both answer "can this GPU pod run here": ``explain`` node by node in kube-scheduler's filter
order (``webhook.engine.scheduling.placement``), the webhook per node class (``Inventory.fit``). For a
GPU pod, ``explain`` must report some GPU node class that fits exactly when the webhook does
not deny it for capacity (``capacity``, ``unknownResource``). Both judge the pod as the
webhook leaves it: its tolerations, and memory limits Kubernetes copies into unset requests.

One difference is allowed, and stated: a node whose condition is bad (not ready, with or
without the ``node.kubernetes.io/not-ready`` taint; or another ``node.kubernetes.io/``
condition taint such as ``memory-pressure``). kube-scheduler's TaintToleration filter
rejects it *now* (``tainttoleration/taint_toleration.go``, and the not-ready taint the node
lifecycle controller adds, TaintNodesByCondition), so ``explain``, which says why a pod is
Pending, says "not ready". The webhook deliberately ignores condition taints
(``CONDITION_TAINT_PREFIX`` in ``webhook/engine/resources/inventory.py``): they come and go and the
scheduler waits for them, so a "cannot fit" denial on their account would be false. With
those conditions healed, the two must agree exactly, and ``explain`` never finds a fit the
webhook denies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.generated import (
    CAPACITY_CHECKS,
    UNSCHEDULABLE,
    GeneratedNode,
    asks_for_gpu,
    inventories,
    memory_rules,
    pods,
    policy,
)
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.inventory import Inventory, Node, node_from_json
from webhook.reports.explain import Explanation, explain

CONDITION_TAINT_PREFIX = "node.kubernetes.io/"


def _healed(node: Node) -> Node:
    """The node once its condition is good again: ready, no condition taints."""
    taints = tuple(
        t
        for t in node.taints
        if not t.key.startswith(CONDITION_TAINT_PREFIX) or t.key == UNSCHEDULABLE
    )
    return dataclasses.replace(node, ready=True, taints=taints)


def _explain(pod: dict[str, Any], rules: Policy, nodes: list[Node]) -> Explanation:
    return explain(pod, policy=rules, inventory=InventoryView(Inventory(nodes)), nodes=nodes)


def _some_class_fits(explanation: Explanation) -> bool:
    return any(c.fits for t in explanation.templates for c in t.classes)


def _denied_for_capacity(explanation: Explanation) -> bool:
    return any(f.check in CAPACITY_CHECKS and f.action == "deny" for f in explanation.findings)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    generated=inventories(conditions=True),
    pod=pods(),
    tolerate=st.booleans(),
    memory=memory_rules,
)
def test_explain_finds_a_class_for_a_gpu_pod_exactly_when_the_webhook_does_not_deny_it_for_capacity(
    generated: list[GeneratedNode],
    pod: dict[str, Any],
    tolerate: bool,
    memory: dict[str, Any] | None,
) -> None:
    assume(asks_for_gpu(pod["spec"]))
    rules = policy(tolerate=tolerate, memory=memory)
    nodes = [node_from_json(n.as_json()) for n in generated]

    now = _explain(pod, rules, nodes)
    healed = _explain(pod, rules, [_healed(n) for n in nodes])

    denied = _denied_for_capacity(now)
    assert denied == _denied_for_capacity(healed)  # the webhook ignores conditions
    answers = [(c.product, c.verdict) for t in now.templates for c in t.classes]
    assert _some_class_fits(healed) != denied, (answers, [f.message for f in now.findings])
    if _some_class_fits(now):
        assert not denied, (answers, [f.message for f in now.findings])
    elif not denied:
        # The allowed difference: only nodes in a bad condition would take the pod.
        assert any(not n.ready or n != _healed(n) for n in nodes), answers
