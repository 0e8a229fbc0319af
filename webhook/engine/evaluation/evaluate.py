"""The engine's entry point: one object, the policy and a snapshot in; a decision out."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.engine.demand.gpuaccess import pod_asks_for_gpu
from webhook.engine.demand.gpus import Container, PodGPUs, pod_gpus
from webhook.engine.enforcement.accesscontrol import (
    NO_EXEMPTIONS,
    PodReach,
    Template,
    access_findings,
    dra_gpus,
    exemptions,
    hide_on_gpu_nodes,
    node_findings,
    place,
    runtime_class_findings,
    unhidden_findings,
    without_exempt,
)
from webhook.engine.enforcement.checks import (
    Scope,
    _cannot_know,
    capacity_findings,
    claim_unit_findings,
    device_findings,
    fit_warnings,
    mig_profile_findings,
    min_values_only,
    misspelled_findings,
    quantity_findings,
    refused_finding,
    rule_findings,
    whole_gpus,
)
from webhook.engine.enforcement.cudadrivers import (
    cuda_findings,
    cuda_notices,
    dra_cuda_findings,
    drivers_known,
    gpu_needs,
)
from webhook.engine.enforcement.mutators import (
    ClaimsFit,
    add_preferred_affinity,
    add_required_affinity,
    add_required_affinity_or_absent,
    add_tolerations,
    apply_containers,
    apply_placement,
    hide_gpus,
    keep_off_refusing_nodes,
    repair_requests_only,
)
from webhook.engine.enforcement.quotas import pod_quota_notices, workload_quota_findings
from webhook.engine.evaluation.claimobjects import evaluate_claim_object
from webhook.engine.evaluation.request import NO_INVENTORY_NOTICE, InventoryView, Request
from webhook.engine.evaluation.resize import RESIZE, resize_findings, stripped
from webhook.engine.evaluation.scale import SCALE, most_words, parent_update, scale_decision
from webhook.engine.evaluation.updates import (
    added_ephemeral_containers,
    env_reads_metadata,
    fresh_findings,
    judged_fields_changed,
    placed_as_before,
)
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.workloads import Path as WorkloadPath
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, Finding, action_of, decide, shorten
from webhook.engine.policy.policyexceptions import waive
from webhook.engine.policy.ruleset import Mutations, Policy, Rule, Settings
from webhook.engine.resources.cel.celbudget import close_review, open_review
from webhook.engine.resources.devices import DeviceInventory, is_dra_object
from webhook.engine.resources.fit import Demand, demand_of, pod_requests, shortfalls
from webhook.engine.resources.gpufacts import GPUFacts, SlotRefusal
from webhook.engine.resources.inventory import FitAnswer, Inventory, Node, Placement
from webhook.engine.resources.nodepools import NO_POOLS, PoolInventory
from webhook.engine.resources.quotas import Quotas
from webhook.engine.scheduling.devicepolicy import (
    AffinityPlan,
    affinity_finding,
    affinity_plan,
    asked_gpus,
    claim_units,
    device_policy_findings,
    device_rules,
    holds_gpus,
    is_device_label,
    refuses_devices,
    remembered_plan,
)
from webhook.engine.scheduling.dra import (
    NO_CLAIMS,
    PodClaims,
    claim_findings,
    extended_resource_claims,
    gpu_devices,
    gpu_names,
    pod_claims,
    with_claim_gpus,
)
from webhook.engine.scheduling.gangdevices import pod_devices
from webhook.engine.scheduling.gangs import gang_findings, may_be_gang
from webhook.engine.scheduling.gke import auto_provisioning
from webhook.engine.scheduling.gpunodes import bound_node_reach
from webhook.engine.scheduling.policyvalues.policyreach import (
    ClusterValues,
    Unmet,
    blocking_unmet,
    cluster_values,
    unmet_values,
)
from webhook.engine.scheduling.poolsizing import PoolSizing, size_pools
from webhook.engine.scheduling.wholepod import (
    cluster_capacity_finding,
    needs_whole_pod,
    plugin_fit,
    served_total,
    whole_pod_answer,
    whole_pod_findings,
)

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
NO_GPU_FACTS = GPUFacts()  # a node's cpu and memory alone: no GPU resource is asked
_with_pools: tuple[Inventory, Policy, object, Inventory] | None = None
_sized: tuple[Policy, PoolInventory, PoolSizing] | None = None
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
        _inventory(view, policy),
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


def _inventory(view: InventoryView, policy: Policy) -> Inventory | None:
    """The snapshot plus node pools (declared in rule files, and, when the settings say
    detect, the cluster's autoscaler objects), built once per (snapshot, policy, pools).

    Sizing the pools (tens of milliseconds for a few NodePools against the catalogue) is
    kept per (policy, pools): a live cache publishes a new snapshot for every node change,
    and only adding the sized pools to it (well under a millisecond) is paid again."""
    global _with_pools, _sized  # noqa: PLW0603 - memos; evaluation stays a function of its inputs
    if view.snapshot is None or view.problem:
        return None if view.problem else view.snapshot
    mode = policy.settings.autoscaling
    declared = policy.node_pools if mode != "off" else ()
    # Detect with no autoscaler objects still looks for GKE node auto-provisioning, which
    # only the nodes show (an empty PoolInventory is falsy: not a reason to skip it).
    live = (view.pools or NO_POOLS) if mode == "detect" else None
    if not declared and live is None:
        return view.snapshot
    memo = _with_pools
    # Held by reference, not by id(): a freed snapshot's id may be reused by the next one.
    if memo is not None and memo[0] is view.snapshot and memo[1] is policy and memo[2] is live:
        return memo[3]
    combined = view.snapshot.with_nodes(declared)
    if live is not None:
        sized = _sized
        if sized is None or sized[0] is not policy or sized[1] is not live:
            sizing = size_pools(
                live,
                catalogue=policy.catalogue,
                allowance=policy.settings.allowance,
                declared=frozenset(n.pool for n in declared),
                min_values=policy.settings.min_values_policy != "BestEffort",
            )
            _sized = sized = (policy, live, sizing)
        sizing = sized[2]
        unbounded = list(sizing.unbounded)
        added = list(sizing.nodes)
        # Per snapshot: a node of a nap-... pool shows GKE may create more.
        nap = auto_provisioning(
            [shape.labels for shape in view.snapshot.shapes],
            catalogue=policy.catalogue,
            allowance=policy.settings.allowance,
            declared=frozenset(n.pool for n in declared),
        )
        if nap is not None:
            added.extend(nap[1])
            unbounded.append(nap[2])
        combined = combined.with_nodes(added, unbounded=unbounded)
    _with_pools = (view.snapshot, policy, live, combined)
    return combined


def evaluate(request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
    """The decision for one review, its CEL selectors within one budget
    (``celbudget.review_budget``): past it they are reported as not evaluated."""
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
            request, policy=policy, view=inventory, snapshot=_inventory(inventory, policy)
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
        return _pod_update(request, templates[0], policy=policy, inventory=inventory)
    decision = _evaluate_object(request, templates, policy=policy, inventory=inventory)
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
    without = _evaluate_object(
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
        pod, claims = _asks(request, template, settings=policy.settings, view=inventory)
        for rule in _matching_rules(request, template, pod, policy, claims):
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
            _strip_spec(spec, wanted)
    return doc


def _strip_spec(spec: dict[str, Any], wanted: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``spec`` (changed in place) without the requirements ``wanted`` in its required node
    affinity: terms left empty are dropped, and the requirement with them when no term is
    left."""
    affinity = lookup(spec, ("affinity", "nodeAffinity"))
    required = affinity.get(_REQUIRED) if isinstance(affinity, dict) else None
    if not isinstance(affinity, dict) or not isinstance(required, dict):
        return spec
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        return spec
    kept = []
    for term in terms:
        exprs = term.get("matchExpressions") if isinstance(term, dict) else None
        if not isinstance(exprs, list):
            kept.append(term)
            continue
        left = [e for e in exprs if e not in wanted]
        if left or term.get("matchFields"):
            kept.append(
                {**term, "matchExpressions": left}
                if left
                else {k: v for k, v in term.items() if k != "matchExpressions"}
            )
    if kept:
        required["nodeSelectorTerms"] = kept
    else:
        del affinity[_REQUIRED]
    return spec


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


def _evaluate_object(
    request: Request,
    templates: list[PodTemplate],
    *,
    policy: Policy,
    inventory: InventoryView,
    mutate: bool = True,
    snapshot_of: Policy | None = None,
) -> Decision:
    """Every template of one object, then the workload's totals. ``mutate`` False judges
    the object as it is, for an update that cannot be mutated (a Pod's). ``snapshot_of``:
    the policy whose node pools build the snapshot (a variant of it shares its memo)."""
    obj = request.object
    snapshot = _inventory(inventory, snapshot_of or policy)
    kind = str(obj.get("kind", ""))
    # The one per-node kind (workloads.BUILTIN_KINDS).
    daemon = kind == "DaemonSet" and str(obj.get("apiVersion", "")).startswith("apps/")
    context = _Context(kind, daemon, inventory.runtime_classes, [])
    editor = Editor(obj)
    findings: list[Finding] = []
    mutated_by: dict[str, None] = {}
    notices: list[str] = []
    per_pod: list[tuple[PodTemplate, PodGPUs]] = []
    asked: list[PodClaims] = []
    workload = bool(templates[0].path)  # a Pod's one template is the object itself
    # On a workload UPDATE: what the old object asked for in all, and every template's ask
    # now (unchanged ones too), for the totals that replicas and parallelism change.
    floor = _old_totals(request, policy, inventory) if workload else None
    counted: list[tuple[PodTemplate, PodGPUs]] = []
    counted_claims: list[PodClaims] = []
    # Issue 26: each judged template's ask and fit, for gangs and quotas.
    judged: list[tuple[PodTemplate, PodGPUs, PodClaims, FitAnswer | None]] = []
    for template in templates:
        if _unchanged(request, template):
            if floor is not None:
                pod, claims = _asks(request, template, settings=policy.settings, view=inventory)
                counted.append((template, pod))
                counted_claims.append(claims)
            continue
        pod, claims, fit = _evaluate_template(
            request,
            template,
            policy=policy,
            snapshot=snapshot,
            view=inventory,
            editor=editor,
            findings=findings,
            context=context,
            mutated_by=mutated_by,
            mutate=mutate,
        )
        per_pod.append((template, pod))
        asked.append(claims)
        if floor is not None:
            counted.append((template, pod))
            counted_claims.append(claims)
        judged.append((template, pod, claims, fit))
        if claims.claims and not inventory.problem:
            devices = inventory.devices
            if devices is None or not devices.complete:
                notices.append("DRA claims not checked: no DRA inventory (classes and slices)")
    warnings: list[str] = []
    if _asks_anything(per_pod):
        if inventory.problem:
            _inventory_unavailable(inventory.problem, policy, findings, warnings)
        elif snapshot is None:
            notices.append(NO_INVENTORY_NOTICE)
        elif workload and floor is None:
            findings.extend(_workload_findings(per_pod, asked, snapshot, policy, inventory))
    if floor is not None:
        # An UPDATE is judged on the totals it raises: a Deployment scaled from 1 to 100
        # replicas, a Job's parallelism; a total it leaves or lowers was judged before.
        if snapshot is not None and any(p.total for _, p in counted):
            findings.extend(
                _workload_findings(
                    counted, counted_claims, snapshot, policy, inventory, floor=floor
                )
            )
        findings.extend(
            _workload_rule_findings(request, counted, policy, counted_claims, floor=floor)
        )
    elif workload:
        findings.extend(_workload_rule_findings(request, per_pod, policy, asked))
    # On a create only: an update of an unchanged template is not judged again.
    if len(judged) == len(templates) and floor is None and not inventory.problem:
        _after_admission(
            request,
            judged,
            snapshot=snapshot,
            quotas=inventory.quotas,
            devices=inventory.usable_devices,
            policy=policy,
            findings=findings,
            notices=notices,
        )
    return decide(
        findings,
        patch=editor.ops,
        mutated=editor.doc,
        notices=tuple(dict.fromkeys([*notices, *context.notices]))
        if notices or context.notices
        else (),
        extra_warnings=warnings,
        mutated_by=list(mutated_by),
    )


def _asks_anything(per_pod: list[tuple[PodTemplate, PodGPUs]]) -> bool:
    """Some template asks for GPUs or has a quantity problem (a loop: runs every review)."""
    for _, pod in per_pod:  # noqa: SIM110 - a generator costs more
        if pod.total or pod.problems:
            return True
    return False


def _gang_unsure(
    fits: list[tuple[PodTemplate, FitAnswer]], snapshot: Inventory, settings: Settings
) -> str:
    """What may bring nodes a gang's count cannot see: a proof then warns, never a guess."""
    if snapshot.unbounded:
        return "a node pool of unknown size may bring the nodes it needs"
    if not settings.min_values_policy and any(min_values_only(fit) for _, fit in fits):
        return (
            "a pool's minValues keeps its nodes out of the count, and Karpenter launches them "
            "under --min-values-policy BestEffort, a flag the webhook cannot see (declare "
            "GPUSettings.minValuesPolicy to have this judged)"
        )
    return ""


def _after_admission(
    request: Request,
    judged: list[tuple[PodTemplate, PodGPUs, PodClaims, FitAnswer | None]],
    *,
    snapshot: Inventory | None,
    quotas: Quotas | None,
    devices: DeviceInventory | None,
    policy: Policy,
    findings: list[Finding],
    notices: list[str],
) -> None:
    """Issue 26: gangs that cannot run at once, and GPU quota."""
    fits = [(t, fit) for t, _, _, fit in judged if fit is not None]
    if fits and snapshot is not None and may_be_gang(request.object, fits):
        # Templates whose GPUs come from DRA claims: their gang is counted from the devices.
        by_devices = {
            id(t): found
            for t, _, claims, fit in judged
            if fit is not None and (found := pod_devices(claims, devices)) is not None
        }
        action = policy.settings.actions.get("gangFit", "deny")
        unsure = _gang_unsure(fits, snapshot, policy.settings)
        findings.extend(
            gang_findings(request.object, fits, action=action, devices=by_devices, unsure=unsure)
        )
    if quotas is not None:
        asked = [(t, pod, claims) for t, pod, claims, _ in judged]
        workload = bool(asked) and bool(asked[0][0].path)
        _quota(
            request,
            asked,
            quotas,
            policy=policy,
            findings=findings,
            notices=notices,
            workload=workload,
        )


def _quota(
    request: Request,
    asked: list[tuple[PodTemplate, PodGPUs, PodClaims]],
    quotas: Quotas,
    *,
    policy: Policy,
    findings: list[Finding],
    notices: list[str],
    workload: bool,
) -> None:
    namespace = request.effective_namespace
    if workload:
        counted = [a for a in asked if a[0].replicas is not None]
        action = policy.settings.actions.get("gpuQuota", "warn")
        findings.extend(workload_quota_findings(namespace, counted, quotas, action=action))
    elif request.operation == "CREATE" and not _admitted(request.object):
        notices.extend(pod_quota_notices(namespace, asked, quotas))


def _admitted(obj: Any) -> bool:
    """A pod that is bound or has a status was admitted already: its GPUs are in the
    quota's ``used`` (an audit of live pods must not call them refused)."""
    spec, status = obj.get("spec"), obj.get("status")
    return (isinstance(spec, dict) and bool(spec.get("nodeName"))) or bool(status)


@dataclass(slots=True)
class _Context:
    """What every template of one object shares."""

    kind: str
    daemon: bool
    runtime_classes: frozenset[str] | None
    notices: list[str] = field(default_factory=list)


def _repair_requests_only(
    editor: Editor, spec_path: WorkloadPath, pod: PodGPUs
) -> Iterator[Finding]:
    """Copy a GPU request into limits (GPUSettings ``repair``), saying so as a warning."""
    for container, problem in pod.problems:
        if problem.check == "requestsWithoutLimits":
            repair_requests_only(editor, spec_path, container, problem.resource)
            yield Finding(
                "builtin",
                "requestsWithoutLimits",
                "warn",
                f'container "{container.name}" requested {problem.resource} without a '
                "limit; the request was copied into limits. Set the limit yourself.",
                f'container "{container.name}": {problem.resource} limit set from request',
                ".".join(map(str, (*spec_path, *container.path))),
            )


def _places_access(mutations: Mutations) -> bool:
    return mutations.runtime_class is not None or mutations.avoid_gpu_nodes is not None


def _credit(
    editor: Editor, before: int, mutated_by: dict[str, None], rules: Iterable[Rule]
) -> None:
    """Name ``rules`` as mutators when patch operations were added since ``before`` (for
    the log line). A plain call: a context manager costs about a microsecond per use, and
    a typical pod passes through several."""
    if len(editor.ops) > before:
        for rule in rules:
            mutated_by[f"{rule.name}/mutate"] = None


def _unchanged(request: Request, template: PodTemplate) -> bool:
    """On a workload UPDATE, a template equal to the old one is not judged again: an
    unrelated update of an old object must not be blocked by a rule added since. (A Pod
    UPDATE is judged by ``_pod_update``.)"""
    if request.operation != "UPDATE" or request.old_object is None or not template.path:
        return False
    return bool(lookup(request.old_object, template.path) == template.template)


def _as_created(request: Request, obj: Mapping[str, Any]) -> Request:
    return Request(
        obj,
        namespace=request.namespace,
        namespace_labels=request.namespace_labels,
        now=request.now,
    )


def _pod_update(
    request: Request, template: PodTemplate, *, policy: Policy, inventory: InventoryView
) -> Decision:
    """A Pod UPDATE, judged on what it changes (``updates``): the new pod and the old one
    are judged as they are, unmutated (an update can change almost nothing of a pod), and
    only findings the old pod did not have count. Never a patch: most of a pod's spec is
    immutable, and the API server would refuse the whole update."""
    obj, old = request.object, request.old_object
    if request.sub_resource == "ephemeralcontainers":
        return _ephemeral_update(request, template, policy=policy, inventory=inventory)
    if request.sub_resource == RESIZE:
        return _resize_update(request, policy=policy, inventory=inventory)
    if not isinstance(old, dict):
        old = None
    if old is not None and not judged_fields_changed(obj, old):
        return Decision(allowed=True, mutated=obj)
    if old is not None and _only_metadata_no_one_reads(obj, old, policy):
        return Decision(allowed=True, mutated=obj)
    judged = placed_as_before(obj, old) if old is not None else obj
    after = _evaluate_object(
        _as_created(request, judged),
        [PodTemplate(path=(), template=judged, replicas=None)],
        policy=policy,
        inventory=inventory,
        mutate=False,
    )
    before: tuple[Finding, ...] = ()
    if old is not None:
        before = _evaluate_object(
            _as_created(request, old),
            [PodTemplate(path=(), template=old, replicas=None)],
            policy=policy,
            inventory=inventory,
            mutate=False,
        ).findings
    said = {f.warning for f in after.findings}
    return decide(
        fresh_findings(before, after.findings),
        patch=(),
        mutated=obj,
        notices=after.notices,
        extra_warnings=[w for w in after.warnings if w not in said],
    )


def _resize_update(request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
    """``pods/resize``: the new containers' memory limits against the limits the memory
    rules would set on the resized pod (``resize``); nothing else changes in a resize, and
    it is never patched (the API server takes only resources through this subresource)."""
    obj, old = request.object, request.old_object
    memory_rules = [r for r in policy.rules if r.mutations.memory_limit is not None]
    if not isinstance(old, dict) or not memory_rules:
        return Decision(allowed=True, mutated=obj)
    bare = stripped(obj)
    ruled = _evaluate_object(
        _as_created(request, bare),
        [PodTemplate(path=(), template=bare, replicas=None)],
        policy=policy,
        inventory=inventory,
    )
    setters = [r for r in memory_rules if f"{r.name}/mutate" in ruled.mutated_by]
    found = resize_findings(obj, old, ruled.mutated or bare, setters)
    return decide(found, patch=(), mutated=obj)


def _only_metadata_no_one_reads(
    obj: Mapping[str, Any], old: Mapping[str, Any], policy: Policy
) -> bool:
    """A label or annotation edit that neither a rule's pod selector nor any container's
    env reads: the common pod update, spared two evaluations."""
    spec = obj.get("spec")
    if spec != old.get("spec") or not isinstance(spec, dict):
        return False
    return not env_reads_metadata(spec) and not any(r.match.pod_selector for r in policy.rules)


def _ephemeral_update(
    request: Request, template: PodTemplate, *, policy: Policy, inventory: InventoryView
) -> Decision:
    """``pods/ephemeralcontainers`` (``kubectl debug``): the new ephemeral containers,
    judged like containers that ask for no GPU (an ephemeral container may not have
    resources, ``validateEphemeralContainers``), in the pod where they run, and hidden from
    GPUs as the pod's other containers would be. Only a new container's env is patched:
    the API server refuses changes to anything else through this subresource."""
    obj = request.object
    added = added_ephemeral_containers(obj, request.old_object)
    if not added:
        return Decision(allowed=True, mutated=obj)
    settings = policy.settings
    snapshot = _inventory(inventory, policy)
    pod, claims = _asks(request, template, settings=settings, view=inventory)
    rules = _matching_rules(request, template, pod, policy, claims) if policy.rules else []
    ephemeral = PodGPUs.of(
        [
            Container("ephemeralContainers", index, str(body.get("name", "")), body, False)
            for index, body in added
        ],
        {},
    )
    access = Template(
        spec_path=template.spec_path,
        template=template,
        pod=ephemeral,
        exempt=exemptions(rules),
        daemon=False,
        asks=pod_asks_for_gpu(pod),
    )
    spec = template.spec
    devices = inventory.usable_devices
    reach = _running_reach(spec, settings=settings, snapshot=snapshot, devices=devices)
    editor = Editor(obj)
    mutated_by: dict[str, None] = {}
    hiding = [r for r in rules if _hides(r.mutations, asks=access.asks, reach=reach)]
    if hiding and "hideGPUs" not in access.exempt:
        before = len(editor.ops)
        hide_gpus(editor, access.spec_path, ephemeral)
        _credit(editor, before, mutated_by, hiding)
    findings = access_findings(
        editor,
        access,
        settings=settings,
        reach=reach,
        rules=policy.rules,
        nvidia_classes=inventory.nvidia_runtime_classes,
    )
    return decide(findings, patch=editor.ops, mutated=editor.doc, mutated_by=list(mutated_by))


def _running_reach(
    spec: Mapping[str, Any],
    *,
    settings: Settings,
    snapshot: Inventory | None,
    devices: DeviceInventory | None,
) -> PodReach:
    """Where a running pod is: its node, when the inventory holds it; else where its
    placement lets it land, as on CREATE."""
    node = spec.get("nodeName")
    if snapshot is not None and isinstance(node, str) and node:
        known = bound_node_reach(
            node,
            snapshot,
            nodes=settings.gpu_nodes,
            resources=settings.gpu_resources,
            dra=dra_gpus(settings, devices),
        )
        if known is not None:
            return PodReach.known(known, spec, settings=settings)
    placement = Placement.of(spec)
    return PodReach(spec, placement, settings=settings, inventory=snapshot, devices=devices)


def _hides(mutations: Mutations, *, asks: bool, reach: PodReach) -> bool:
    """Whether a rule's ``hideGPUsFromNonGPUContainers`` covers a pod's non-GPU containers."""
    if mutations.hide_gpus == "gpuPods":
        return asks
    return mutations.hide_gpus == "gpuNodes" and (asks or reach.value.can_land)


def _matching_rules(
    request: Request, template: PodTemplate, pod: PodGPUs, policy: Policy, claims: PodClaims
) -> list[Rule]:
    namespace = request.effective_namespace
    labels = template.labels
    resources = pod.resources
    total = pod.total
    device_classes = claims.gpu_classes
    return [
        rule
        for rule in policy.rules
        if rule.match.matches(
            namespace=namespace,
            namespace_labels=request.namespace_labels,
            pod_labels=labels,
            resources=resources,
            gpu_count=total,
            device_classes=device_classes,
        )
    ]


def _asks(
    request: Request,
    template: PodTemplate,
    *,
    settings: Settings,
    view: InventoryView,
) -> tuple[PodGPUs, PodClaims]:
    """What the template asks of GPUs: resources per container, and DRA claims."""
    devices = view.devices
    # With the names and classes that serve GPUs (KEP-5004).
    gpus, is_gpu_class = gpu_names(
        settings.gpu_resources, is_gpu_class=settings.gpu_device_classes, devices=devices
    )
    spec = template.spec
    pod = pod_gpus(spec, gpus, template.singles)
    claims = (
        pod_claims(
            spec,
            namespace=request.effective_namespace,
            devices=devices,
            is_gpu_class=is_gpu_class,
        )
        if spec.get("resourceClaims")
        else NO_CLAIMS
    )
    pod, claims = extended_resource_claims(pod, claims, devices=view.devices)
    return with_claim_gpus(pod, claims), claims


def _mutate_containers(
    editor: Editor,
    access: Template,
    rules: Sequence[Rule],
    claims: PodClaims,
    *,
    snapshot: Inventory | None,
    mutated_by: dict[str, None],
    settings: Settings,
    devices: DeviceInventory | None = None,
) -> list[Finding]:
    """Each matching rule's container mutations, less what the pod is exempt from."""
    findings: list[Finding] = []
    exempt = access.exempt
    fits = _claims_fit(claims, snapshot=snapshot, devices=devices, settings=settings)
    for rule in rules:
        if not rule.mutations.changes_containers:
            continue
        mutations = without_exempt(rule.mutations, exempt) if exempt else rule.mutations
        before = len(editor.ops)
        findings.extend(
            apply_containers(
                editor,
                access.spec_path,
                access.pod,
                mutations,
                inventory=snapshot,
                rule=rule.name,
                gpus=settings.gpu_resources,
                claims=claims,
                refusal=settings.device_plugin,
                claims_fit=fits,
            )
        )
        _credit(editor, before, mutated_by, (rule,))
    return findings


def _claims_fit(
    claims: PodClaims,
    *,
    snapshot: Inventory | None,
    devices: DeviceInventory | None,
    settings: Settings,
) -> ClaimsFit | None:
    """Whether the pod with a request vector fits one node with its GPU claims and the
    GPU resources a class serves, as the ``deviceClaims`` check judges it (healed nodes):
    the memory limits a rule adds stay within the nodes that hold the pod's devices."""
    if snapshot is None or devices is None or not (claims.gpu_count or claims.served):
        return None

    def fits(demand: Demand, placement: Placement) -> bool | None:
        return _whole_fits(
            claims,
            demand,
            placement,
            snapshot=snapshot,
            devices=devices,
            refusal=settings.device_plugin,
        )

    return fits


def _whole_fits(
    claims: PodClaims,
    demand: Demand,
    placement: Placement,
    *,
    snapshot: Inventory,
    devices: DeviceInventory,
    refusal: SlotRefusal,
) -> bool | None:
    """Whether one node takes the whole pod, on the nodes as they are once healed (as the
    ``deviceClaims`` check judges it); None where the claims are not judged there."""
    answer = whole_pod_answer(
        claims,
        demand=demand,
        placement=placement.healed(),
        nodes=snapshot,
        devices=devices,
        refusal=refusal,
    )
    return None if answer is None else answer.fits


def _mutate(
    editor: Editor,
    access: Template,
    rules: Sequence[Rule],
    claims: PodClaims,
    *,
    places_access: bool,
    snapshot: Inventory | None,
    mutated_by: dict[str, None],
    settings: Settings,
    findings: list[Finding],
    devices: DeviceInventory | None = None,
) -> None:
    """Placement for access, repaired requests and container mutations, in that order."""
    if places_access:
        before = len(editor.ops)
        findings.extend(
            place(editor, access, rules, settings=settings, inventory=snapshot, devices=devices)
        )
        _credit(editor, before, mutated_by, (r for r in rules if _places_access(r.mutations)))
    if settings.actions.get("requestsWithoutLimits") == "repair":
        findings.extend(_repair_requests_only(editor, access.spec_path, access.pod))
    findings.extend(
        _mutate_containers(
            editor,
            access,
            rules,
            claims,
            snapshot=snapshot,
            mutated_by=mutated_by,
            settings=settings,
            devices=devices,
        )
    )


def _evaluate_template(
    request: Request,
    template: PodTemplate,
    *,
    policy: Policy,
    snapshot: Inventory | None,
    view: InventoryView,
    editor: Editor,
    findings: list[Finding],
    context: _Context,
    mutated_by: dict[str, None],
    mutate: bool = True,
) -> tuple[PodGPUs, PodClaims, FitAnswer | None]:
    settings = policy.settings
    spec_path = template.spec_path
    pod, claims = _asks(request, template, settings=settings, view=view)
    devices = view.usable_devices
    if not isinstance(editor.get(spec_path), dict):
        return pod, claims, None  # an ill-typed spec: the API server's schema check rejects it
    rules = _matching_rules(request, template, pod, policy, claims) if policy.rules else []
    places_access, hiding, exempting = _rule_placements(
        editor,
        spec_path,
        rules,
        pod=pod,
        claims=claims,
        snapshot=snapshot,
        devices=devices,
        settings=settings,
        mutated_by=mutated_by,
        findings=findings,
        mutate=mutate,
    )
    # Built by position here, on every review: a keyword call costs twice as much.
    access = Template(
        spec_path,
        template,
        pod,
        exemptions(rules) if exempting else NO_EXEMPTIONS,
        context.daemon,
        pod_asks_for_gpu(pod),
    )
    if mutate:
        _mutate(
            editor,
            access,
            rules,
            claims,
            places_access=places_access,
            snapshot=snapshot,
            mutated_by=mutated_by,
            settings=settings,
            findings=findings,
            devices=devices,
        )
    # Container mutations and hiding leave the placement as it is: read it once.
    spec = editor.get(spec_path)
    placement = Placement.of(spec)
    fit = None
    refused = None
    if snapshot is not None and pod.total:
        placement, fit, refused = _fit(
            editor,
            spec_path,
            pod,
            spec=spec,
            placement=placement,
            snapshot=snapshot,
            settings=settings,
            mutated_by=mutated_by,
            mutate=mutate,
            claims=claims,
            devices=devices,
        )
    reach = PodReach(editor.get(spec_path), placement, settings, snapshot, devices)
    if hiding and not mutate:
        findings.extend(
            unhidden_findings(
                editor, access, rules, settings=settings, reach=reach, claim_holders=claims.holders
            )
        )
    elif hiding:
        before = len(editor.ops)
        hide_on_gpu_nodes(editor, access, reach=reach)
        _credit(editor, before, mutated_by, hiding)
    spec = editor.get(spec_path)
    where, labels = _where(spec_path), template.labels
    scope = Scope(
        where,
        spec,
        labels,
        pod,
        placement,
        settings,
        fit,
        context.kind,
        devices,
        bool(claims.gpu_classes),
        claims if claims.held else None,
    )
    findings.extend(_gpu_findings(scope, snapshot))
    if refused is not None:
        findings.append(refused)
    if scope.fit is not None and scope.fit.fitting and drivers_known(scope.fit):
        findings.extend(_cuda(editor, scope, access, mutated_by, mutate=mutate))
        context.notices.extend(cuda_notices(scope.pod, settings, scope.fit))
    if claims.claims or claims.gpu_classes:
        findings.extend(
            _claims_findings(claims, scope, access, snapshot=snapshot, view=view, context=context)
        )
    for rule in rules:
        if rule.checks:
            findings.extend(rule_findings(scope, rule, inventory=snapshot))
    if claims.claims:  # both steps read claims' devices: none, nothing to judge
        units = _claim_units(
            claims, rules, scope=scope, snapshot=snapshot, view=view, found=findings
        )
        if rules:
            findings.extend(
                _device_policy(request, claims, rules, scope=scope, snapshot=snapshot, view=view)
            )
        findings.extend(units)
    findings.extend(
        access_findings(
            editor,
            access,
            settings=settings,
            reach=reach,
            rules=policy.rules,
            nvidia_classes=view.nvidia_runtime_classes,
        )
    )
    if not access.asks:
        live = snapshot is not None
        findings.extend(
            node_findings(editor, access, settings=settings, pod_reach=reach, live=live)
        )
    if context.runtime_classes is not None:
        known = context.runtime_classes
        findings.extend(
            runtime_class_findings(editor, access, rules, settings=settings, known=known)
        )
    return pod, claims, scope.fit


def _rule_placements(
    editor: Editor,
    spec_path: WorkloadPath,
    rules: Sequence[Rule],
    *,
    pod: PodGPUs,
    claims: PodClaims,
    snapshot: Inventory | None,
    devices: DeviceInventory | None,
    settings: Settings,
    mutated_by: dict[str, None],
    findings: list[Finding],
    mutate: bool,
) -> tuple[bool, list[Rule], bool]:
    """Each rule's tolerations and node affinity (unless the object is judged as it is);
    and whether some rule places the pod for access, the rules that hide GPUs on GPU nodes,
    and whether some rule exempts."""
    places_access = exempting = False
    hiding: list[Rule] = []
    for rule in rules:
        mutations = rule.mutations
        if mutate and mutations.places:
            if not mutations.required_affinity:
                # The common case, as _place_rule starts: no affinity to judge on DRA nodes.
                before = len(editor.ops)
                apply_placement(editor, spec_path, mutations)
                _credit(editor, before, mutated_by, (rule,))
            else:
                findings.extend(
                    _place_rule(
                        editor,
                        spec_path,
                        rule,
                        pod=pod,
                        claims=claims,
                        snapshot=snapshot,
                        devices=devices,
                        settings=settings,
                        mutated_by=mutated_by,
                    )
                )
        if mutations.runtime_class is not None or mutations.avoid_gpu_nodes is not None:
            places_access = True
        if mutations.hide_gpus == "gpuNodes":
            hiding.append(rule)
        exempting = exempting or bool(rule.exempt)
    return places_access, hiding, exempting


# Template paths as findings name them ("spec", "spec.template.spec"): a few per cluster.
_WHERE: dict[WorkloadPath, str] = {}


def _where(spec_path: WorkloadPath) -> str:
    where = _WHERE.get(spec_path)
    if where is None:
        where = ".".join(map(str, spec_path))
        if len(_WHERE) < 1024:
            _WHERE[spec_path] = where
    return where


def _device_policy(
    request: Request,
    claims: PodClaims,
    rules: Sequence[Rule],
    *,
    scope: Scope,
    snapshot: Inventory | None,
    view: InventoryView,
) -> list[Finding]:
    """Rules keyed on GPU labels, held on the devices the pod's claims may get."""
    devices = view.devices
    if not claims.claims or not rules or devices is None or view.problem:
        return []
    # As device_policy_findings, which finds nothing then: no complete DRA inventory, no
    # device in it to hold a rule to (every device is a slice's), or no rule read on devices.
    if not devices.complete or not devices.device_count:
        return []
    if not any(_holds_devices(rule) for rule in rules):
        return []
    containers = tuple(c.name for c in scope.pod.containers)
    # Pods of one workload, and replicas created one after another, ask alike: once per
    # snapshot, node inventory and rules (held in the snapshot's memo, as the fit is).
    key = (
        "device-policy",
        scope.placement.key(),
        tuple(
            (c.name, c.source, c.counted, c.gpu_requests)
            + (
                ()
                if c.claim is None
                else (c.claim.spec, c.claim.allocated, repr(c.claim.allocation_terms))
            )
            for c in claims.claims
        ),
        request.effective_namespace,
        scope.where,
        containers,
    )
    memo = devices._memo
    known = memo.get(key)
    if (
        known is not None
        and known[0] is snapshot
        and len(known[1]) == len(rules)
        and all(a is b for a, b in zip(known[1], rules, strict=True))
    ):
        return list(known[2])
    held = device_rules(rules)
    found = (
        list(
            device_policy_findings(
                claims,
                held,
                placement=scope.placement,
                nodes=snapshot,
                devices=devices,
                namespace=request.effective_namespace,
                where=scope.where,
                containers=containers,
            )
        )
        if held
        else []
    )
    if len(memo) >= 4096:
        memo.clear()
    memo[key] = (snapshot, tuple(rules), tuple(found))
    return found


def _claim_units(
    claims: PodClaims,
    rules: Sequence[Rule],
    *,
    scope: Scope,
    snapshot: Inventory | None,
    view: InventoryView,
    found: Sequence[Finding],
) -> list[Finding]:
    """``maxSharedGPUs`` and ``multipleMIGDevices`` read on the devices the pod's claims
    may get; a check the pod's resources already broke by name is said once."""
    devices = view.devices
    if not claims.claims or devices is None or view.problem:
        return []
    said = {(f.rule, f.check) for f in found}
    units = claim_units(claims, placement=scope.placement, nodes=snapshot, devices=devices)
    return [f for f in claim_unit_findings(scope, units, rules) if (f.rule, f.check) not in said]


# Whether a rule reads devices (``device_rules``), by the identity of the immutable rule.
_DEVICE_RULES: dict[int, tuple[Rule, bool]] = {}


def _holds_devices(rule: Rule) -> bool:
    hit = _DEVICE_RULES.get(id(rule))
    if hit is not None and hit[0] is rule:
        return hit[1]
    held = bool(device_rules([rule]))
    if len(_DEVICE_RULES) >= 4096:
        _DEVICE_RULES.clear()
    _DEVICE_RULES[id(rule)] = (rule, held)
    return held


def _place_rule(
    editor: Editor,
    spec_path: WorkloadPath,
    rule: Rule,
    *,
    pod: PodGPUs,
    claims: PodClaims,
    snapshot: Inventory | None,
    devices: DeviceInventory | None,
    settings: Settings,
    mutated_by: dict[str, None],
) -> list[Finding]:
    """The rule's tolerations and node affinity; a required affinity on GPU labels is first
    judged with and without it (``devicepolicy.affinity_plan``): the webhook never adds an
    affinity that only shuts out DRA nodes, whose GPUs no label describes (issue 31)."""
    before = len(editor.ops)
    mutations = rule.mutations
    keyed = [r for r in mutations.required_affinity if is_device_label(str(r.get("key")))]
    if not keyed or snapshot is None or devices is None or not devices.complete or not pod.total:
        apply_placement(editor, spec_path, mutations)
        _credit(editor, before, mutated_by, (rule,))
        return []
    add_tolerations(editor, spec_path, mutations.tolerations)
    others = [r for r in mutations.required_affinity if r not in keyed]
    if others:
        add_required_affinity(editor, spec_path, others)
    _, is_gpu_class = gpu_names(
        settings.gpu_resources, is_gpu_class=settings.gpu_device_classes, devices=devices
    )
    holds = gpu_devices(devices, is_gpu_class).holds
    served = {resource for resource, _ in claims.served}
    explicit = any(c.counted and c.gpu_count for c in claims.claims)
    wanted = {name for name, _ in pod.vector} | served

    def plugin_node(node: Node) -> bool:
        return any(node.allocatable.get(name, 0) > 0 for name in wanted)

    def dra_node(node: Node) -> bool:
        from_slices = explicit or any(not node.allocatable.get(name) for name in served)
        return from_slices and holds(node)

    # Judged without this rule's requirements (and the alternative it adds) where the pod
    # carries them already: a pod applied with its own patch gets the same plan.
    absent = [{"key": r["key"], "operator": "DoesNotExist"} for r in keyed]
    bare = Placement.of(_strip_spec(copy.deepcopy(editor.get(spec_path)), [*keyed, *absent]))
    served_classes = [c for _, c in claims.served]
    asked = asked_gpus(pod.vector, claims)
    # Where the pod could land and fit with the rule aside: its GPUs there, and its cpu and
    # memory as the pod asks them now (container rules may raise them later, never lower).
    cpu, memory = pod_requests(editor.get(spec_path), pod.containers)

    def planned() -> AffinityPlan:  # on a miss of the plan's memo only
        on_devices = device_rules([rule])
        unrestricted = holds_gpus(devices, served_classes, asked, dra_node=dra_node)

        def lands(node: Node) -> bool:
            return unrestricted(node) and not shortfalls(
                node.allocatable, NO_GPU_FACTS, Demand((), cpu, memory)
            )

        return affinity_plan(
            keyed,
            placement=bare,
            nodes=snapshot,
            dra_node=dra_node,
            plugin_node=plugin_node,
            refused_on=refuses_devices(devices, served_classes, on_devices, lands=lands)
            if claims.served and not explicit
            else None,
            holds=holds_gpus(devices, served_classes, asked, dra_node=dra_node, rules=on_devices),
        )

    plan = remembered_plan(
        devices,
        snapshot,
        (bare.key(), explicit, asked, tuple(sorted(wanted)), tuple(served_classes), cpu, memory),
        rule,
        planned,
    )
    if plan.verdict == "orUnlabelled":
        add_required_affinity_or_absent(editor, spec_path, keyed)
    elif plan.verdict != "skip":
        add_required_affinity(editor, spec_path, keyed)
    preferred = mutations.preferred_affinity
    if plan.verdict == "skip":  # a preference on labels no GPU node carries says nothing
        preferred = tuple(
            p
            for p in preferred
            if not any(is_device_label(str(e.get("key"))) for e in p.get("matchExpressions") or [])
        )
    if preferred:
        add_preferred_affinity(editor, spec_path, preferred)
    _credit(editor, before, mutated_by, (rule,))
    finding = affinity_finding(rule.name, plan, ".".join(map(str, spec_path)))
    return [finding] if finding is not None else []


def _cuda(
    editor: Editor,
    scope: Scope,
    access: Template,
    mutated_by: dict[str, None],
    *,
    mutate: bool,
) -> list[Finding]:
    """The cudaDriver check, and its affinity (credited for the log line) unless the
    object is judged as it is (``mutate`` False: a Pod's update)."""
    if scope.fit is None:
        return []
    needs = gpu_needs(scope.pod, scope.settings)
    if not needs:
        return []
    before = len(editor.ops)
    found = cuda_findings(
        editor,
        access.spec_path,
        needs=needs,
        fit=scope.fit,
        settings=scope.settings,
        exempt=access.exempt if mutate else access.exempt | {"cudaAffinity"},
        where=scope.where,
    )
    if len(editor.ops) > before:
        mutated_by["builtin/cudaAffinity"] = None
    return found


def _fit(
    editor: Editor,
    spec_path: WorkloadPath,
    pod: PodGPUs,
    *,
    spec: Mapping[str, Any],
    placement: Placement,
    snapshot: Inventory,
    settings: Settings,
    mutated_by: dict[str, None],
    mutate: bool,
    claims: PodClaims,
    devices: DeviceInventory | None,
) -> tuple[Placement, FitAnswer, Finding | None]:
    """Where the pod's whole request fits; when some nodes it can land on would fail it at
    the device plugin and others would not, it is first kept off the former (issue 21), unless
    the object may not be patched (a Pod UPDATE). With the warning that it may still land on
    such nodes, where a device class serves its GPUs (``_served_fit``)."""
    demand = demand_of(spec, pod.vector, pod.per_container, pod.containers)
    fit = snapshot.fit(placement, demand, settings.device_plugin)
    if claims.served:
        return _served_fit(
            editor,
            spec_path,
            claims,
            fit,
            snapshot=snapshot,
            devices=devices,
            settings=settings,
            mutated_by=mutated_by,
            mutate=mutate,
        )
    if mutate and fit.fitting and fit.refused and settings.keep_off_refusing_nodes:
        before = len(editor.ops)
        keep_off_refusing_nodes(editor, spec_path, fit)
        if len(editor.ops) > before:
            mutated_by["builtin/keepOffRefusingNodes"] = None
            placement = Placement.of(editor.get(spec_path))
            fit = snapshot.fit(placement, demand, settings.device_plugin)
    return placement, fit, None


def _served_fit(
    editor: Editor,
    spec_path: WorkloadPath,
    claims: PodClaims,
    fit: FitAnswer,
    *,
    snapshot: Inventory,
    devices: DeviceInventory | None,
    settings: Settings,
    mutated_by: dict[str, None],
    mutate: bool,
) -> tuple[Placement, FitAnswer, Finding | None]:
    """The keep-off where a device class serves the pod's GPU resources (KEP-5004): they are
    out of ``fit``'s vector, held as claims, but on a node whose allocatable has them the
    device plugin serves them (``filterExtendedResources``), and may fail a container of
    the pod there. Those nodes are judged with the served amounts (``plugin_fit``); the
    affinity that keeps the pod off them is added only where the pod, so patched, still
    has a node that takes it all (``whole_pod_answer``): never a denial of the webhook's
    own making. Where it may still land on them, a ``sharedGPURequest`` warning says so."""
    placement, demand, refusal = fit.placement, fit.demand, settings.device_plugin
    plugin = plugin_fit(claims, demand=demand, placement=placement, nodes=snapshot, refusal=refusal)
    if not plugin.refused:
        return placement, fit, None
    if mutate and fit.fitting and settings.keep_off_refusing_nodes:
        scratch = Editor(editor.get(spec_path))
        keep_off_refusing_nodes(scratch, (), plugin)
        patched = Placement.of(scratch.doc)
        refit = snapshot.fit(patched, demand, refusal)
        if scratch.ops and refit.fitting and _lands(claims, refit, snapshot, devices, refusal):
            keep_off_refusing_nodes(editor, spec_path, plugin)
            mutated_by["builtin/keepOffRefusingNodes"] = None
            placement, fit = Placement.of(editor.get(spec_path)), refit
            plugin = plugin_fit(
                claims, demand=demand, placement=placement, nodes=snapshot, refusal=refusal
            )
    if not plugin.refused or not _lands(claims, fit, snapshot, devices, refusal):
        return placement, fit, None  # none refuses it, or nothing takes it: a denial says so
    where = _where(spec_path)
    return placement, fit, refused_finding(plugin, settings=settings, where=where)


def _lands(
    claims: PodClaims,
    fit: FitAnswer,
    snapshot: Inventory,
    devices: DeviceInventory | None,
    refusal: SlotRefusal,
) -> bool:
    """Whether some node the placement admits takes the whole pod, its served resources
    from a device plugin that does not refuse it or from the class's devices; True where
    the webhook cannot tell (no complete slices), as it then denies nothing."""
    if devices is None:
        return True
    fits = _whole_fits(
        claims, fit.demand, fit.placement, snapshot=snapshot, devices=devices, refusal=refusal
    )
    return fits is not False


def _claims_findings(
    claims: PodClaims,
    scope: Scope,
    access: Template,
    *,
    snapshot: Inventory | None,
    view: InventoryView,
    context: _Context,
) -> list[Finding]:
    """What the pod's DRA claims meet: the CUDA driver of the devices, and the devices."""
    found: list[Finding] = []
    if claims.gpu_classes and not view.problem:
        needs = gpu_needs(scope.pod, scope.settings, claims.holders)
        found.extend(
            dra_cuda_findings(
                needs=needs,
                classes=claims.gpu_classes,
                devices=view.devices,
                settings=scope.settings,
                exempt=access.exempt,
                where=scope.where,
            )
        )
    if not claims.claims or view.devices is None or view.problem:
        return found
    # A DaemonSet makes pods only for the nodes it selects (pkg/controller/daemon,
    # NodeShouldRunDaemonPod): selecting none yet (a label the GPU operator sets on nodes
    # later, as for its DCGM exporter's admin-access claim) leaves no pod Pending.
    nowhere = bool(
        context.daemon and snapshot is not None and not snapshot.placeable(scope.placement)
    )
    if nowhere:
        context.notices.append("DaemonSet selects no node yet: its DRA claims were not checked")
    found.extend(
        _device_findings(claims, scope, snapshot=snapshot, devices=view.devices, judge=not nowhere)
    )
    return found


def _device_findings(
    claims: PodClaims,
    scope: Scope,
    *,
    snapshot: Inventory | None,
    devices: DeviceInventory,
    judge: bool,
) -> list[Finding]:
    """The pod's claims; with its GPU resources on one node where both must meet there.
    Judged on the nodes as they will be once healed (uncordoned, ready), as every capacity
    check is: a denial never rests on a transient state (docs/rules.md). When only such a
    state keeps the claims from every node now, a warning says so."""
    healed = scope.placement.healed()
    found = _claims_on(healed, claims, scope, snapshot=snapshot, devices=devices, judge=judge)
    if healed is scope.placement or any(f.action == "deny" for f in found):
        return found
    if snapshot is None or not snapshot.cordons:
        return found  # the pod's placement now admits what the healed one does
    now = _claims_on(
        scope.placement, claims, scope, snapshot=snapshot, devices=devices, judge=judge
    )
    if any(f.action == "deny" for f in now):
        found.append(
            Finding(
                "builtin",
                "deviceClaims",
                "warn",
                "the pod's DRA claims fit only nodes that cannot take it right now (cordoned, "
                "or not ready). It stays Pending until one is schedulable again (a cordon or a "
                "bad condition passes, so this is no reason to deny it).",
                "claims fit only nodes that are unavailable now",
                scope.where,
            )
        )
    return found


def _claims_on(
    placement: Placement,
    claims: PodClaims,
    scope: Scope,
    *,
    snapshot: Inventory | None,
    devices: DeviceInventory,
    judge: bool,
) -> list[Finding]:
    demand = scope.fit.demand if scope.fit is not None else None
    whole = judge and snapshot is not None and demand is not None
    whole = whole and needs_whole_pod(claims, demand)
    found = list(
        claim_findings(
            claims,
            placement=placement,
            nodes=snapshot,
            devices=devices,
            actions=scope.settings.actions,
            where=scope.where,
            judge_fit=judge and not whole,
        )
    )
    if whole and snapshot is not None and demand is not None:
        found.extend(
            whole_pod_findings(
                claims,
                demand=demand,
                placement=placement,
                nodes=snapshot,
                devices=devices,
                actions=scope.settings.actions,
                where=scope.where,
                refusal=scope.settings.device_plugin,
            )
        )
    return found


def _gpu_findings(scope: Scope, snapshot: Inventory | None) -> list[Finding]:
    """The built-in checks of the pod's GPU quantities, capacity and units."""
    pod, settings = scope.pod, scope.settings
    found: list[Finding] = []
    if pod.problems:
        found.extend(quantity_findings(scope, settings))
    # A pod that fits some class has no unknown resource either: nothing to report.
    if snapshot is not None and scope.fit is not None and not scope.fit.fitting:
        found.extend(capacity_findings(scope, snapshot, settings))
    elif scope.fit is not None and (scope.fit.refused or scope.fit.waiting()):
        found.extend(fit_warnings(scope, settings))
    if snapshot is None and pod.partial:
        found.extend(mig_profile_findings(scope, settings))
    if pod.crowded and not whole_gpus(scope):
        found.extend(device_findings(scope, snapshot, settings))
    for c in pod.containers:  # a loop, not any() over a generator: on every review
        if c.others:
            found.extend(misspelled_findings(scope, snapshot, settings))
            break
    return found


def _inventory_unavailable(
    problem: str, policy: Policy, findings: list[Finding], warnings: list[str]
) -> None:
    if policy.settings.inventory_failure_mode == "deny":
        findings.append(
            Finding(
                "builtin",
                "capacity",
                "deny",
                f"GPU capacity cannot be checked: {problem}. Retry when the webhook's node "
                "inventory is back, or ask an admin to set inventoryFailureMode: allow.",
                f"GPU capacity not checked: {problem}",
            )
        )
    else:
        warnings.append(f"GPU capacity not checked: {problem}")


@dataclass(frozen=True, slots=True)
class _Totals:
    """What all pods of a workload ask for: per resource, and GPUs in all."""

    needed: Mapping[str, int]
    total: int


def _totals(per_pod: Sequence[tuple[PodTemplate, PodGPUs]], claims: Sequence[PodClaims]) -> _Totals:
    """Per resource and in all; with the resources a device class serves (``claims``,
    taken out of ``effective`` to be judged as claims), which are GPUs the pods ask for."""
    needed: dict[str, int] = {}
    total = 0
    for (template, pod), asked in zip(per_pod, claims, strict=True):
        if template.replicas is None or not template.path:
            continue
        served = [(c.name, c.gpu_count) for c in asked.claims if not c.counted]
        for resource, count in (*pod.effective.items(), *served):
            needed[resource] = needed.get(resource, 0) + count * template.replicas
        # The GPU limit counts what an autoscaler may make (``PodTemplate.counted``).
        total += pod.total * (template.counted or 0)
    return _Totals(needed, total)


def _old_totals(request: Request, policy: Policy, view: InventoryView) -> _Totals | None:
    """On a workload UPDATE, the old object's totals; ``None`` on CREATE."""
    old = request.old_object
    if request.operation != "UPDATE" or not isinstance(old, dict):
        return None
    templates = policy.kinds.templates(old) or []
    asked = _as_created(request, old)
    asks = [(t, *_asks(asked, t, settings=policy.settings, view=view)) for t in templates]
    return _totals([(t, pod) for t, pod, _ in asks], [claims for _, _, claims in asks])


def _workload_findings(
    per_pod: list[tuple[PodTemplate, PodGPUs]],
    claims: list[PodClaims],
    snapshot: Inventory,
    policy: Policy,
    view: InventoryView,
    *,
    floor: _Totals | None = None,
) -> list[Finding]:
    """Replicas times GPUs per pod against every GPU in the cluster: a warning by default,
    since nodes may be added, but a job that can never start all its workers hangs. With
    a ``floor`` (an UPDATE), only resources whose total the update raises. A resource a
    DRA device class serves counts its devices too (``wholepod.served_total``); where the
    cluster's total cannot be known (a pool of unknown size, a selector the webhook cannot
    evaluate) the finding is a warning that says so, never a denial."""
    needed = _totals(per_pod, claims).needed
    findings = []
    action = policy.settings.actions.get("clusterCapacity", "warn")
    devices = view.usable_devices
    for resource, need in needed.items():
        if floor is not None and need <= floor.needed.get(resource, 0):
            continue
        served = (
            None if devices is None else served_total(resource, devices=devices, nodes=snapshot)
        )
        if served is not None:
            finding = cluster_capacity_finding(served, need=need, action=action)
            if finding is not None:
                findings.append(finding)
            continue
        have = snapshot.total(resource)
        if need > have and resource in snapshot.resource_names:
            message = (
                f"all pods of this workload together request {need} {resource}, but the "
                f"whole cluster has {have}; not every pod can run at once. Lower replicas "
                "or GPUs per pod, or add nodes."
            )
            summary = f"workload needs {need} {resource}, cluster has {have}"
            finding = Finding("builtin", "clusterCapacity", action_of(action), message, summary)
            # A pool of unknown size may bring the rest: never a denial on a guess.
            findings.append(
                _cannot_know(finding, snapshot.unbounded) if snapshot.unbounded else finding
            )
    return findings


def _workload_rule_findings(
    request: Request,
    per_pod: list[tuple[PodTemplate, PodGPUs]],
    policy: Policy,
    claims: list[PodClaims],
    *,
    floor: _Totals | None = None,
) -> list[Finding]:
    """``maxGPUsPerWorkload``; with a ``floor`` (an UPDATE), only when the update raises
    the workload's total."""
    findings: list[Finding] = []
    workload = [
        (t, p, c)
        for (t, p), c in zip(per_pod, (c.gpu_classes for c in claims), strict=True)
        if t.replicas is not None and t.path
    ]
    if not workload:
        return findings
    # An elastic job counts the most workers its autoscaler may make (issue 41).
    total = sum(p.total * (t.counted or 0) for t, p, _ in workload)
    if floor is not None and total <= floor.total:
        return findings
    counting = most_words([(t, p.total) for t, p, _ in workload])
    for rule in policy.rules:
        for check in rule.checks:
            if check.kind != "maxGPUsPerWorkload" or total <= check.value:
                continue
            if not any(
                rule.match.matches(
                    namespace=request.effective_namespace,
                    namespace_labels=request.namespace_labels,
                    pod_labels=t.labels,
                    resources=p.resources,
                    gpu_count=p.total,
                    device_classes=c,
                )
                for t, p, c in workload
            ):
                continue
            message = (
                f"all pods of this workload together request {total} GPUs"
                + (f", counting {counting}" if counting else "")
                + f"; at most {check.value} are allowed per workload here. Lower replicas"
                + (", the declared maximum" if counting else "")
                + " or GPUs per pod."
            )
            if check.message:
                message += " " + check.message
            findings.append(
                Finding(
                    rule.name,
                    check.kind,
                    check.action,
                    message,
                    f"workload requests {total} GPUs, at most {check.value}",
                )
            )
    return findings
