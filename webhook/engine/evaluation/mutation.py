"""The two stages that patch the pod. ``place_and_mutate``: each matching rule's tolerations
and node affinity (a required affinity on GPU labels judged first on the DRA nodes, issue
31), the placement for device access, repaired requests-only GPUs and the rules' container
mutations, in that order. ``hide``, once the fit is known: GPUs hidden from the containers
that asked for none, where the pod can land on a GPU node. Each patch is credited to the
rule that made it (for the log line).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from webhook.engine.demand.gpuaccess import pod_asks_for_gpu
from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.enforcement.accesscontrol import (
    NO_EXEMPTIONS,
    PodReach,
    Template,
    exemptions,
    hide_on_gpu_nodes,
    place,
    unhidden_findings,
    without_exempt,
)
from webhook.engine.enforcement.mutators import (
    ClaimsFit,
    add_preferred_affinity,
    add_required_affinity,
    add_required_affinity_or_absent,
    add_tolerations,
    apply_containers,
    apply_placement,
    repair_requests_only,
)
from webhook.engine.evaluation.capacity import (
    NO_GPU_FACTS,
    whole_fits,
)
from webhook.engine.evaluation.request import Asked, Review
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.workloads import Path as WorkloadPath
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import Mutations, Rule, Settings
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.fit import Demand, pod_requests, shortfalls
from webhook.engine.resources.inventory import Inventory, Node, Placement
from webhook.engine.scheduling.devicepolicy import (
    AffinityPlan,
    affinity_finding,
    affinity_plan,
    asked_gpus,
    device_rules,
    holds_gpus,
    is_device_label,
    refuses_devices,
    remembered_plan,
)
from webhook.engine.scheduling.dra import (
    PodClaims,
    gpu_devices,
    gpu_names,
)

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def place_and_mutate(review: Review, asked: Asked) -> tuple[Template, list[Rule]]:
    """The second stage: each matching rule's tolerations and node affinity (unless the object
    is judged as it is), then placement for access, repaired requests and container
    mutations, in that order. Returns the template as access control sees it, and the
    rules that hide GPUs on GPU nodes (``hide``). One pass over the rules tells which of
    the later steps any rule asks for: most pods skip them."""
    editor, spec_path, rules = review.editor, asked.spec_path, asked.rules
    pod, mutate, mutated_by = asked.pod, review.mutate, review.mutated_by
    places_access = exempting = containers = False
    hiding: list[Rule] = []
    for rule in rules:
        mutations = rule.mutations
        if mutate and mutations.places:
            if not mutations.required_affinity:
                # The common case, as _place_rule starts: no affinity to judge on DRA nodes.
                before = len(editor.ops)
                apply_placement(editor, spec_path, mutations)
                if len(editor.ops) > before:
                    mutated_by[f"{rule.name}/mutate"] = None
            else:
                review.findings.extend(_place_rule(review, asked, rule))
        if mutations.runtime_class is not None or mutations.avoid_gpu_nodes is not None:
            places_access = True
        if mutations.hide_gpus == "gpuNodes":
            hiding.append(rule)
        exempting = exempting or bool(rule.exempt)
        containers = containers or mutations.changes_containers
    # Built by position, on every review: a keyword call costs twice as much.
    access = Template(
        spec_path,
        asked.template,
        pod,
        exemptions(rules) if exempting else NO_EXEMPTIONS,
        review.daemon,
        bool(pod.total) or pod_asks_for_gpu(pod),  # a GPU pod, without a call
    )
    if not mutate:
        return access, hiding
    settings, findings = review.settings, review.findings
    if places_access:
        before = len(editor.ops)
        findings.extend(
            place(
                editor,
                access,
                rules,
                settings=settings,
                inventory=review.snapshot,
                devices=review.devices,
            )
        )
        credit(editor, before, mutated_by, (r for r in rules if _places_access(r.mutations)))
    if pod.problems and settings.actions.get("requestsWithoutLimits") == "repair":
        findings.extend(_repair_requests_only(editor, spec_path, pod))
    if containers:
        findings.extend(_mutate_containers(review, asked, access))
    return access, hiding


def hide(
    review: Review, asked: Asked, access: Template, placement: Placement, hiding: list[Rule]
) -> PodReach:
    """The fourth stage, after the fit: the ``hiding`` rules' GPUs hidden from containers that
    asked for none, where the pod can land on a GPU node; judged instead where the object
    is judged as it is (an update cannot change a container's env). Returns where the pod
    can land, worked out on first use, for the access checks."""
    editor, settings = review.editor, review.settings
    spec = lookup(editor.doc, asked.spec_path)
    reach = PodReach(spec, placement, settings, review.snapshot, review.devices)
    if hiding and not review.mutate:
        review.findings.extend(
            unhidden_findings(
                editor,
                access,
                asked.rules,
                settings=settings,
                reach=reach,
                claim_holders=asked.claims.holders,
            )
        )
    elif hiding:
        before = len(editor.ops)
        hide_on_gpu_nodes(editor, access, reach=reach)
        credit(editor, before, review.mutated_by, hiding)
    return reach


def strip_spec(spec: dict[str, Any], wanted: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
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


def credit(editor: Editor, before: int, mutated_by: dict[str, None], rules: Iterable[Rule]) -> None:
    """Name ``rules`` as mutators when patch operations were added since ``before`` (for
    the log line). A plain call: a context manager costs about a microsecond per use, and
    a typical pod passes through several."""
    if len(editor.ops) > before:
        for rule in rules:
            mutated_by[f"{rule.name}/mutate"] = None


def _mutate_containers(review: Review, asked: Asked, access: Template) -> list[Finding]:
    """Each matching rule's container mutations, less what the pod is exempt from."""
    findings: list[Finding] = []
    editor, claims, settings, snapshot = (
        review.editor,
        asked.claims,
        review.settings,
        review.snapshot,
    )
    exempt = access.exempt
    fits = _claims_fit(claims, snapshot=snapshot, devices=review.devices, settings=settings)
    for rule in asked.rules:
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
        credit(editor, before, review.mutated_by, (rule,))
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
        return whole_fits(
            claims,
            demand,
            placement,
            snapshot=snapshot,
            devices=devices,
            refusal=settings.device_plugin,
        )

    return fits


def _place_rule(review: Review, asked: Asked, rule: Rule) -> list[Finding]:
    """The rule's tolerations and node affinity; a required affinity on GPU labels is first
    judged with and without it (``devicepolicy.affinity_plan``): the webhook never adds an
    affinity that only shuts out DRA nodes, whose GPUs no label describes (issue 31)."""
    editor, spec_path, pod, claims = review.editor, asked.spec_path, asked.pod, asked.claims
    snapshot, devices, settings = review.snapshot, review.devices, review.settings
    mutated_by = review.mutated_by
    before = len(editor.ops)
    mutations = rule.mutations
    keyed = [r for r in mutations.required_affinity if is_device_label(str(r.get("key")))]
    if not keyed or snapshot is None or devices is None or not devices.complete or not pod.total:
        apply_placement(editor, spec_path, mutations)
        credit(editor, before, mutated_by, (rule,))
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
    bare = Placement.of(strip_spec(copy.deepcopy(editor.get(spec_path)), [*keyed, *absent]))
    served_classes = [c for _, c in claims.served]
    gpus_asked = asked_gpus(pod.vector, claims)
    # Where the pod could land and fit with the rule aside: its GPUs there, and its cpu and
    # memory as the pod asks them now (container rules may raise them later, never lower).
    cpu, memory = pod_requests(editor.get(spec_path), pod.containers)

    def planned() -> AffinityPlan:  # on a miss of the plan's memo only
        on_devices = device_rules([rule])
        unrestricted = holds_gpus(devices, served_classes, gpus_asked, dra_node=dra_node)

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
            holds=holds_gpus(
                devices, served_classes, gpus_asked, dra_node=dra_node, rules=on_devices
            ),
        )

    plan = remembered_plan(
        devices,
        snapshot,
        (
            bare.key(),
            explicit,
            gpus_asked,
            tuple(sorted(wanted)),
            tuple(served_classes),
            cpu,
            memory,
        ),
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
    credit(editor, before, mutated_by, (rule,))
    finding = affinity_finding(rule.name, plan, ".".join(map(str, spec_path)))
    return [finding] if finding is not None else []
