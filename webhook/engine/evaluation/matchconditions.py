"""The webhooks' ``matchConditions``: CEL the API server evaluates before it calls us, true
for every request the webhook could deny, warn about or mutate (issue 43).

A condition that is false skips the call; one that errors applies the webhook's
``failurePolicy``, and with the shipped ``Ignore`` an error is a skip too. So every
expression here is built to over-approximate (when unsure: call) and never to error:

- The API server evaluates them with ``object``, ``oldObject``, ``request`` and
  ``authorizer`` only (kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/
  matchconditions/matcher.go); ``object`` is null on DELETE, a ``Scale`` on ``*/scale``,
  the whole Pod on ``pods/ephemeralcontainers`` and ``pods/resize``. Every subresource,
  every null object and every kind without a layout the API server types is called.
- A field is read only after ``has()`` on it and on each parent. Only kinds whose objects
  the API server decodes into its own types (core, apps, batch) are looked into: their field
  types are fixed, whereas a custom resource's may be anything, and an ill-typed field
  would be an evaluation error, so every custom kind (PyTorchJob, a declared WorkloadKind)
  is called.
- Cost: at most ``PER_CALL_LIMIT`` per expression and ``BUDGET`` for all of a webhook's
  (kubernetes staging/src/k8s.io/apiserver/pkg/apis/cel/config.go ``PerCallLimit``,
  ``RuntimeCELCostBudgetMatchConditions``); past either the evaluation errors. No list is
  iterated before its ``size()`` is checked (a longer one is called without a look), no
  string is read before its ``size()`` is checked, and no string operation scans the object
  (``startsWith`` on bounded strings, ``in`` against literal lists): ``Term.cost`` adds up
  an upper bound as the expression is built, charging every string operation by the
  receiver's bound (cel-go charges 0.1 per character of one operand) and each iteration by
  its whole body.

What a pod template that asks for no GPU can still meet in the engine, and the clause that
calls the webhook for it (``engine/enforcement/accesscontrol.py``, ``mutators.py``):

- resources other than cpu, memory, ephemeral-storage and hugepages-* (GPUs of any vendor,
  names misspelt, ``unknownResource``), DRA claims (``resourceClaims``,
  ``resources.claims``), pod-level ``resources``;
- ``NVIDIA_*``/``CUDA_*`` variables in ``env``, ``hostPath`` volumes (device nodes, and
  the toolkit's volume-mount device list, whose source must be ``/dev/null``:
  nvidia-container-toolkit internal/config/image/cuda_image.go ``requestsFromMounts``),
  ``privileged`` containers, a ``runtimeClassName`` (``gpuAccessWithoutRequest``,
  ``unknownRuntimeClass``);
- node selection (``nodeSelector``, node affinity, ``nodeName``) and tolerations other than
  the ``node.kubernetes.io/`` condition taints (``nonGPUPodOnGPUNode``, and where the pod
  can land: ``hideGPUsFromNonGPUContainers: gpuNodes`` hides GPUs from every pod that can
  land on a GPU node);
- a rule that matches pods asking for no GPU (``gpuCount.min: 0``) with a mutation or check
  that acts on them: in the namespaces the rule names (all, when it names none or a glob).

Where a pod can land depends on the nodes, which a condition cannot see. A pod with no
toleration but the condition taints can reach a GPU node only where GPU nodes are
untainted; then it is hidden from, and on a cluster of GPU nodes only it is a
``nonGPUPodOnGPUNode``. So the template clauses above hold only when every GPU node
carries a ``NoSchedule`` or ``NoExecute`` taint outside ``node.kubernetes.io/``
(``tainted_gpu_nodes``, the admin's word: ``rules match-conditions --tainted-gpu-nodes``);
without that word every pod template is called.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from webhook.engine.enforcement.accesscontrol import dra_gpus
from webhook.engine.evaluation.request import InventoryView, inventory_of
from webhook.engine.kube.workloads import KindTable, WorkloadKind
from webhook.engine.policy.ruleset import Policy, Rule
from webhook.engine.scheduling.gpunodes import is_gpu_shape

# kubernetes staging/src/k8s.io/apiserver/pkg/apis/cel/config.go
PER_CALL_LIMIT = 1_000_000
BUDGET = 2_500_000  # RuntimeCELCostBudgetMatchConditions, per webhook and request
MAX_CONDITIONS = 64  # pkg/apis/admissionregistration/validation validateMatchConditions

# Bounds past which a list is called without a look; generous for real pods.
MAX_CONTAINERS = 16
MAX_ENV = 128
MAX_VOLUMES = 128
MAX_TOLERATIONS = 64
MAX_RESOURCES = 16
MAX_NAME = 253  # longer names and keys are called, never scanned
STRING_FACTOR = 0.1  # cel-go's StringTraversalCostFactor
ITERATION = 3  # a comprehension's own steps per element (loop step, condition, result)

MUTATING = "mutate.gpu-webhook.io"
VALIDATING = "validate.gpu-webhook.io"
BASIC_RESOURCES = ("cpu", "memory", "ephemeral-storage")
CONDITION_TAINTS = "node.kubernetes.io/"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# API groups whose objects the API server decodes into its own types before CEL sees them.
TYPED_GROUPS = ("", "apps", "batch")


@dataclass(frozen=True, slots=True)
class Term:
    """A CEL expression and an upper bound on its runtime cost."""

    text: str
    cost: float

    def __or__(self, other: Term) -> Term:
        return Term(f"({self.text} || {other.text})", self.cost + other.cost + 1)

    def __and__(self, other: Term) -> Term:
        return Term(f"({self.text} && {other.text})", self.cost + other.cost + 1)


TRUE = Term("true", 1)


def _any(terms: Iterable[Term]) -> Term:
    items = list(terms)
    if not items:
        return Term("false", 1)
    return Term(
        "(" + " || ".join(t.text for t in items) + ")", sum(t.cost for t in items) + len(items)
    )


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _has(base: str, *fields: str) -> Term:
    """``has()`` on each step of ``base.f1.f2...``: true when the last field is present."""
    parts, at = [], base
    for name in fields:
        parts.append(f"has({at}.{name})")
        at = f"{at}.{name}"
    return Term(" && ".join(parts), 2 * len(fields) + len(fields))


def _starts(receiver: str, prefix: str) -> Term:
    """``receiver.startsWith(prefix)`` on a string known to be at most ``MAX_NAME`` long."""
    return Term(
        f"{receiver}.startsWith({_quoted(prefix)})", 2 + math.ceil(MAX_NAME * STRING_FACTOR)
    )


def _in(receiver: str, values: Sequence[str]) -> Term:
    listed = "[" + ", ".join(_quoted(v) for v in values) + "]"
    return Term(f"{receiver} in {listed}", 2 + len(values) * (2 + max(map(len, values))))


def _long(receiver: str) -> Term:
    return Term(f"size({receiver}) > {MAX_NAME}", 3)


def _exists(items: str, var: str, limit: int, body: Term) -> Term:
    """Some element of the list ``items`` satisfies ``body``; a list longer than ``limit``
    counts as yes without being read."""
    per = body.cost + ITERATION + 1
    return Term(
        f"(size({items}) > {limit} || {items}.exists({var}, {body.text}))",
        4 + limit * per,
    )


def _keys_exist(items: str, var: str, limit: int, body: Term) -> Term:
    return _exists(items, var, limit, body)


def plain_resources_safe(policy: Policy) -> bool:
    """Whether no GPU resource name of the policy can be cpu, memory, ephemeral-storage or a
    huge page size: every pattern holds a ``/`` (an extended resource's domain), which none
    of those names has; else every resource name calls."""
    return all("/" in name for name, _ in policy.settings.gpu_resources.entries)


def _unusual_resources(field: str, *, plain_safe: bool) -> Term:
    """A map of resource names with one that is not cpu, memory, ephemeral-storage or a
    huge page size: every GPU (any vendor's, misspelt or not) and every other extended
    resource (``unknownResource``; the engine reads only names with a ``/`` besides the
    policy's GPU names: ``demand/gpus.py``)."""
    key = "k"
    if not plain_safe:
        return Term(f"size({field}) > 0", 3)
    body = _long(key) | Term(
        f"!({_in(key, BASIC_RESOURCES).text} || {_starts(key, 'hugepages-').text})",
        _in(key, BASIC_RESOURCES).cost + _starts(key, "hugepages-").cost + 2,
    )
    return _keys_exist(field, key, MAX_RESOURCES, body)


def _container(var: str, *, plain_safe: bool) -> Term:
    """One container that may reach or ask for GPUs."""
    resources = f"{var}.resources"
    asks = _has(var, "resources") & _any(
        [
            Term(f"has({resources}.claims)", 2),
            Term(f"has({resources}.limits)", 2)
            & _unusual_resources(f"{resources}.limits", plain_safe=plain_safe),
            Term(f"has({resources}.requests)", 2)
            & _unusual_resources(f"{resources}.requests", plain_safe=plain_safe),
        ]
    )
    name = "e.name"
    env_body = (
        Term("!has(e.name)", 2) | _long(name) | _starts(name, "NVIDIA_") | _starts(name, "CUDA_")
    )
    env = Term(f"has({var}.env)", 2) & _exists(f"{var}.env", "e", MAX_ENV, env_body)
    privileged = _has(var, "securityContext", "privileged") & Term(
        f"{var}.securityContext.privileged == true", 3
    )
    return _any([asks, env, privileged])


def _tolerations(spec: str) -> Term:
    """A toleration of any taint but the node condition taints (``node.kubernetes.io/``,
    which the engine never counts as GPU taints, and which the API server's
    DefaultTolerationSeconds plugin adds to every pod)."""
    body = (
        Term("!has(t.key)", 2)
        | _long("t.key")
        | Term(f"!{_starts('t.key', CONDITION_TAINTS).text}", _starts("t.key", "x").cost + 1)
    )
    return Term(f"has({spec}.tolerations)", 2) & _exists(
        f"{spec}.tolerations", "t", MAX_TOLERATIONS, body
    )


def pod_spec_term(spec: str, *, plain_safe: bool = True) -> Term:
    """True for a pod spec (a CEL path to it, present) that may touch a GPU."""
    fields = [
        Term(f"has({spec}.{name})", 2)
        for name in ("resourceClaims", "resources", "runtimeClassName", "nodeSelector", "nodeName")
    ]
    affinity = _has(spec, "affinity", "nodeAffinity")
    host_paths = Term(f"has({spec}.volumes)", 2) & _exists(
        f"{spec}.volumes", "v", MAX_VOLUMES, Term("has(v.hostPath)", 2)
    )
    containers = [
        Term(f"has({spec}.{lst})", 2)
        & _exists(f"{spec}.{lst}", "c", MAX_CONTAINERS, _container("c", plain_safe=plain_safe))
        for lst in CONTAINER_LISTS
    ]
    return _any([*fields, affinity, host_paths, _tolerations(spec), *containers])


def _at(base: str, path: Sequence[str]) -> tuple[Term, str]:
    """(present, CEL path) of the pod spec under a template at ``path`` (empty: the object
    itself is the pod)."""
    fields = [*path, "spec"]
    return _has(base, *fields), ".".join([base, *fields])


# --- which rules act on pods that ask for no GPU ------------------------------------------


def _acts_on_plain_pods(rule: Rule, *, tainted_gpu_nodes: bool) -> bool:
    """Whether the rule can match a pod asking for no GPU and change or judge it."""
    if rule.match.gpu_min > 0:
        return False
    m = rule.mutations
    hides = m.hide_gpus == "gpuNodes" and not tainted_gpu_nodes
    return bool(
        rule.checks
        or hides
        or m.tolerations
        or m.required_affinity
        or m.preferred_affinity
        or m.gpu_env
        or m.memory_limit is not None
        or m.shm_size is not None
        or m.runtime_class is not None
        or m.avoid_gpu_nodes is not None
    )


def _rule_scope(rule: Rule) -> Term:
    """The namespaces a rule can match, by name; any namespace when it names none, or
    names a glob (a condition could match globs, but a name list is all the API server
    needs to be cheap, and a glob here is rare)."""
    names = rule.match.namespace_patterns
    if rule.match.namespaces is None or not names or any(c in n for n in names for c in "*?["):
        return TRUE
    return _in("request.namespace", sorted(names))


def rules_term(policy: Policy, *, tainted_gpu_nodes: bool) -> Term | None:
    """The namespaces where some rule acts on pods that ask for no GPU; None: nowhere."""
    acting = [
        r for r in policy.rules if _acts_on_plain_pods(r, tainted_gpu_nodes=tainted_gpu_nodes)
    ]
    if not acting:
        return None
    if any(_rule_scope(r) is TRUE for r in acting):
        return TRUE
    names = sorted({n for r in acting for n in r.match.namespace_patterns})
    return _in("request.namespace", names)


# --- the conditions -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MatchCondition:
    name: str
    expression: str
    cost: float  # an upper bound of its runtime cost, for tests and the command's report

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "expression": self.expression}


def _template_term(spec_at: tuple[Term, str], policy: Policy, *, tainted_gpu_nodes: bool) -> Term:
    if not tainted_gpu_nodes:
        return TRUE
    present, spec = spec_at
    inner = pod_spec_term(spec, plain_safe=plain_resources_safe(policy))
    rules = rules_term(policy, tainted_gpu_nodes=tainted_gpu_nodes)
    if rules is not None:
        inner = rules | inner
    # No spec where the kind keeps it: the engine passes it through unchecked, but call.
    return Term(f"(!({present.text}) || {inner.text})", present.cost + inner.cost + 2)


def _seen_into(kinds: KindTable) -> dict[tuple[str, ...], list[WorkloadKind]]:
    """The typed kinds by the one path of their template (no ``*``, no version layout)."""
    by_path: dict[tuple[str, ...], list[WorkloadKind]] = {}
    for kind in kinds:
        if kind.group not in TYPED_GROUPS or kind.versions or len(kind.locations) != 1:
            continue
        location = kind.locations[0]
        if "*" in location.path or location.pod_spec or location.singles:
            continue
        by_path.setdefault(location.path, []).append(kind)
    return by_path


def _kind_is(kinds: Sequence[WorkloadKind]) -> Term:
    parts = []
    for group in sorted({k.group for k in kinds}):
        names = sorted(k.kind for k in kinds if k.group == group)
        parts.append(
            Term(
                f"(request.kind.group == {_quoted(group)} && "
                f"{_in('request.kind.kind', names).text})",
                6 + _in("request.kind.kind", names).cost,
            )
        )
    return _any(parts)


# Called without a look: no object (DELETE), a subresource (a Scale, a Pod's
# ephemeralcontainers or resize: rare, and judged on what they change), or an UPDATE of a
# kind other than Pod (its totals may grow with replicas: judged against the old object).
_ALWAYS = Term("object == null || request.subResource != ''", 6)


def _webhook_condition(
    policy: Policy, *, tainted_gpu_nodes: bool, pods_only: bool
) -> MatchCondition:
    if not tainted_gpu_nodes:  # every template is called: only what is never judged is not
        return MatchCondition("may-touch-gpus", "true", 1)
    by_path = _seen_into(policy.kinds)
    branches: list[tuple[Term, Term]] = []
    for path, kinds in sorted(by_path.items()):
        if pods_only and path:
            continue
        spec_at = _at("object", path)
        body = _template_term(spec_at, policy, tainted_gpu_nodes=tainted_gpu_nodes)
        branches.append((_kind_is(kinds), body))
    text, cost = "true", 1.0
    for test, body in reversed(branches):
        text = f"({test.text} ? {body.text} : {text})"
        cost = test.cost + max(body.cost, cost) + 1
    expression = f"{_ALWAYS.text} || {text}"
    return MatchCondition("may-touch-gpus", expression, _ALWAYS.cost + cost + 1)


def match_conditions(
    policy: Policy, *, tainted_gpu_nodes: bool = False
) -> dict[str, list[MatchCondition]]:
    """Per webhook name, its conditions. The policy objects' webhook gets none: every
    change of a rule object is judged."""
    return {
        MUTATING: [_webhook_condition(policy, tainted_gpu_nodes=tainted_gpu_nodes, pods_only=True)],
        VALIDATING: [
            _webhook_condition(policy, tainted_gpu_nodes=tainted_gpu_nodes, pods_only=False)
        ],
    }


# --- whether the nodes keep the promise ---------------------------------------------------


def _blocking(taints: Iterable[object]) -> bool:
    return any(
        getattr(t, "effect", "") in ("NoSchedule", "NoExecute")
        and not str(getattr(t, "key", "")).startswith(CONDITION_TAINTS)
        for t in taints
    )


def gpu_nodes_tainted(policy: Policy, view: InventoryView) -> bool:
    """Whether every GPU node the engine would see carries a ``NoSchedule`` or
    ``NoExecute`` taint outside ``node.kubernetes.io/``: the promise the template clauses
    rest on. With an inventory: each shape (node pools too) that is a GPU node by its
    resources or labels, or by its ResourceSlices; without one: the taints
    ``GPUSettings.gpuNodes`` describes, as ``scheduling.gpunodes`` reads them then."""
    settings = policy.settings
    snapshot = inventory_of(view, policy)
    if snapshot is None:
        return _blocking(settings.gpu_nodes.taints)
    dra = dra_gpus(settings, view.devices)
    devices = dra.gpus() if dra is not None else None
    for shape in snapshot.shapes:
        gpu = is_gpu_shape(shape, nodes=settings.gpu_nodes, resources=settings.gpu_resources)
        if not gpu and devices is not None and not shape.pool:
            gpu = any(devices.holds(member) for member in shape.members)
        if gpu and not _blocking(shape.taints):
            return False
    return True
