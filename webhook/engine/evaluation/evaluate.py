"""The engine's entry point: one object, the policy and a snapshot in; a decision out."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.demand.gpuaccess import pod_asks_for_gpu
from webhook.engine.demand.gpus import PodGPUs, pod_gpus
from webhook.engine.enforcement.accesscontrol import (
    NO_EXEMPTIONS,
    PodReach,
    Template,
    access_findings,
    exemptions,
    hide_on_gpu_nodes,
    node_findings,
    place,
    runtime_class_findings,
    without_exempt,
)
from webhook.engine.enforcement.checks import (
    Scope,
    capacity_findings,
    device_findings,
    quantity_findings,
    rule_findings,
    whole_gpus,
)
from webhook.engine.enforcement.cudadrivers import cuda_findings, dra_cuda_findings, gpu_needs
from webhook.engine.enforcement.mutators import (
    apply_containers,
    apply_placement,
    repair_requests_only,
)
from webhook.engine.enforcement.quotas import pod_quota_notices, workload_quota_findings
from webhook.engine.evaluation.claimobjects import evaluate_claim_object
from webhook.engine.evaluation.request import NO_INVENTORY_NOTICE, InventoryView, Request
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.selectors import dig
from webhook.engine.kube.workloads import Path as WorkloadPath
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, Finding, action_of, decide
from webhook.engine.policy.ruleset import Mutations, Policy, Rule, Settings
from webhook.engine.resources.devices import is_dra_object
from webhook.engine.resources.fit import demand_of
from webhook.engine.resources.inventory import FitAnswer, Inventory, Placement
from webhook.engine.resources.quotas import Quotas
from webhook.engine.scheduling.dra import (
    NO_CLAIMS,
    PodClaims,
    claim_findings,
    extended_resource_claims,
    pod_claims,
    with_claim_gpus,
)
from webhook.engine.scheduling.gangs import gang_findings

_with_pools: tuple[Inventory, Policy, Inventory] | None = None


def _inventory(view: InventoryView, policy: Policy) -> Inventory | None:
    """The snapshot plus declared node pools, built once per (snapshot, policy) pair."""
    global _with_pools  # noqa: PLW0603 - a memo; evaluation stays a function of its inputs
    if view.snapshot is None or view.problem or not policy.node_pools:
        return None if view.problem else view.snapshot
    memo = _with_pools
    # Held by reference, not by id(): a freed snapshot's id may be reused by the next one.
    if memo is not None and memo[0] is view.snapshot and memo[1] is policy:
        return memo[2]
    combined = view.snapshot.with_nodes(policy.node_pools)
    _with_pools = (view.snapshot, policy, combined)
    return combined


def evaluate(request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
    obj = request.object
    if is_dra_object(obj) and obj.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
        return evaluate_claim_object(
            request, policy=policy, view=inventory, snapshot=_inventory(inventory, policy)
        )
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
    snapshot = _inventory(inventory, policy)
    kind = str(obj.get("kind", ""))
    context = _Context(
        kind=kind,
        # The one per-node kind (workloads.BUILTIN_KINDS).
        daemon=kind == "DaemonSet" and str(obj.get("apiVersion", "")).startswith("apps/"),
        runtime_classes=inventory.runtime_classes,
    )
    editor = Editor(obj)
    findings: list[Finding] = []
    mutated_by: dict[str, None] = {}
    notices: list[str] = []
    per_pod: list[tuple[PodTemplate, PodGPUs]] = []
    classes: list[tuple[str, ...]] = []
    fits: list[tuple[PodTemplate, FitAnswer]] = []
    asked: list[tuple[PodTemplate, PodGPUs, PodClaims]] = []
    skipped = False
    for template in templates:
        if _unchanged(request, template):
            skipped = True
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
        )
        per_pod.append((template, pod))
        classes.append(claims.gpu_classes)
        if fit is not None:
            fits.append((template, fit))
        asked.append((template, pod, claims))
        devices = inventory.devices
        if claims.claims and (devices is None or not devices.complete) and not inventory.problem:
            notices.append("DRA claims not checked: no DRA inventory (classes and slices)")
    warnings: list[str] = []
    workload = bool(templates[0].path)  # a Pod's one template is the object itself
    if any(p.total or p.problems for _, p in per_pod):
        if inventory.problem:
            _inventory_unavailable(inventory.problem, policy, findings, warnings)
        elif snapshot is None:
            notices.append(NO_INVENTORY_NOTICE)
        else:
            if workload:
                findings.extend(_workload_findings(per_pod, snapshot, policy))
            if fits and not skipped:
                action = policy.settings.actions.get("gangFit", "deny")
                findings.extend(gang_findings(obj, fits, action=action))
    if workload:
        findings.extend(_workload_rule_findings(request, per_pod, policy, classes))
    if inventory.quotas is not None and not inventory.problem and not skipped:
        _quota(
            request,
            asked,
            inventory.quotas,
            policy=policy,
            findings=findings,
            notices=notices,
            workload=workload,
        )
    return decide(
        findings,
        patch=editor.ops,
        mutated=editor.doc,
        notices=tuple(dict.fromkeys(notices)),
        extra_warnings=warnings,
        mutated_by=list(mutated_by),
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
    """On UPDATE, a template equal to the old one is not judged again: an unrelated update
    of an old object must not be blocked by a rule added since."""
    if request.operation != "UPDATE" or request.old_object is None:
        return False
    if not template.path:
        return _same_pod(request.old_object, template)
    return bool(lookup(request.old_object, template.path) == template.template)


def _same_pod(old: Any, template: PodTemplate) -> bool:
    # A Pod's spec is immutable but for a few fields; its labels may change.
    return (
        isinstance(old, dict)
        and old.get("spec") == template.spec
        and dig(old, "metadata", "labels") == dig(template.template, "metadata", "labels")
    )


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
    snapshot: Inventory | None,
) -> tuple[PodGPUs, PodClaims]:
    """What the template asks of GPUs: resources per container, and DRA claims."""
    pod = pod_gpus(template.spec, settings.gpu_resources, template.singles)
    claims = (
        pod_claims(
            template.spec,
            namespace=request.effective_namespace,
            devices=view.devices,
            is_gpu_class=settings.gpu_device_classes,
        )
        if template.spec.get("resourceClaims")
        else NO_CLAIMS
    )
    pod, claims = extended_resource_claims(pod, claims, devices=view.devices, nodes=snapshot)
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
) -> list[Finding]:
    """Each matching rule's container mutations, less what the pod is exempt from."""
    findings: list[Finding] = []
    exempt = access.exempt
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
                claim_holders=claims.holders,
            )
        )
        _credit(editor, before, mutated_by, (rule,))
    return findings


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
) -> tuple[PodGPUs, PodClaims, FitAnswer | None]:
    settings = policy.settings
    spec_path = template.spec_path
    pod, claims = _asks(request, template, settings=settings, view=view, snapshot=snapshot)
    if not isinstance(editor.get(spec_path), dict):
        return pod, claims, None  # an ill-typed spec: the API server's schema check rejects it
    rules = _matching_rules(request, template, pod, policy, claims) if policy.rules else []
    places_access = hides_on_gpu_nodes = exempting = False
    for rule in rules:
        mutations = rule.mutations
        if mutations.places:
            before = len(editor.ops)
            apply_placement(editor, spec_path, mutations)
            _credit(editor, before, mutated_by, (rule,))
        if mutations.runtime_class is not None or mutations.avoid_gpu_nodes is not None:
            places_access = True
        if mutations.hide_gpus == "gpuNodes":
            hides_on_gpu_nodes = True
        exempting = exempting or bool(rule.exempt)
    access = Template(
        spec_path=spec_path,
        template=template,
        pod=pod,
        exempt=exemptions(rules) if exempting else NO_EXEMPTIONS,
        daemon=context.daemon,
        asks=pod_asks_for_gpu(pod),
    )
    if places_access:
        before = len(editor.ops)
        findings.extend(place(editor, access, rules, settings=settings, inventory=snapshot))
        _credit(editor, before, mutated_by, (r for r in rules if _places_access(r.mutations)))
    if settings.actions.get("requestsWithoutLimits") == "repair":
        findings.extend(_repair_requests_only(editor, spec_path, pod))
    findings.extend(
        _mutate_containers(
            editor,
            access,
            rules,
            claims,
            snapshot=snapshot,
            mutated_by=mutated_by,
            settings=settings,
        )
    )
    # Container mutations and hiding leave the placement as it is: read it once.
    placement = Placement.of(editor.get(spec_path))
    reach = PodReach(editor.get(spec_path), placement, settings=settings, inventory=snapshot)
    if hides_on_gpu_nodes:
        before = len(editor.ops)
        hide_on_gpu_nodes(editor, access, reach=reach)
        _credit(
            editor, before, mutated_by, (r for r in rules if r.mutations.hide_gpus == "gpuNodes")
        )
    spec = editor.get(spec_path)
    scope = Scope(
        where=".".join(map(str, spec_path)),
        spec=spec,
        labels=template.labels,
        pod=pod,
        placement=placement,
        settings=settings,
        fit=snapshot.fit(placement, demand_of(spec, pod.vector, pod.per_container, pod.containers))
        if snapshot is not None and pod.total
        else None,
        kind=context.kind,
    )
    findings.extend(_gpu_findings(scope, snapshot))
    if scope.fit is not None and scope.fit.fitting:
        findings.extend(_cuda(editor, scope, access, mutated_by))
    if claims.gpu_classes and not view.problem:
        needs = gpu_needs(pod, settings, claims.holders)
        findings.extend(
            dra_cuda_findings(
                needs=needs,
                classes=claims.gpu_classes,
                devices=view.devices,
                settings=settings,
                exempt=access.exempt,
                where=scope.where,
            )
        )
    if claims.claims and view.devices is not None and not view.problem:
        findings.extend(
            claim_findings(
                claims,
                placement=scope.placement,
                nodes=snapshot,
                devices=view.devices,
                actions=settings.actions,
                where=scope.where,
            )
        )
    for rule in rules:
        if rule.checks:
            findings.extend(rule_findings(scope, rule, inventory=snapshot))
    findings.extend(access_findings(editor, access, settings=settings, reach=reach))
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


def _cuda(
    editor: Editor, scope: Scope, access: Template, mutated_by: dict[str, None]
) -> list[Finding]:
    """The cudaDriver check, and its affinity (credited for the log line)."""
    needs = gpu_needs(scope.pod, scope.settings)
    if not needs or scope.fit is None:
        return []
    before = len(editor.ops)
    found = cuda_findings(
        editor,
        access.spec_path,
        needs=needs,
        fit=scope.fit,
        settings=scope.settings,
        exempt=access.exempt,
        where=scope.where,
    )
    if len(editor.ops) > before:
        mutated_by["builtin/cudaAffinity"] = None
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
    if pod.crowded and not whole_gpus(scope):
        found.extend(device_findings(scope, snapshot, settings))
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


def _workload_findings(
    per_pod: list[tuple[PodTemplate, PodGPUs]], snapshot: Inventory, policy: Policy
) -> list[Finding]:
    """Replicas times GPUs per pod against every GPU in the cluster: a warning by default,
    since nodes may be added, but a job that can never start all its workers hangs."""
    needed: dict[str, int] = {}
    for template, pod in per_pod:
        if template.replicas is None or not template.path:
            continue
        for resource, count in pod.effective.items():
            needed[resource] = needed.get(resource, 0) + count * template.replicas
    findings = []
    action = policy.settings.actions.get("clusterCapacity", "warn")
    for resource, need in needed.items():
        have = snapshot.total(resource)
        if need > have and resource in snapshot.resource_names:
            findings.append(
                Finding(
                    "builtin",
                    "clusterCapacity",
                    action_of(action),
                    f"all pods of this workload together request {need} {resource}, but the "
                    f"whole cluster has {have}; not every pod can run at once. Lower replicas "
                    "or GPUs per pod, or add nodes.",
                    f"workload needs {need} {resource}, cluster has {have}",
                )
            )
    return findings


def _workload_rule_findings(
    request: Request,
    per_pod: list[tuple[PodTemplate, PodGPUs]],
    policy: Policy,
    classes: list[tuple[str, ...]],
) -> list[Finding]:
    findings: list[Finding] = []
    workload = [
        (t, p, c)
        for (t, p), c in zip(per_pod, classes, strict=True)
        if t.replicas is not None and t.path
    ]
    if not workload:
        return findings
    total = sum(p.total * (t.replicas or 0) for t, p, _ in workload)
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
                f"all pods of this workload together request {total} GPUs; at most "
                f"{check.value} are allowed per workload here. Lower replicas or GPUs per pod."
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
