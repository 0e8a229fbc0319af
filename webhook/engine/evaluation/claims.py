"""Two stages of checks. ``claim_checks``: what a pod template's DRA claims meet (the
devices, on the nodes as they are once healed; the CUDA driver of the devices; the whole
pod on one node where its GPU resources and claims must meet there). ``rule_checks``: the
rules' checks, on the pod, then their unit checks and device policy held on the devices
the claims may get. (A ResourceClaim object itself is judged in ``claimobjects``.)
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.engine.enforcement.accesscontrol import Template
from webhook.engine.enforcement.checks import (
    Scope,
    claim_unit_findings,
    rule_findings,
)
from webhook.engine.enforcement.cudadrivers import (
    dra_cuda_findings,
    gpu_needs,
)
from webhook.engine.evaluation.request import (
    Asked,
    InventoryView,
    Request,
    Review,
)
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import Rule
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, Placement
from webhook.engine.scheduling.devicepolicy import (
    claim_units,
    device_policy_findings,
    device_rules,
)
from webhook.engine.scheduling.dra import (
    PodClaims,
    claim_findings,
)
from webhook.engine.scheduling.wholepod import (
    needs_whole_pod,
    whole_pod_findings,
)


def claim_checks(review: Review, asked: Asked, access: Template, scope: Scope) -> None:
    """The sixth stage: what the pod's DRA claims, and the GPU classes it asks for, meet."""
    claims = asked.claims
    if claims.claims:  # a pod without claims asks for no GPU class either
        review.findings.extend(
            claims_findings(
                claims,
                scope,
                access,
                snapshot=review.snapshot,
                view=review.view,
                daemon=review.daemon,
                notices=review.template_notices,
            )
        )


def rule_checks(review: Review, asked: Asked, scope: Scope) -> None:
    """The seventh stage: each matching rule's checks on the pod, then on the devices its
    claims may get: the unit checks (a check the pod broke by name already is said once)
    and the device policy."""
    rules, claims, findings = asked.rules, asked.claims, review.findings
    snapshot = review.snapshot
    for rule in rules:
        if rule.checks:
            findings.extend(rule_findings(scope, rule, inventory=snapshot))
    if claims.claims:  # both steps read claims' devices: none, nothing to judge
        view = review.view
        units = unit_findings(
            claims, rules, scope=scope, snapshot=snapshot, view=view, found=findings
        )
        if rules:
            findings.extend(
                device_policy(
                    review.request, claims, rules, scope=scope, snapshot=snapshot, view=view
                )
            )
        findings.extend(units)


def device_policy(
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


def unit_findings(
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


def claims_findings(
    claims: PodClaims,
    scope: Scope,
    access: Template,
    *,
    snapshot: Inventory | None,
    view: InventoryView,
    daemon: bool,
    notices: list[str],
) -> list[Finding]:
    """What the pod's DRA claims meet: the CUDA driver of the devices, and the devices
    (``daemon``: the object is a DaemonSet; ``notices`` takes what was not checked)."""
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
    nowhere = bool(daemon and snapshot is not None and not snapshot.placeable(scope.placement))
    if nowhere:
        notices.append("DaemonSet selects no node yet: its DRA claims were not checked")
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
