"""The stages one object passes, in order. ``evaluate_object`` walks the object's pod templates,
then the workload's totals and what is judged after admission, and decides;
``_evaluate_template`` takes one template through the stages:

1. read the demand: what the template asks of GPUs, and the rules that match it (``request``);
2. place and mutate: the rules' placements, placement for access, repaired requests,
   container mutations (``mutation``);
3. check the fit: where the whole request fits, kept off refusing nodes (``capacity``);
4. hide GPUs from the containers that asked for none, where the pod can land;
5. the built-in GPU checks and the CUDA driver (``capacity``), the DRA claims
   (``claims``), the rules' checks, the device policy on the claims' devices (``claims``),
   device access, GPU nodes for non-GPU pods and runtime classes (``enforcement``);

then, per object: the workload totals, gangs and quota (``workloadtotals``) and the decision.
The stages are called from here in line, not through a chain of stage objects: this path runs
on every review, and each call level costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.engine.demand.gpuaccess import pod_asks_for_gpu
from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.enforcement.accesscontrol import (
    NO_EXEMPTIONS,
    PodReach,
    Template,
    access_findings,
    exemptions,
    hide_on_gpu_nodes,
    node_findings,
    runtime_class_findings,
    unhidden_findings,
)
from webhook.engine.enforcement.checks import (
    Scope,
    rule_findings,
)
from webhook.engine.enforcement.cudadrivers import (
    cuda_notices,
    drivers_known,
)
from webhook.engine.evaluation.capacity import (
    cuda_check,
    gpu_findings,
    pod_fit,
    where_of,
)
from webhook.engine.evaluation.claims import (
    claims_findings,
    device_policy,
    unit_findings,
)
from webhook.engine.evaluation.mutation import (
    apply_mutations,
    credit,
    rule_placements,
)
from webhook.engine.evaluation.request import (
    NO_INVENTORY_NOTICE,
    InventoryView,
    Request,
    inventory_of,
    matching_rules,
    template_asks,
)
from webhook.engine.evaluation.workloadtotals import (
    after_admission,
    old_totals,
    workload_findings,
    workload_rule_findings,
)
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, Finding, decide
from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.inventory import FitAnswer, Inventory, Placement
from webhook.engine.scheduling.dra import PodClaims


def evaluate_object(
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
    snapshot = inventory_of(inventory, snapshot_of or policy)
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
    floor = old_totals(request, policy, inventory) if workload else None
    counted: list[tuple[PodTemplate, PodGPUs]] = []
    counted_claims: list[PodClaims] = []
    # Issue 26: each judged template's ask and fit, for gangs and quotas.
    judged: list[tuple[PodTemplate, PodGPUs, PodClaims, FitAnswer | None]] = []
    for template in templates:
        if _unchanged(request, template):
            if floor is not None:
                pod, claims = template_asks(
                    request, template, settings=policy.settings, view=inventory
                )
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
            findings.extend(workload_findings(per_pod, asked, snapshot, policy, inventory))
    if floor is not None:
        # An UPDATE is judged on the totals it raises: a Deployment scaled from 1 to 100
        # replicas, a Job's parallelism; a total it leaves or lowers was judged before.
        if snapshot is not None and any(p.total for _, p in counted):
            findings.extend(
                workload_findings(counted, counted_claims, snapshot, policy, inventory, floor=floor)
            )
        findings.extend(
            workload_rule_findings(request, counted, policy, counted_claims, floor=floor)
        )
    elif workload:
        findings.extend(workload_rule_findings(request, per_pod, policy, asked))
    # On a create only: an update of an unchanged template is not judged again.
    if len(judged) == len(templates) and floor is None and not inventory.problem:
        after_admission(
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


@dataclass(slots=True)
class _Context:
    """What every template of one object shares."""

    kind: str
    daemon: bool
    runtime_classes: frozenset[str] | None
    notices: list[str] = field(default_factory=list)


def _unchanged(request: Request, template: PodTemplate) -> bool:
    """On a workload UPDATE, a template equal to the old one is not judged again: an
    unrelated update of an old object must not be blocked by a rule added since. (A Pod
    UPDATE is judged by ``pod_update``.)"""
    if request.operation != "UPDATE" or request.old_object is None or not template.path:
        return False
    return bool(lookup(request.old_object, template.path) == template.template)


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
    """One template through the stages, in the order the numbered comments show; what it
    asks, its claims and its fit go on to the workload stage."""
    settings = policy.settings
    spec_path = template.spec_path
    # 1. Demand: what the template asks, and the rules that match it.
    pod, claims = template_asks(request, template, settings=settings, view=view)
    devices = view.usable_devices
    if not isinstance(editor.get(spec_path), dict):
        return pod, claims, None  # an ill-typed spec: the API server's schema check rejects it
    rules = matching_rules(request, template, pod, policy, claims) if policy.rules else []
    # 2. Place and mutate: the rules' placements, then access, requests, containers.
    places_access, hiding, exempting = rule_placements(
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
        apply_mutations(
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
    # 3. Fit: where the whole request fits, kept off nodes that would refuse it.
    # Container mutations and hiding leave the placement as it is: read it once.
    spec = editor.get(spec_path)
    placement = Placement.of(spec)
    fit = None
    refused = None
    if snapshot is not None and pod.total:
        placement, fit, refused = pod_fit(
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
    # 4. Hide GPUs from containers that asked for none, where the pod can land.
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
        credit(editor, before, mutated_by, hiding)
    # 5. Checks of the pod as the webhook leaves it: built-in, claims, rules, access.
    spec = editor.get(spec_path)
    where, labels = where_of(spec_path), template.labels
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
    findings.extend(gpu_findings(scope, snapshot))
    if refused is not None:
        findings.append(refused)
    if scope.fit is not None and scope.fit.fitting and drivers_known(scope.fit):
        findings.extend(cuda_check(editor, scope, access, mutated_by, mutate=mutate))
        context.notices.extend(cuda_notices(scope.pod, settings, scope.fit))
    if claims.claims or claims.gpu_classes:
        findings.extend(
            claims_findings(
                claims,
                scope,
                access,
                snapshot=snapshot,
                view=view,
                daemon=context.daemon,
                notices=context.notices,
            )
        )
    for rule in rules:
        if rule.checks:
            findings.extend(rule_findings(scope, rule, inventory=snapshot))
    if claims.claims:  # both steps read claims' devices: none, nothing to judge
        units = unit_findings(
            claims, rules, scope=scope, snapshot=snapshot, view=view, found=findings
        )
        if rules:
            findings.extend(
                device_policy(request, claims, rules, scope=scope, snapshot=snapshot, view=view)
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
