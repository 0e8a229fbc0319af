"""The stages one object passes, in order. ``evaluate_object`` lists the object's stages:
each pod template through ``_evaluate_template``, then the workload's totals and what is
judged after admission, then the decision; ``_evaluate_template`` lists one template's:

1. ``demand`` (``request``): what the template asks of GPUs, and the rules that match it;
2. ``place_and_mutate`` (``mutation``): the rules' placements, placement for access,
   repaired requests, container mutations;
3. ``where_it_fits`` (``capacity``): where the whole request fits, kept off refusing nodes;
4. ``hide`` (``mutation``): GPUs hidden from the containers that asked for none, where the
   pod can land;
5. ``gpu_checks`` (``capacity``): the built-in GPU checks and the CUDA driver;
6. ``claim_checks`` (``claims``): what the DRA claims meet;
7. ``rule_checks`` (``claims``): the rules' checks, on the pod and on its claims' devices;
8. ``access_checks`` (``enforcement.accesscontrol``, through ``_access_checks``): device
   access, GPU nodes for non-GPU pods, runtime classes.

Each stage is a function of plain records: the ``Review`` every template of the object
shares (the request, policy and inventory in; the patch, findings and notices out), the
template as ``demand`` read it (``Asked``), and what earlier stages returned. Called here
one after the other, not through a chain of stage objects: this path runs on every review.
"""

from __future__ import annotations

from webhook.engine.enforcement.accesscontrol import PodReach, Template, access_checks
from webhook.engine.evaluation.capacity import gpu_checks, where_it_fits
from webhook.engine.evaluation.claims import claim_checks, rule_checks
from webhook.engine.evaluation.mutation import hide, place_and_mutate
from webhook.engine.evaluation.request import (
    Asked,
    InventoryView,
    Request,
    Review,
    demand,
    inventory_of,
    template_asks,
)
from webhook.engine.evaluation.workloadtotals import (
    Judged,
    after_admission,
    old_totals,
    workload_totals,
)
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, decide
from webhook.engine.policy.ruleset import Policy


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
    review = _review(request, policy, inventory, mutate=mutate, snapshot_of=snapshot_of)
    workload = bool(templates[0].path)  # a Pod's one template is the object itself
    # On a workload UPDATE: what the old object asked for in all (``counted``: each
    # template's ask now, unchanged ones too); a template equal to the old one is not judged.
    floor = old_totals(request, policy, inventory) if workload else None
    judged: list[Judged] = []
    counted: list[Judged] = []
    for template in templates:
        if not _unchanged(request, template):
            judged.append(_evaluate_template(review, template))
            counted.append(judged[-1])
        elif floor is not None:
            pod, claims = template_asks(request, template, settings=policy.settings, view=inventory)
            counted.append((template, pod, claims, None))
    workload_totals(review, judged, counted, floor=floor, workload=workload)
    # On a create only: an update of an unchanged template is not judged again.
    if len(judged) == len(templates) and floor is None and not inventory.problem:
        after_admission(review, judged)
    return _decision(review)


def _evaluate_template(review: Review, template: PodTemplate) -> Judged:
    """One template through the stages, in order (the module's docstring says what each
    decides); what it asks and its fit go on to the object's stages."""
    asked = demand(review, template)
    if not asked.typed:  # an ill-typed spec: the API server's schema check rejects it
        return template, asked.pod, asked.claims, None
    access, hiding = place_and_mutate(review, asked)
    placement, fit, refused = where_it_fits(review, asked)
    reach = hide(review, asked, access, placement, hiding)
    scope = gpu_checks(review, asked, access, placement, fit, refused=refused)
    claim_checks(review, asked, access, scope)
    rule_checks(review, asked, scope)
    _access_checks(review, asked, access, reach)
    return template, asked.pod, asked.claims, fit


def _access_checks(review: Review, asked: Asked, access: Template, reach: PodReach) -> None:
    """The last stage, ``accesscontrol.access_checks``, given what it reads of the review."""
    view = review.view
    review.findings.extend(
        access_checks(
            review.editor,
            access,
            asked.rules,
            settings=review.settings,
            reach=reach,
            policy_rules=review.policy.rules,
            nvidia_classes=view.nvidia_runtime_classes,
            live=review.snapshot is not None,
            runtime_classes=view.runtime_classes,
        )
    )


def _review(
    request: Request,
    policy: Policy,
    view: InventoryView,
    *,
    mutate: bool,
    snapshot_of: Policy | None,
) -> Review:
    obj = request.object
    kind = str(obj.get("kind", ""))
    # By position: built on every review, where a keyword call costs twice as much.
    return Review(
        request,
        policy,
        policy.settings,
        view,
        inventory_of(view, snapshot_of or policy),
        view.usable_devices,
        Editor(obj),
        kind,
        # The one per-node kind (workloads.BUILTIN_KINDS).
        kind == "DaemonSet" and str(obj.get("apiVersion", "")).startswith("apps/"),
        mutate,
        [],
        {},
        [],
        [],
        [],
    )


def _unchanged(request: Request, template: PodTemplate) -> bool:
    """On a workload UPDATE, a template equal to the old one is not judged again: an
    unrelated update of an old object must not be blocked by a rule added since. (A Pod
    UPDATE is judged by ``pod_update``.)"""
    if request.operation != "UPDATE" or request.old_object is None or not template.path:
        return False
    return bool(lookup(request.old_object, template.path) == template.template)


def _decision(review: Review) -> Decision:
    """The findings decided, with the patch and what could not be checked."""
    notices, later = review.notices, review.template_notices
    editor = review.editor
    return decide(
        review.findings,
        patch=editor.ops,
        mutated=editor.doc,
        notices=tuple(dict.fromkeys([*notices, *later])) if notices or later else (),
        extra_warnings=review.warnings,
        mutated_by=list(review.mutated_by),
    )
