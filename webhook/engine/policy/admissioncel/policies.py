"""The core rules as admission policies the API server evaluates itself (issue 43).

With the webhook down (``failurePolicy: Ignore``) a pod is admitted unjudged. What a rule
says without cluster state can hold anyway, in-process: this module turns a ``Policy``
into ValidatingAdmissionPolicies and one MutatingAdmissionPolicy (each with its binding):

- ``gpu-access``: ``gpuAccessWithoutRequest`` by env (``NVIDIA_VISIBLE_DEVICES``,
  ``NVIDIA_DRIVER_CAPABILITIES``), by ``hostPath`` of GPU device nodes and by a mount of
  the host's /dev/null into the toolkit's device list (``demand.gpuaccess``), with the
  rules' exemptions of it;
- ``rule-<name>``: a rule's ``maxGPUsPerPod``, ``maxGPUsPerContainer`` and
  ``allowedGPUCounts``, matched by namespaces, selectors, resources and ``gpuCount``;
- ``tolerations``: the rules' ``mutate.tolerations`` for the GPU pods they match, as
  JSONPatch (``tolerations`` is an atomic list, which an ApplyConfiguration may not
  change), skipped where a toleration already covers it (``selectors.toleration_covers``).

Every expression under-approximates the webhook: it denies (or adds) only what the webhook
would, so that with the webhook up the answer is the one of today (a denial said by the
policy instead, the same toleration added once). What needs the inventory (where a pod can
land: privileged containers, runtime classes, hiding GPUs on GPU nodes; GPU products, node
facts, claims' classes) stays in the webhook and is listed as skipped.

Cost: the API server bounds each expression (``PerCallLimit``, 1,000,000) and each
evaluation (``RuntimeCELCostBudget``, 10,000,000): every expression here walks each list
of the pod once (containers, their env, mounts and resources, volumes), never a list
inside a walk of another list of the same size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.policy.admissioncel.access import access_rules
from webhook.engine.policy.admissioncel.hiding import hiding_patch, hiding_variables, surely_asks
from webhook.engine.policy.admissioncel.pod import (
    PodCEL,
    all_of,
    any_of,
    label_selector,
    name_in,
    pod_variables,
    quote,
    quoted_list,
)
from webhook.engine.policy.admissioncel.workload import workload_validations
from webhook.engine.policy.ruleset import Match, Policy, Rule, RuleCheck

GPU_ACCESS = "gpuAccessWithoutRequest"
PREFIX = "gpu-webhook"
FILE_PREFIX = "core-"
# The webhooks' own namespaceSelector (deploy/base/webhooks.yaml): a policy acts where the
# webhook would have been asked, no further. The chart sets its release's (names, extra
# excluded namespaces) as it does for the webhooks.
NAMESPACE_SELECTOR: Mapping[str, Any] = {
    "matchExpressions": [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "gpu-webhook", "gpu-operator"],
        },
        {"key": "gpu-webhook.io/ignore", "operator": "NotIn", "values": ["true"]},
    ]
}
VALIDATION_ACTIONS = {"deny": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}
COUNT_CHECKS = ("maxGPUsPerPod", "maxGPUsPerContainer", "allowedGPUCounts", "requiredLabels")
PODS = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["CREATE"],
    "resources": ["pods"],
}


@dataclass(frozen=True, slots=True)
class Skipped:
    """A rule's part that stays in the webhook, and why."""

    rule: str
    part: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.part}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Generated:
    """The policies by file stem (``core-gpu-access``: the policy, then its binding)."""

    files: tuple[tuple[str, tuple[Mapping[str, Any], ...]], ...]
    skipped: tuple[Skipped, ...]

    @property
    def objects(self) -> list[Mapping[str, Any]]:
        return [obj for _, objs in self.files for obj in objs]


def admission_policies(policy: Policy, *, prefix: str = PREFIX) -> Generated:
    """Every policy the rules can be said as, and what had to be left out."""
    skipped: list[Skipped] = [*_builtin_skips(policy)]
    files: list[tuple[str, tuple[Mapping[str, Any], ...]]] = []
    pod = PodCEL(policy)
    access = _gpu_access(policy, prefix)
    if access is not None:
        files.append((f"{FILE_PREFIX}gpu-access", access))
    for rule in policy.rules:
        made, left = _rule_checks(rule, pod, prefix)
        skipped += left
        if made is not None:
            files.append((f"{FILE_PREFIX}rule-{rule.name}", made))
        skipped += _rule_mutation_skips(rule, pod)
    files += _workloads(policy, pod, prefix, skipped)
    files, skipped = _outside_exceptions(policy, files, skipped)
    tolerations = _tolerations(policy, pod, prefix)
    if tolerations is not None:
        files.append((f"{FILE_PREFIX}tolerations", tolerations))
    hiding, left = _hiding(policy, pod, prefix)
    skipped += left
    if hiding is not None:
        files.append((f"{FILE_PREFIX}hide-gpus", hiding))
    return Generated(tuple(files), tuple(skipped))


def _outside_exceptions(
    policy: Policy,
    files: list[tuple[str, tuple[Mapping[str, Any], ...]]],
    skipped: list[Skipped],
) -> tuple[list[tuple[str, tuple[Mapping[str, Any], ...]]], list[Skipped]]:
    """A GPUPolicyException (issue 44) waives checks in the namespaces
    ``GPUSettings.exceptionNamespaces`` names, per workload and until it expires: no
    in-process policy can know it, so none judges there (it would deny what the webhook
    admits). Named namespaces are left out of every binding; a pattern cannot be said by a
    namespaceSelector, so then the checks stay with the webhook alone."""
    names = policy.settings.exception_namespaces
    if not names:
        return files, skipped
    if any(any(c in n for c in "*?[") for n in names):
        why = "a pattern: exceptions may waive checks where no namespaceSelector can name"
        return [], [*skipped, Skipped("settings", "exceptionNamespaces", why)]
    term = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(names)}
    for _, objects in files:
        for obj in objects:
            if obj.get("kind") == "ValidatingAdmissionPolicyBinding":
                selector = obj["spec"]["matchResources"]["namespaceSelector"]
                selector["matchExpressions"].append(dict(term))
    return files, skipped


# --- matching a rule ----------------------------------------------------------------------


def match_at_most(match: Match, pod: PodCEL) -> tuple[str | None, str]:
    """A CEL condition true only for pods the rule matches (never for one it does not),
    or ``None`` and why it cannot be said."""
    terms = []
    if match.namespaces is not None:
        names = name_in("request.namespace", match.namespace_patterns)
        if names is None:
            return None, "a namespace pattern with a character class"
        terms.append(names)
    if match.exclude_patterns:
        excluded = name_in("request.namespace", match.exclude_patterns)
        if excluded is None:
            return None, "an excluded namespace pattern with a character class"
        terms.append(f"!({excluded})")
    for metadata, selector in (
        ("namespaceObject.metadata", match.namespace_selector),
        ("object.metadata", match.pod_selector),
    ):
        if selector:
            said = label_selector(metadata, selector)
            if said is None:
                return None, "a selector operator the API server's CEL is not given"
            terms.append(said)
    if match.resource_patterns:
        holds = pod.holds("c", match.resource_patterns)
        if holds is None:
            return None, "a resource pattern with a character class"
        terms.append(f"variables.containers.exists(c, {holds})")
    elif match.device_class_patterns:
        return None, "matched by DRA device classes (the claims' classes are cluster state)"
    if match.gpu_min > 0:
        terms.append(f"variables.gpus >= {match.gpu_min}")
    if match.gpu_max is not None:
        terms.append(f"variables.exact && variables.gpus <= {match.gpu_max}")
    return all_of(terms), ""


def match_at_least(match: Match) -> str:
    """A CEL condition true for every pod the rule matches (an exemption: sparing more pods
    than the webhook never denies one it would not): what cannot be said is true."""
    terms = []
    if match.namespaces is not None:
        terms.append(name_in("request.namespace", match.namespace_patterns) or "true")
    if match.exclude_patterns:
        excluded = name_in("request.namespace", match.exclude_patterns)
        terms.append(f"!({excluded})" if excluded else "true")
    for metadata, selector in (
        ("namespaceObject.metadata", match.namespace_selector),
        ("object.metadata", match.pod_selector),
    ):
        if selector:
            terms.append(label_selector(metadata, selector) or "true")
    return all_of(terms)


def _uses_exact(match: Match) -> bool:
    return match.gpu_max is not None


# --- the objects --------------------------------------------------------------------------


def validating(
    name: str,
    *,
    variables: list[dict[str, str]],
    validations: Sequence[Mapping[str, str]],
    actions: list[str],
    resource_rules: Sequence[Mapping[str, Any]] = (PODS,),
) -> tuple[Mapping[str, Any], ...]:
    """A ValidatingAdmissionPolicy and its binding, acting where the webhooks do."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            # An expression that errors admits: a false denial is the worst bug.
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [dict(r) for r in resource_rules]},
            "variables": variables,
            "validations": [dict(v) for v in validations],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": actions,
            "matchResources": {"namespaceSelector": _selector()},
        },
    }
    return policy, binding


def _selector() -> dict[str, Any]:
    return {
        "matchExpressions": [
            {**term, "values": list(term["values"])}
            for term in NAMESPACE_SELECTOR["matchExpressions"]
        ]
    }


# --- gpuAccessWithoutRequest --------------------------------------------------------------


def _gpu_access(policy: Policy, prefix: str) -> tuple[Mapping[str, Any], ...] | None:
    action = policy.settings.actions.get(GPU_ACCESS, "deny")
    if action not in VALIDATION_ACTIONS:
        return None
    exempting = [r for r in policy.rules if GPU_ACCESS in r.exempt]
    exempt = any_of(match_at_least(r.match) for r in exempting) if exempting else "false"
    variables, validation = access_rules(exempt)
    return validating(
        f"{prefix}-core-gpu-access",
        variables=variables,
        validations=[validation],
        actions=VALIDATION_ACTIONS[action],
    )


def _builtin_skips(policy: Policy) -> list[Skipped]:
    skipped = [
        Skipped("builtin", GPU_ACCESS, "privileged containers and NVIDIA runtime classes: "
                "whether the pod can land on a GPU node, and the cluster's RuntimeClasses"),
        Skipped("builtin", GPU_ACCESS, "values from fields and $(VAR) references, subPaths "
                "and unclean paths: left to the webhook, which reads them as the kubelet does"),
    ]  # fmt: skip
    if not PodCEL(policy).gpu_names_ok:
        skipped.append(
            Skipped("settings", "gpuResources", "a name with a character class: no GPU counts")
        )
    return skipped


# --- rule checks --------------------------------------------------------------------------


def _check_expression(check: RuleCheck, pod: PodCEL) -> tuple[str, str] | None:
    """(the violation, its message) of a count check, as ``checks._max_per_pod``,
    ``_max_per_container`` and ``_allowed_counts`` deny it."""
    extra = f" {check.message}" if check.message else ""
    if check.kind == "maxGPUsPerPod":
        n = int(check.value)
        return (
            f"variables.gpus > {n}",
            f"'the pod requests ' + string(variables.gpus) + ' GPUs; at most {n} per pod are "
            f"allowed here. Request {n} or fewer, or split the work over more pods.{_q(extra)}'",
        )
    if check.kind == "maxGPUsPerContainer":
        n = int(check.value)
        over = (
            f"variables.containers.filter(c, !(has(c.resources) && has(c.resources.claims)) "
            f"&& ({pod.count('c')}) > {n})"
        )
        return (
            f"size({over}) > 0",
            f"'container \"' + {over}[0].name + '\" requests more than {n} GPUs; at most {n} "
            f"per container are allowed here.{_q(extra)}'",
        )
    if check.kind == "allowedGPUCounts":
        allowed = sorted(int(v) for v in check.value)
        listed = ", ".join(map(str, allowed))
        bad = f"variables.containers.filter(c, {pod.bad_count('c', str(allowed))})"
        return (
            f"size({bad}) > 0",
            f"'container \"' + {bad}[0].name + '\" requests a GPU count not allowed here; "
            f"allowed counts are {listed} (whole nodes or halves pack without stranding "
            f"GPUs).{_q(extra)}'",
        )
    if check.kind == "requiredLabels":
        keys = quoted_list(str(k) for k in check.value)
        listed = ", ".join(map(str, check.value))
        missing = f"{keys}.filter(k, !(has(object.metadata.labels) && k in object.metadata.labels))"
        return (
            f"size({missing}) > 0",
            f"'GPU pods here must carry the labels {_q(listed)}; missing: ' + "
            f"{missing}.join(', ') + '. Add them to the pod\\'s metadata.labels.{_q(extra)}'",
        )
    return None


def _q(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _rule_checks(
    rule: Rule, pod: PodCEL, prefix: str
) -> tuple[tuple[Mapping[str, Any], ...] | None, list[Skipped]]:
    skipped = [
        Skipped(rule.name, c.kind, "judged from nodes, products, claims or other objects")
        for c in rule.checks
        if c.kind not in COUNT_CHECKS
    ]
    counted = [c for c in rule.checks if c.kind in COUNT_CHECKS]
    if not counted:
        return None, skipped
    matched, why = match_at_most(rule.match, pod)
    if matched is None or not pod.gpu_names_ok:
        reason = why or "a GPU resource name with a character class"
        return None, skipped + [Skipped(rule.name, c.kind, reason) for c in counted]
    actions = {c.action for c in counted}
    if len(actions) > 1:
        # One binding has one set of actions: the strictest kept, the rest left out.
        keep = next(a for a in ("deny", "warn", "audit") if a in actions)
        skipped += [
            Skipped(rule.name, c.kind, f"action {c.action} beside {keep} in one rule")
            for c in counted
            if c.action != keep
        ]
        counted = [c for c in counted if c.action == keep]
    validations = []
    for check in counted:
        said = _check_expression(check, pod)
        if said is None:  # pragma: no cover - COUNT_CHECKS are all said
            continue
        violation, message = said
        validations.append(
            {
                "expression": f"!({matched}) || !({violation})",
                "messageExpression": message,
                "reason": "Forbidden",
            }
        )
    return validating(
        f"{prefix}-core-rule-{rule.name}",
        variables=pod_variables(pod, exact=_uses_exact(rule.match)),
        validations=validations,
        actions=VALIDATION_ACTIONS[counted[0].action],
    ), skipped


def _rule_mutation_skips(rule: Rule, pod: PodCEL) -> list[Skipped]:
    m = rule.mutations
    skipped = []
    left = {
        "nodeAffinity": bool(m.required_affinity or m.preferred_affinity),
        "env.gpuContainers": bool(m.gpu_env),
        "memoryLimit": m.memory_limit is not None,
        "shm": m.shm_size is not None,
        "runtimeClassName": m.runtime_class is not None,
        "avoidGPUNodes": m.avoid_gpu_nodes is not None,
    }
    for part, present in left.items():
        if present:
            skipped.append(Skipped(rule.name, part, "per container or per node: webhook only"))
    if m.tolerations:
        matched, why = match_at_most(rule.match, pod)
        if matched is None:
            skipped.append(Skipped(rule.name, "tolerations", why))
    return skipped


# --- custom workloads' templates ----------------------------------------------------------


def _workloads(
    policy: Policy, pod: PodCEL, prefix: str, skipped: list[Skipped]
) -> list[tuple[str, tuple[Mapping[str, Any], ...]]]:
    if not pod.gpu_names_ok:
        return []
    made, left = workload_validations(policy, pod.gpu())
    skipped += [Skipped("builtin", check, why) for check, why in left]
    files = []
    for group in made:
        suffix = "" if group.action == "deny" else f"-{group.action}"
        name = f"{prefix}-core-workload-quantities{suffix}"
        objects = validating(
            name,
            variables=[],
            validations=list(group.validations),
            actions=VALIDATION_ACTIONS[group.action],
            resource_rules=group.resource_rules,
        )
        files.append((f"{FILE_PREFIX}workload-quantities{suffix}", objects))
    return files


# --- tolerations --------------------------------------------------------------------------


def covers(t: str, wanted: Mapping[str, Any]) -> str:
    """``selectors.toleration_covers(t, wanted)`` in CEL."""
    effect = str(wanted.get("effect") or "")
    key = str(wanted.get("key") or "")
    exists = (wanted.get("operator") or "Equal") == "Exists"
    value = str(wanted.get("value") or "")
    effect_ok = f"(!has({t}.effect) || {t}.effect == '' || {t}.effect == {quote(effect)})"
    by_exists = f"(!has({t}.key) || {t}.key == '' || {t}.key == {quote(key)})"
    by_equal = (
        "false"
        if exists
        else f"(has({t}.key) && {t}.key == {quote(key)} && "
        f"(has({t}.value) ? {t}.value : '') == {quote(value)})"
    )
    return (
        f"{effect_ok} && ((has({t}.operator) && {t}.operator == 'Exists') ? {by_exists} : "
        f"{by_equal})"
    )


def _toleration_value(wanted: Mapping[str, Any]) -> str:
    fields = []
    for name in ("key", "operator", "value", "effect"):
        if wanted.get(name):
            fields.append(f"{name}: {quote(str(wanted[name]))}")
    if wanted.get("tolerationSeconds") is not None:
        fields.append(f"tolerationSeconds: {int(wanted['tolerationSeconds'])}")
    return "Object.spec.tolerations{" + ", ".join(fields) + "}"


def _tolerations(policy: Policy, pod: PodCEL, prefix: str) -> tuple[Mapping[str, Any], ...] | None:
    """One mutation per toleration, in the order the webhook adds them (rule order), each
    where a matching rule wants it and nothing tolerates it yet: the webhook, after it,
    finds it covered and adds nothing (``mutators.add_tolerations``)."""
    wanted: dict[str, tuple[Mapping[str, Any], list[str]]] = {}
    uses_exact = False
    for rule in policy.rules:
        if not rule.mutations.tolerations:
            continue
        matched, _ = match_at_most(rule.match, pod)
        if matched is None:
            continue
        uses_exact = uses_exact or _uses_exact(rule.match)
        for toleration in rule.mutations.tolerations:
            key = repr(sorted(toleration.items()))
            wanted.setdefault(key, (toleration, []))[1].append(matched)
    if not wanted:
        return None
    mutations = []
    for toleration, matches in wanted.values():
        value = _toleration_value(toleration)
        tolerated = (
            f"has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
            f"{covers('t', toleration)})"
        )
        patch = (
            f"has(object.spec.tolerations) ? JSONPatch{{op: 'add', path: "
            f"'/spec/tolerations/-', value: {value}}} : JSONPatch{{op: 'add', path: "
            f"'/spec/tolerations', value: [{value}]}}"
        )
        expression = f"({any_of(matches)}) && !({tolerated}) ? [{patch}] : []"
        mutations.append({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
    name = f"{prefix}-core-tolerations"
    return mutating(name, variables=pod_variables(pod, exact=uses_exact), mutations=mutations)


def mutating(
    name: str, *, variables: list[dict[str, str]], mutations: Sequence[Mapping[str, Any]]
) -> tuple[Mapping[str, Any], ...]:
    """A MutatingAdmissionPolicy and its binding, acting where the webhooks do. It runs
    before the mutating webhooks (kubernetes ``pkg/kubeapiserver/options/plugins.go``,
    ``AllOrderedPlugins``), which see its result; ``Never`` reinvoked, since the webhook
    after it does all it would do again. No binding leaves out the namespaces
    ``exceptionNamespaces`` names: an exception waives findings, never a patch
    (``evaluate._with_exceptions`` keeps the decision's patch)."""
    map_policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [dict(PODS)]},
            "variables": variables,
            "mutations": [dict(m) for m in mutations],
            "reinvocationPolicy": "Never",
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": _selector()}},
    }
    return map_policy, binding


# --- hiding GPUs --------------------------------------------------------------------------

HIDE = "env.hideGPUsFromNonGPUContainers"
_CLAIMS = "by DRA claims (whether a claim gives a GPU: classes, ResourceSlices)"
# What of each scope stays in the webhook: the inventory's word.
_LEFT = {
    "gpuPods": f"pods and containers that ask {_CLAIMS}",
    "gpuNodes": "pods that ask for no GPU (whether one can land on a GPU node: nodes, taints, "
    f"labels), and those that ask {_CLAIMS}",
}


def _hiding(
    policy: Policy, pod: PodCEL, prefix: str
) -> tuple[tuple[Mapping[str, Any], ...] | None, list[Skipped]]:
    """``hideGPUsFromNonGPUContainers`` of every rule, in-process where it surely holds:
    the containers that surely ask for no GPU in a pod that surely asks for one, matched by
    a hiding rule and by no rule that may exempt it from ``hideGPUs`` (``hiding``)."""
    hiding = [r for r in policy.rules if r.mutations.hide_gpus != "none"]
    if not hiding:
        return None, []
    skipped = [Skipped(r.name, HIDE, _LEFT[r.mutations.hide_gpus]) for r in hiding]
    if not pod.gpu_names_ok:
        return None, [
            Skipped(r.name, HIDE, "a GPU resource name with a character class") for r in hiding
        ]
    matches, uses_exact = [], False
    for rule in hiding:
        matched, why = match_at_most(rule.match, pod)
        if matched is None:
            skipped.append(Skipped(rule.name, HIDE, why))
            continue
        matches.append(matched)
        uses_exact = uses_exact or _uses_exact(rule.match)
    if not matches:
        return None, skipped
    exempting = [r for r in policy.rules if "hideGPUs" in r.exempt]
    exempt = any_of(match_at_least(r.match) for r in exempting) if exempting else "false"
    asks = f"variables.containers.exists(c, {surely_asks('c', pod.gpu())})"
    hides = all_of([any_of(matches), asks, f"!({exempt})" if exempt != "false" else "true"])
    variables = [*pod_variables(pod, exact=uses_exact), *hiding_variables(hides, pod.gpu())]
    mutations = [{"patchType": "JSONPatch", "jsonPatch": {"expression": hiding_patch()}}]
    return mutating(f"{prefix}-core-hide-gpus", variables=variables, mutations=mutations), skipped
