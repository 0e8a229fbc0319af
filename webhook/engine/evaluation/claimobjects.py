"""ResourceClaims and ResourceClaimTemplates judged as objects of their own, on create.

A claim that no node can ever meet leaves every pod that uses it Pending; saying so when
the claim is created (or in ``gpu-webhook check``) is the earliest point to say it. The
same rules apply as to pods' claims (``webhook.engine.scheduling.dra``): an unknown class, no fit on
any schedulable node, and a GPU count above a matching rule's ``maxGPUsPerPod``.
"""

from __future__ import annotations

from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.kube.selectors import dig
from webhook.engine.policy.decision import Decision, Finding, decide
from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.devices import claim_from_json
from webhook.engine.resources.inventory import Inventory
from webhook.engine.scheduling.dra import (
    EVERYWHERE,
    PodClaim,
    candidates,
    class_findings,
    fits_somewhere,
    gpu_share,
    looks_like_gpu_class,
    shortfall,
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
    count, _, classes = gpu_share(claim.spec, settings.gpu_device_classes)
    devices = view.devices
    typo = (
        devices is not None
        and devices.complete
        and looks_like_gpu_class(claim.spec, devices, settings.gpu_device_classes)
    )
    if not count and not typo:
        return Decision(allowed=True, mutated=obj)
    where = "spec.spec" if kind == "ResourceClaimTemplate" else "spec"
    labels = dig(obj, "metadata", "labels")
    findings: list[Finding] = []
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
    if not unknown:
        found = candidates(devices, snapshot, EVERYWHERE)
        answer = fits_somewhere((claim.spec,), found, devices)
        if answer.fits is False:
            subject = PodClaim("", kind, claim)
            message, summary = shortfall((subject,), found, found, devices, usable="in the cluster")
            findings.append(
                Finding(
                    "builtin",
                    "deviceClaims",
                    "deny"
                    if settings.actions.get("deviceClaims") == "deny"
                    else settings.actions.get("deviceClaims", "deny"),  # type: ignore[arg-type]
                    f"no node can ever meet this {kind}: {message}",
                    summary,
                    where,
                )
            )
    return decide(findings, patch=(), mutated=obj, notices=notices)
