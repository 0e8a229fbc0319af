"""ResourceClaims and ResourceClaimTemplates judged as objects of their own, on create.

A claim that no node can ever meet leaves every pod that uses it Pending; saying so when
the claim is created (or in ``gpu-webhook check``) is the earliest point to say it. The
same rules apply as to pods' claims (``webhook.engine.scheduling.dra``): an unknown class, no fit on
any node once uncordoned, and a GPU count above a matching rule's ``maxGPUsPerPod``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.kube.selectors import dig
from webhook.engine.policy.decision import Decision, Finding, decide
from webhook.engine.policy.ruleset import Policy, Rule, Settings
from webhook.engine.resources.devices import Claim, ClaimSpec, DeviceInventory, claim_from_json
from webhook.engine.resources.inventory import Inventory
from webhook.engine.scheduling.devicepolicy import device_policy_findings, device_rules
from webhook.engine.scheduling.dra import (
    EVERYWHERE,
    PodClaim,
    PodClaims,
    candidates,
    class_findings,
    fits_somewhere,
    gpu_names,
    gpu_share,
    invalid_claim_findings,
    looks_like_gpu_class,
    shortfall,
    unevaluated_selector,
)

# resource.DRAAdminNamespaceLabelKey (k8s.io/kubernetes pkg/apis/resource/types.go).
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def admin_access_findings(
    request: Request, spec: ClaimSpec, kind: str, where: str
) -> Iterator[Finding]:
    """A request with ``adminAccess`` in a namespace without the admin-access label: the
    API server refuses the object itself (``pkg/registry/resource/utils.go``,
    ``AuthorizedForAdmin``: "admin access to devices requires the
    `resource.kubernetes.io/admin-access: true` label on the containing namespace"), so
    saying so here is no false denial. When the namespace's labels are not known (``check``
    without a cluster) nothing is said: the namespace may well carry the label."""
    labels = request.namespace_labels
    if labels is None or labels.get(ADMIN_ACCESS_LABEL) == "true":
        return
    admin = [sub.name for r in spec.requests for sub in r.alternatives if sub.admin]
    if not admin:
        return
    namespace = request.effective_namespace
    yield Finding(
        "builtin",
        "adminAccess",
        "deny",
        f'this {kind} asks for admin access to devices (request "{admin[0]}"), which the API '
        f'server allows only in namespaces labelled {ADMIN_ACCESS_LABEL}: "true", and '
        f"namespace {namespace} is not. Label the namespace, or create the {kind} in one "
        "that is.",
        f"adminAccess needs the {ADMIN_ACCESS_LABEL} namespace label",
        where,
    )


def evaluate_claim_object(
    request: Request, *, policy: Policy, view: InventoryView, snapshot: Inventory | None
) -> Decision:
    obj = request.object
    # A claim's spec is immutable, and a template's spec only matters for pods made later.
    if request.operation != "CREATE":
        return Decision(allowed=True, mutated=obj)
    kind = str(obj.get("kind"))
    claim = claim_from_json(obj)
    settings = policy.settings
    devices = view.devices
    _, is_gpu_class = gpu_names(
        settings.gpu_resources, is_gpu_class=settings.gpu_device_classes, devices=devices
    )
    count, _, classes = gpu_share(claim.spec, is_gpu_class)
    typo = (
        devices is not None
        and devices.complete
        and looks_like_gpu_class(claim.spec, devices, settings.gpu_device_classes)
    )
    where = "spec.spec" if kind == "ResourceClaimTemplate" else "spec"
    findings: list[Finding] = list(admin_access_findings(request, claim.spec, kind, where))
    if not count and not typo:
        return decide(findings, patch=(), mutated=obj)
    invalid = list(
        invalid_claim_findings(
            claim.spec, actions=settings.actions, where=where, owner=f"this {kind} "
        )
    )
    if invalid:
        return decide([*findings, *invalid], patch=(), mutated=obj)
    labels = dig(obj, "metadata", "labels")
    matching = []
    for rule in policy.rules:
        if not rule.match.matches(
            namespace=request.effective_namespace,
            namespace_labels=request.namespace_labels,
            pod_labels=labels if isinstance(labels, dict) else {},
            resources=(),
            gpu_count=count,
            device_classes=classes,
        ):
            continue
        matching.append(rule)
        for check in rule.checks:
            if check.kind == "maxGPUsPerPod" and count > check.value:
                message = (
                    f"this {kind} asks for {count} GPUs; at most {check.value} per pod are "
                    f"allowed here. Ask for {check.value} or fewer."
                )
                if check.message:
                    message += " " + check.message
                summary = f"{count} GPUs per claim, at most {check.value} allowed"
                findings.append(
                    Finding(rule.name, check.kind, check.action, message, summary, where)
                )
    notices: list[str] = []
    if devices is None or not devices.complete or view.problem:
        notices.append("DRA fit not checked: no DRA inventory (classes, slices)")
        return decide(findings, patch=(), mutated=obj, notices=notices)
    unknown = list(class_findings(claim.spec, devices, settings.actions, where, ""))
    findings.extend(unknown)
    if not unknown and count:
        subject = PodClaim("", f"this {kind}", claim, *gpu_share(claim.spec, is_gpu_class))
        findings.extend(
            _policy_warnings(
                request, subject, matching, snapshot=snapshot, devices=devices, where=where
            )
        )
    if not unknown:
        findings.extend(
            _fit_findings(
                claim, kind, devices=devices, snapshot=snapshot, settings=settings, where=where
            )
        )
    return decide(findings, patch=(), mutated=obj, notices=notices)


def _fit_findings(
    claim: Claim,
    kind: str,
    *,
    devices: DeviceInventory,
    snapshot: Inventory | None,
    settings: Settings,
    where: str,
) -> list[Finding]:
    """Whether some node can meet the claim, judged on the nodes as they will be once
    healed (uncordoned), as a pod's claims are (``claims._device_findings``): a cordon
    passes, so a claim that only a cordoned node can meet is warned, never denied."""
    healed = EVERYWHERE.healed()
    found = candidates(devices, snapshot, healed)
    answer = fits_somewhere((claim.spec,), found, devices)
    if answer.fits is False:
        subject = PodClaim("", kind, claim)
        message, summary = shortfall((subject,), found, found, devices, usable="in the cluster")
        action = settings.actions.get("deviceClaims", "deny")
        return [
            Finding(
                "builtin",
                "deviceClaims",
                action,  # type: ignore[arg-type]
                f"no node can ever meet this {kind}: {message}",
                summary,
                where,
            )
        ]
    if answer.fits is None:
        if "selector" not in answer.reason:
            return []
        return [
            unevaluated_selector(
                answer.reason, actions=settings.actions, where=where, subject=f"this {kind}"
            )
        ]
    if fits_somewhere((claim.spec,), candidates(devices, snapshot, EVERYWHERE), devices).fits:
        return []
    return [
        Finding(
            "builtin",
            "deviceClaims",
            "warn",
            f"this {kind} fits only nodes that cannot take pods right now (cordoned): the pods "
            "that use it stay Pending until one is uncordoned (a cordon passes, so this is no "
            "reason to deny it).",
            "claim fits only nodes that are unavailable now",
            where,
        )
    ]


def _policy_warnings(
    request: Request,
    subject: PodClaim,
    rules: Sequence[Rule],
    *,
    snapshot: Inventory | None,
    devices: DeviceInventory,
    where: str,
) -> list[Finding]:
    """Rules keyed on GPU labels, held on the devices this claim may get anywhere (issue 31).
    Warnings only: the pods that will use it are judged on their own nodes when created (a
    pod pinned to allowed nodes is admitted), so the claim itself is no reason to deny."""
    held = device_rules(rules)
    if not held:
        return []
    found = device_policy_findings(
        PodClaims((subject,)),
        held,
        placement=EVERYWHERE,
        nodes=snapshot,
        devices=devices,
        namespace=request.effective_namespace,
        where=where,
    )
    return [
        replace(
            f,
            action="warn",
            message=f"{f.message} Pods in this namespace that use it are denied unless their "
            "node selection keeps them on allowed devices.",
        )
        for f in found
    ]
