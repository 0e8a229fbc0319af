"""The ``gpuQuota`` check: a workload whose pods can never all run within its namespace's
hard GPU quota (``webhook.engine.resources.quotas``).

Replicas times GPUs per pod, by the same kind semantics as the workload totals
(``clusterCapacity``), against every ResourceQuota of the namespace that limits
``requests.<gpu resource>`` and whose scopes match the pods; DRA claims made from
templates (one claim per pod) count their devices per class against
``<class>.deviceclass.resource.k8s.io/devices`` as the quota plugin charges a claim. A
warning by default, a denial by setting; a quota that only may apply to the pods (its
scopes read what admission may still change) is never a denial. A single pod over what is
left of a quota is the quota admission plugin's to refuse (it runs after the webhooks):
the webhook only says so, as a notice, so that ``explain`` shows why the pod is not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Action, Finding, action_of
from webhook.engine.resources.devices import SubRequest
from webhook.engine.resources.quotas import (
    PodScopes,
    Quota,
    Quotas,
    device_class_key,
    resource_key,
)
from webhook.engine.scheduling.dra import PodClaims

# resource.k8s.io AllocationResultsMaxSize: what the claim evaluator charges an ``All``
# request ("Worst case...", pkg/quota/v1/evaluator/core/resource_claims.go).
ALL_DEVICES_CHARGE = 32


def claim_devices(claims: PodClaims) -> dict[str, int]:
    """Devices per class that the quota plugin charges the pod's own claims (made from
    templates), as the claim evaluator's ``Usage`` counts them: an exact request its
    count, ``All`` AllocationResultsMaxSize, ``firstAvailable`` the largest of its
    subrequests per class, each class's largest added."""
    out: dict[str, int] = {}
    for entry in claims.claims:
        if entry.claim is None or not entry.source.startswith("ResourceClaimTemplate"):
            continue  # a shared ResourceClaim exists already: its devices are in "used"
        for request in entry.claim.spec.requests:
            largest: dict[str, int] = {}
            for sub in request.alternatives:
                charge = _charge(sub)
                largest[sub.device_class] = max(largest.get(sub.device_class, 0), charge)
            for device_class, charge in largest.items():
                out[device_class] = out.get(device_class, 0) + charge
    return out


def _charge(sub: SubRequest) -> int:
    return ALL_DEVICES_CHARGE if sub.all_devices else sub.count


@dataclass(frozen=True, slots=True)
class _Ask:
    """What one template's pods ask of the quotas, and which scopes they match."""

    need: dict[str, int]
    scopes: PodScopes


def _asks(
    templates: Iterable[tuple[PodTemplate, PodGPUs, PodClaims]], *, replicas: bool
) -> list[_Ask]:
    asks = []
    for template, pod, claims in templates:
        times = (template.replicas or 0) if replicas else 1
        need: dict[str, int] = {}
        for resource, count in pod.effective.items():
            key = resource_key(resource)
            need[key] = need.get(key, 0) + count * times
        for device_class, count in claim_devices(claims).items():
            key = device_class_key(device_class)
            need[key] = need.get(key, 0) + count * times
        asks.append(_Ask({k: v for k, v in need.items() if v > 0}, PodScopes.of(template.spec)))
    return asks


@dataclass(frozen=True, slots=True)
class _Charge:
    quota: Quota
    key: str
    hard: int
    used: int
    sure: int  # asked by pods the quota certainly counts
    maybe: int  # asked by pods it may count


def _charges(namespace: str, asks: Sequence[_Ask], quotas: Quotas) -> list[_Charge]:
    keys = sorted({key for ask in asks for key in ask.need})
    out = []
    for key in keys:
        for quota, hard, used in quotas.limits(namespace, key):
            sure = maybe = 0
            for ask in asks:
                applies = quota.applies(ask.scopes)
                if applies is True:
                    sure += ask.need.get(key, 0)
                elif applies is None:
                    maybe += ask.need.get(key, 0)
            if sure or maybe:
                out.append(_Charge(quota, key, hard, used, sure, maybe))
    return out


def workload_quota_findings(
    namespace: str,
    templates: Sequence[tuple[PodTemplate, PodGPUs, PodClaims]],
    quotas: Quotas,
    *,
    action: str,
) -> list[Finding]:
    findings = []
    for c in _charges(namespace, _asks(templates, replicas=True), quotas):
        if c.sure > c.hard:
            findings.append(_finding(namespace, c, c.sure, action_of(action), certain=True))
        elif c.sure + c.maybe > c.hard:
            # Only a quota that may not apply: a warning at most.
            warn: Action = "warn" if action_of(action) == "deny" else action_of(action)
            findings.append(_finding(namespace, c, c.sure + c.maybe, warn, certain=False))
    return findings


def _finding(namespace: str, c: _Charge, need: int, action: Action, *, certain: bool) -> Finding:
    scope = _scopes(c.quota)
    doubt = (
        ""
        if certain
        else " if its scopes apply to these pods (admission may still set their priority "
        "class or CPU and memory requests)"
    )
    message = (
        f"all pods of this workload together request {need} {_what(c.key)}, but "
        f"ResourceQuota {namespace}/{c.quota.name}{scope} allows {c.key}: {c.hard} ({c.used} "
        f"used now){doubt}; the quota admission plugin refuses the pods beyond it and their "
        "controller retries them forever. Lower the replicas or GPUs per pod, or ask for a "
        "larger quota."
    )
    return Finding(
        "builtin",
        "gpuQuota",
        action,
        message,
        f"workload needs {need} {c.key}, quota {c.quota.name} allows {c.hard}",
    )


def pod_quota_notices(
    namespace: str,
    templates: Sequence[tuple[PodTemplate, PodGPUs, PodClaims]],
    quotas: Quotas,
) -> list[str]:
    """Why the quota admission plugin will refuse this pod, if it will."""
    notices = []
    for c in _charges(namespace, _asks(templates, replicas=False), quotas):
        need = c.sure + c.maybe
        if c.used + need <= c.hard:
            continue
        never = " (more than the quota allows at all)" if need > c.hard else ""
        scope = _scopes(c.quota)
        may = "refuses" if not c.maybe else "refuses, if its scopes apply to the pod,"
        notices.append(
            f"ResourceQuota {namespace}/{c.quota.name}{scope}: {c.key} hard {c.hard}, "
            f"{c.used} used now; this pod asks {need} more{never}, so the quota admission "
            f"plugin {may} it until enough is freed"
        )
    return notices


def _scopes(quota: Quota) -> str:
    """What follows a quota's name in messages: its scopes, when it has any."""
    if not quota.scoped:
        return ""
    return f" (scopes {', '.join(s.describe() for s in quota.scopes)})"


def _what(key: str) -> str:
    return key.removeprefix("requests.")
