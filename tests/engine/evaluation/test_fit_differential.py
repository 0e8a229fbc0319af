"""The capacity model against the scheduler's own rules, on random pods and inventories.

The webhook must admit a GPU pod exactly when some node passes the scheduler's filters for
it. The reference below judges each node on its own, written straight from the Kubernetes
scheduler's filter plugins (kubernetes v1.36, ``pkg/scheduler/framework/plugins``), and
shares no code with the engine:

- **NodeUnschedulable** (``nodeunschedulable/node_unschedulable.go``, ``Filter``): a node
  with ``spec.unschedulable`` is rejected unless the pod tolerates the taint
  ``node.kubernetes.io/unschedulable:NoSchedule`` (``TolerationsTolerateTaint``).
- **NodeAffinity** (``nodeaffinity/node_affinity.go``, ``Filter`` with
  ``GetRequiredNodeAffinity(pod).Match(node)``): every ``nodeSelector`` label equal, and,
  if the pod has required node affinity, at least one ``nodeSelectorTerm`` whose
  expressions all hold (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` on
  integers; an empty term matches nothing).
- **TaintToleration** (``tainttoleration/taint_toleration.go``, ``Filter`` with
  ``FindMatchingUntoleratedTaint`` and ``DoNotScheduleTaintsFilterFunc``): every
  ``NoSchedule`` and ``NoExecute`` taint is tolerated (``Toleration.ToleratesTaint``: an
  empty effect matches every effect, an empty key with ``Exists`` every key, operator
  ``Equal`` by default compares values).
- **NodeResourcesFit** (``noderesources/fit.go``, ``fitsRequest`` on an empty node): the
  pod's effective request (``computePodResourceRequest``, i.e. ``PodRequests`` in
  ``k8s.io/component-helpers/resource``: app containers plus native sidecars, or the
  largest init container plus the sidecars before it, plus ``spec.overhead``; a missing
  request is the limit, as ``SetDefaults_Pod`` makes it) must not exceed allocatable for
  CPU and memory when requested, and for every extended resource with a non-zero request.

One rule is the webhook's own, documented in ``webhook/engine/resources/fit.py``: on nodes whose GPUs
are shared (time-slicing or MPS), no container may ask for more slots than the node has
physical GPUs. The reference knows each node's configuration from how it was generated; the
webhook reads it from the node's labels, so this also checks that reading.

Condition taints (``node.kubernetes.io/not-ready`` and the like) are not generated: the
webhook deliberately ignores them, since the scheduler only waits for them to go.
The pod judged is the one the webhook lets through: after its mutations (tolerations,
memory limits, which Kubernetes copies into unset requests).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.generated import (
    CAPACITY_CHECKS,
    GPU_NAMES,
    UNSCHEDULABLE,
    GeneratedNode,
    inventories,
    memory_rules,
    pods,
    policy,
)
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.resources.inventory import Inventory, Placement, node_from_json

# --- reference: quantities and the pod's request, straight from the definitions ------------

_SUFFIX = {"m": Fraction(1, 1000), "": Fraction(1), "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(text: object) -> Fraction:
    raw = str(text)
    for suffix in ("Ki", "Mi", "Gi", "m"):
        if raw.endswith(suffix):
            return Fraction(raw[: -len(suffix)]) * _SUFFIX[suffix]
    return Fraction(raw)


def request_of(container: dict[str, Any], name: str) -> Fraction:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get(name)
    if value is None:
        value = (resources.get("limits") or {}).get(name)
    return quantity(value) if value is not None else Fraction(0)


def pod_request(spec: dict[str, Any], name: str) -> Fraction:
    app = sum((request_of(c, name) for c in spec.get("containers") or []), Fraction(0))
    sidecars = init = Fraction(0)
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars += request_of(c, name)
            app += request_of(c, name)
            init = max(init, sidecars)
        else:
            init = max(init, request_of(c, name) + sidecars)
    total = max(app, init)
    overhead = (spec.get("overhead") or {}).get(name)
    return total + (quantity(overhead) if overhead is not None else 0)


# --- reference: the scheduler's filters on one node ----------------------------------------


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if key == "" and operator == "Exists":
        return True
    if key != taint["key"]:
        return False
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def expression_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if key not in labels or len(values) != 1:
        return False
    try:
        have, want = int(labels[key]), int(values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def affinity_matches(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    return any(
        term.get("matchExpressions")
        and all(expression_holds(e, labels) for e in term["matchExpressions"])
        for term in required.get("nodeSelectorTerms") or []
    )


def node_admits(node: GeneratedNode, spec: dict[str, Any]) -> bool:
    """NodeUnschedulable, NodeAffinity and TaintToleration: may the pod land here at all."""
    tolerations = spec.get("tolerations") or []
    if node.unschedulable and not any(
        tolerates(t, {"key": UNSCHEDULABLE, "effect": "NoSchedule"}) for t in tolerations
    ):
        return False
    if not affinity_matches(spec, node.labels):
        return False
    return all(
        taint["effect"] not in ("NoSchedule", "NoExecute")
        or any(tolerates(t, taint) for t in tolerations)
        for taint in node.taints
    )


def node_passes(node: GeneratedNode, spec: dict[str, Any]) -> bool:
    return node_admits(node, spec) and node_holds(node, spec)


def node_holds(node: GeneratedNode, spec: dict[str, Any]) -> bool:
    """NodeResourcesFit on an empty node, and the webhook's physical-GPU rule."""
    names = {"cpu", "memory"} | {
        n
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        for section in ("requests", "limits")
        for n in ((c.get("resources") or {}).get(section) or {})
        if n in GPU_NAMES
    }
    for name in names:
        need = pod_request(spec, name)
        if need == 0:
            continue
        have = node.allocatable.get(name)
        if have is None:
            return False
        if need > quantity(have):
            return False
    if node.shared is not None:
        resource, physical = node.shared
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            if request_of(c, resource) > physical:
                return False
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=inventories(), pod=pods(), tolerate=st.booleans(), memory=memory_rules)
def test_a_gpu_pod_is_admitted_exactly_when_some_node_passes_the_schedulers_filters(
    nodes: list[GeneratedNode],
    pod: dict[str, Any],
    tolerate: bool,
    memory: dict[str, Any] | None,
) -> None:
    assume(any(pod_request(pod["spec"], name) for name in GPU_NAMES))
    inventory = Inventory([node_from_json(n.as_json()) for n in nodes])

    decision = evaluate(
        Request(pod),
        policy=policy(tolerate=tolerate, memory=memory),
        inventory=InventoryView(inventory),
    )

    assert decision.mutated is not None
    spec = dict(decision.mutated)["spec"]
    fits = [n.name for n in nodes if node_passes(n, spec)]
    denied = [f for f in decision.findings if f.check in CAPACITY_CHECKS and f.action == "deny"]
    assert not [f for f in decision.findings if f.check == "memoryLimit" and f.action == "deny"]
    assert bool(fits) != bool(denied), (fits, [f.message for f in decision.findings])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=inventories(), pod=pods())
def test_the_nodes_a_pod_can_land_on_are_the_ones_the_schedulers_filters_keep(
    nodes: list[GeneratedNode], pod: dict[str, Any]
) -> None:
    """``Inventory.placeable``, the filter other capacity checks build on, node by node."""
    inventory = Inventory([node_from_json(n.as_json()) for n in nodes])

    shapes = inventory.placeable(Placement.of(pod["spec"]))

    placeable = {member.name for shape in shapes for member in shape.members}
    assert placeable == {n.name for n in nodes if node_admits(n, pod["spec"])}
