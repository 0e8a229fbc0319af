"""The engine's entry point: one object, the policy and a snapshot in; a decision out.

``_evaluate`` picks the object's path: a ``scale`` subresource is judged as the UPDATE of
its parent (``scale``), a ResourceClaim object by ``claimobjects`` (and against the pods
that already name it), a Pod UPDATE by ``updates.pod_update``, any other object by
``pipeline.evaluate_object``. Here too, after the stages: a denial the webhook's own
affinity causes is judged again without it, a finding caused by a rule value nothing in
the cluster has says so, and a GPUPolicyException waives the findings it names.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook.engine.evaluation.claimobjects import evaluate_claim_object
from webhook.engine.evaluation.mutation import strip_spec
from webhook.engine.evaluation.pipeline import evaluate_object
from webhook.engine.evaluation.request import (
    InventoryView,
    Request,
    inventory_of,
    matching_rules,
    template_asks,
)
from webhook.engine.evaluation.scale import SCALE, parent_update, scale_decision
from webhook.engine.evaluation.updates import pod_update
from webhook.engine.kube.patch import lookup
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, Finding, decide, shorten
from webhook.engine.policy.policyexceptions import waive
from webhook.engine.policy.ruleset import Policy, Rule
from webhook.engine.resources.cel.celbudget import close_review, open_review
from webhook.engine.resources.devices import DeviceInventory, is_dra_object
from webhook.engine.scheduling.policyvalues.policyreach import (
    ClusterValues,
    Unmet,
    blocking_unmet,
    cluster_values,
    unmet_values,
)

_values: tuple[Policy, tuple[object, ...], ClusterValues | None] | None = None
_blocking_memo: tuple[Policy, object, Mapping[tuple[str, str], Unmet]] | None = None


def cluster_values_of(
    policy: Policy, view: InventoryView, *, namespaces: Collection[str] | None = None
) -> ClusterValues | None:
    """What the view's nodes, pools (as every admission adds them) and devices offer to the
    policy's values (issue 42), kept while the policy and the view's parts are the same
    objects: a denial asks once per snapshot, not per review."""
    global _values  # noqa: PLW0603 - a memo; the answer stays a function of its inputs
    parts = (view.snapshot, view.devices, view.pools, view.runtime_classes)
    known = _values
    if (
        namespaces is None
        and known is not None
        and known[0] is policy
        and all(a is b for a, b in zip(known[1], parts, strict=True))
    ):
        return known[2]
    values = cluster_values(
        policy,
        inventory_of(view, policy),
        view.usable_devices,
        runtime_classes=view.runtime_classes,
        namespaces=namespaces,
    )
    if namespaces is None:
        _values = (policy, parts, values)
    return values


def _blocking(policy: Policy, view: InventoryView) -> Mapping[tuple[str, str], Unmet]:
    """``blocking_unmet`` of the memoised values, kept with them: a review with a rule
    finding asks it, and the answer changes only with the policy or the view."""
    global _blocking_memo  # noqa: PLW0603 - a memo, as _values
    values = cluster_values_of(policy, view)
    known = _blocking_memo
    if known is not None and known[0] is policy and known[1] is values:
        return known[2]
    found = blocking_unmet(policy, values)
    _blocking_memo = (policy, values, found)
    return found


def policy_findings(
    policy: Policy, view: InventoryView, *, namespaces: Collection[str] | None = None
) -> list[Unmet]:
    """Every rule value the cluster has nothing for (``scheduling.policyreach``): the one
    function ``rules lint``, ``serve``, ``/validate`` and the status writer call."""
    return unmet_values(policy, cluster_values_of(policy, view, namespaces=namespaces))


def evaluate(request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
    """The decision for one review, its CEL selectors within one budget
    (``celbudget.review_budget``): past it they are reported as not evaluated. CEL is only
    ever evaluated on a DRA inventory's devices (``scheduling.dra``, ``devicepolicy``):
    without one no budget is opened (a context variable set and reset on every review)."""
    if inventory.devices is None:
        decision = _evaluate(request, policy=policy, inventory=inventory)
        if policy.exceptions and decision.findings:
            return _with_exceptions(decision, request, policy)
        return decision
    token = open_review()
    try:
        decision = _evaluate(request, policy=policy, inventory=inventory)
    finally:
        close_review(token)
    if policy.exceptions and decision.findings:
        return _with_exceptions(decision, request, policy)
    return decision


def _with_exceptions(decision: Decision, request: Request, policy: Policy) -> Decision:
    """The decision less the findings a GPUPolicyException of the namespace waives, each
    waiver written in the audit annotations (who waived what)."""
    kept, waived = waive(
        decision.findings,
        policy.exceptions,
        namespace=request.effective_namespace,
        obj=request.object,
        now=request.now,
    )
    if not waived:
        return decision
    from_findings = {f.warning for f in decision.findings}
    decided = decide(
        kept,
        patch=decision.patch,
        mutated=decision.mutated,
        notices=decision.notices,
        extra_warnings=[w for w in decision.warnings if w not in from_findings],
        mutated_by=decision.mutated_by,
    )
    audit = dict(decided.audit)
    for waiver in waived:
        said = audit.get(waiver.audit_key)
        finding = waiver.finding
        line = f"GPUPolicyException {waiver.exception} waived {finding.id} ({finding.action})"
        audit[waiver.audit_key] = shorten(f"{said}; {line}" if said else line, 1000)
    decided.audit = audit
    decided.waivers = tuple(waived)
    decided.understood = decision.understood
    return decided


def _evaluate(request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
    if request.sub_resource == SCALE:
        update = parent_update(request, policy.kinds)
        if isinstance(update, Decision):
            return update
        decision = _evaluate(update, policy=policy, inventory=inventory)
        return scale_decision(decision, request, policy.kinds)
    obj = request.object
    if obj.get("kind") in ("ResourceClaim", "ResourceClaimTemplate") and is_dra_object(obj):
        decision = evaluate_claim_object(
            request, policy=policy, view=inventory, snapshot=inventory_of(inventory, policy)
        )
        if obj.get("kind") == "ResourceClaim" and request.referencing_pods is not None:
            return _with_referencing_pods(decision, request, policy=policy, inventory=inventory)
        return decision
    templates = policy.kinds.templates(obj)
    if templates is None:
        return Decision(allowed=True, mutated=obj, understood=False)
    if not templates:
        # A known kind whose object holds no template where this version's layout keeps
        # them: say so, rather than allow it as if it had been checked.
        notice = (
            f"{obj.get('kind')} {obj.get('apiVersion')}: no pod template at the paths this "
            "kind keeps them; passed through unchecked (a WorkloadKind rule can add its layout)"
        )
        return Decision(allowed=True, mutated=obj, understood=False, notices=(notice,))
    if request.operation == "UPDATE" and not templates[0].path:
        return pod_update(request, templates[0], policy=policy, inventory=inventory)
    decision = evaluate_object(request, templates, policy=policy, inventory=inventory)
    if decision.allowed:
        return _unmeetable_said(decision, policy, inventory) if decision.findings else decision
    decision = _without_own_denials(
        request, templates, policy, inventory=inventory, decision=decision
    )
    return _unmeetable_said(decision, policy, inventory)


def _unmeetable_said(decision: Decision, policy: Policy, view: InventoryView) -> Decision:
    """A rule's finding that one of its values causes, a value nothing in the cluster has
    (issue 42), says so: the rule cannot be met on this cluster, by its file or object, and
    only the cluster admin can fix it. A denial stays a denial (the pod would not run where
    the rule wants it, and the admin was warned at lint, reload and apply); what goes is any
    advice to the pod's author, who can do nothing about it. Warn and audit say the same."""
    if all(f.rule == "builtin" and f.check != "unknownRuntimeClass" for f in decision.findings):
        return decision
    blocking = _blocking(policy, view)
    if not blocking:
        return decision
    # The RuntimeClass a rule sets is judged by the built-in check, which names the rule.
    classes = {u.rule: u for (_, check), u in blocking.items() if check == "runtimeClassName"}
    findings = []
    warnings = dict.fromkeys(decision.warnings, "")
    audit = dict(decision.audit)
    for found in decision.findings:
        unmet = blocking.get((found.rule, found.check))
        if found.check == "unknownRuntimeClass":
            unmet = next(
                (u for r, u in classes.items() if f"(set by rule {r})" in found.message), None
            )
        if unmet is not None:
            said = replace(
                found,
                message=unmet.denial,
                summary=f"rule cannot be met on this cluster: {unmet.value} {unmet.nowhere}",
            )
            # The warning and audit annotation decide() made of it, said alike.
            warnings = {said.warning if w == found.warning else w: "" for w in warnings}
            if found.audit_key in audit and found.action == "audit":
                audit[found.audit_key] = shorten(said.message, 1000)
            found = said  # noqa: PLW2901 - the finding, reworded
        findings.append(found)
    return replace(decision, findings=tuple(findings), warnings=tuple(warnings), audit=audit)


def _without_own_denials(
    request: Request,
    templates: list[PodTemplate],
    policy: Policy,
    *,
    inventory: InventoryView,
    decision: Decision,
) -> Decision:
    """A denial that only the webhook's own patch causes is no true denial (issue 31): the
    object is judged again without the required node affinity of the rules that added
    some; the built-in denials that then go away were the affinity's doing, and are said
    as what they are: the rule cannot be met on this cluster as it is. Only denied objects
    pay for the second evaluation."""
    placing = _placing_rules(request, templates, policy, inventory=inventory)
    if not placing:
        return decision
    names = {r.name for r in placing}
    bare = replace(
        policy,
        rules=tuple(
            replace(r, mutations=replace(r.mutations, required_affinity=()))
            if r.name in names
            else r
            for r in policy.rules
        ),
    )
    # Without them in the object either: a pod applied with its own patch (or re-invoked)
    # carries the rule's requirements already, and must get the same answer.
    wanted = [dict(r) for rule in placing for r in rule.mutations.required_affinity]
    doc = _stripped(request.object, templates, wanted)
    stripped = policy.kinds.templates(doc) or templates
    without = evaluate_object(
        replace(request, object=doc),
        stripped,
        policy=bare,
        inventory=inventory,
        snapshot_of=policy,
    )
    remain = {(f.rule, f.check) for f in without.denials}
    own = [f for f in decision.denials if f.rule == "builtin" and (f.rule, f.check) not in remain]
    if not own:
        return decision
    why = "; ".join(f"[{f.id}] {f.message}" for f in own)
    impossible = [_impossible(rule, own[0].path, why) for rule in placing]
    from_findings = {f.warning for f in decision.findings}
    return decide(
        [*(f for f in decision.findings if f not in own), *impossible],
        patch=decision.patch,
        mutated=decision.mutated,
        notices=decision.notices,
        extra_warnings=[w for w in decision.warnings if w not in from_findings],
        mutated_by=decision.mutated_by,
    )


def _placing_rules(
    request: Request, templates: Sequence[PodTemplate], policy: Policy, *, inventory: InventoryView
) -> list[Rule]:
    """The rules with a required node affinity that match some template of the object."""
    found: dict[str, Rule] = {}
    for template in templates:
        pod, claims = template_asks(request, template, settings=policy.settings, view=inventory)
        for rule in matching_rules(request, template, pod, policy, claims):
            if rule.mutations.required_affinity:
                found.setdefault(rule.name, rule)
    return list(found.values())


def _stripped(
    obj: Mapping[str, Any], templates: Sequence[PodTemplate], wanted: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A copy of ``obj`` whose templates' required node affinity lacks ``wanted``."""
    doc = copy.deepcopy(dict(obj))
    for template in templates:
        spec = lookup(doc, template.spec_path)
        if isinstance(spec, dict):
            strip_spec(spec, wanted)
    return doc


def _impossible(rule: Rule, path: str, why: str) -> Finding:
    required = ", ".join(
        f"{r.get('key')} {r.get('operator')} {list(map(str, r.get('values') or []))}"
        for r in rule.mutations.required_affinity
    ).replace("'", "")
    return Finding(
        rule.name,
        "nodeAffinity",
        "deny",
        f"rule {rule.name} adds the required node affinity {required}, and with it no node "
        "can take the pod, while without it one could: the rule cannot be met on this "
        "cluster as it is (no GPU node the pod can use matches it). Ask an admin to fix the "
        f"rule or add such nodes. With the affinity: {why}",
        f"rule {rule.name}: its node affinity leaves the pod no node",
        path,
    )


# The pod-level limits a claim created after its pod can break (issue 35): the pod's GPU
# total counts every claim it names (``scheduling.dra.with_claim_gpus``).
POD_TOTAL_CHECKS = frozenset({"maxGPUsPerPod"})
# Pods judged again per claim: a claim is named by one pod, or by a few that share it.
MAX_REFERENCING_PODS = 16


def _with_referencing_pods(
    decision: Decision, request: Request, *, policy: Policy, inventory: InventoryView
) -> Decision:
    """A new ResourceClaim judged against the pods that already name it: each pod as it
    stands (its other claims as the inventory knows them) and again with this claim; a
    pod-total limit that only this claim breaks denies the claim. The pod was admitted
    while the claim did not exist (a warning said its devices were not checked), so this
    is the first moment the total is known; the claim is what goes over it."""
    if request.operation != "CREATE" or not decision.understood:
        return decision
    devices = inventory.devices or DeviceInventory({}, (), {}, {}, complete=False)
    claim = {
        **request.object,
        "metadata": {**_metadata(request.object), "namespace": request.effective_namespace},
    }
    with_claim = dataclasses.replace(inventory, devices=devices.with_claims([claim]))
    found = list(decision.findings)
    for pod in (request.referencing_pods or ())[:MAX_REFERENCING_PODS]:
        found.extend(_broken_by_claim(pod, request, policy, inventory, with_claim))
    notices = list(decision.notices)
    if (
        not request.referencing_complete
        or len(request.referencing_pods or ()) > MAX_REFERENCING_PODS
    ):
        notices.append(
            "not every pod that names this claim was read: pod GPU limits judged for "
            f"the first {MAX_REFERENCING_PODS} read only"
        )
    if len(found) == len(decision.findings) and notices == list(decision.notices):
        return decision
    return decide(found, patch=(), mutated=request.object, notices=notices)


def _broken_by_claim(
    pod: Mapping[str, Any],
    request: Request,
    policy: Policy,
    before: InventoryView,
    after: InventoryView,
) -> Iterator[Finding]:
    as_created = Request(
        pod,
        namespace=request.effective_namespace,
        namespace_labels=request.namespace_labels,
        now=request.now,
    )
    already = {f.id for f in evaluate(as_created, policy=policy, inventory=before).denials}
    name = str(_metadata(pod).get("name") or "")
    for finding in evaluate(as_created, policy=policy, inventory=after).denials:
        if finding.check not in POD_TOTAL_CHECKS or finding.id in already:
            continue
        message = (
            f"pod {name}, which names this ResourceClaim, would break a limit with it: "
            f"{finding.message} Delete or shrink the pod's other claims, or ask for fewer "
            "devices here."
        )
        summary = f"pod {name} over its GPU limit with this claim ({finding.summary})"
        yield Finding(finding.rule, finding.check, finding.action, message, summary, "spec")


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}
