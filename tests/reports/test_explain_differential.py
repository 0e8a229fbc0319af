"""``explain`` against the webhook's capacity check, on random pods and inventories.

Both answer "can this GPU pod run here": ``explain`` node by node in kube-scheduler's filter
order (``webhook.engine.scheduling.placement``), the webhook per node class (``Inventory.fit``). For a
GPU pod, ``explain`` must report some GPU node class that fits exactly when the webhook does
not deny it for capacity (``capacity``, ``unknownResource``). Both judge the pod as the
webhook leaves it: its tolerations, and memory limits Kubernetes copies into unset requests.

Transient node states (a node not ready, with or without the ``node.kubernetes.io/not-ready``
taint; another ``node.kubernetes.io/`` condition taint such as ``memory-pressure``; a cordon)
count the same for both: a class that fits once they pass "fits" (``explain`` says it "fits
when the node is ready again" and what the scheduler says now), and the webhook does not deny
for capacity on their account. So the two agree exactly, on the nodes as they are and as
they are once healed; the device plugin's refusal of several shared slots is generated too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.generated import (
    CAPACITY_CHECKS,
    GeneratedNode,
    asks_for_gpu,
    device_plugins,
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
    """The node once its transient states pass: ready, uncordoned, no condition taints."""
    taints = tuple(t for t in node.taints if not t.key.startswith(CONDITION_TAINT_PREFIX))
    return dataclasses.replace(node, ready=True, unschedulable=False, taints=taints)


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
    plugin=device_plugins,
)
def test_explain_finds_a_class_for_a_gpu_pod_exactly_when_the_webhook_does_not_deny_it_for_capacity(
    generated: list[GeneratedNode],
    pod: dict[str, Any],
    tolerate: bool,
    memory: dict[str, Any] | None,
    plugin: Any,
) -> None:
    assume(asks_for_gpu(pod["spec"]))
    rules = policy(tolerate=tolerate, memory=memory, plugin=plugin)
    nodes = [node_from_json(n.as_json()) for n in generated]

    now = _explain(pod, rules, nodes)
    healed = _explain(pod, rules, [_healed(n) for n in nodes])

    denied = _denied_for_capacity(now)
    answers = [(c.product, c.verdict) for t in now.templates for c in t.classes]
    assert denied == _denied_for_capacity(healed)  # transient states never decide a denial
    assert _some_class_fits(now) != denied, (answers, [f.message for f in now.findings])
    assert _some_class_fits(healed) != denied, (answers, [f.message for f in now.findings])
