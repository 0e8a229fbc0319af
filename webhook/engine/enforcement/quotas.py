"""The ``gpuQuota`` check: a workload whose pods can never all run within its namespace's
hard GPU quota (``webhook.engine.resources.quotas``).

Replicas times GPUs per pod, by the same kind semantics as the workload totals
(``clusterCapacity``), against every unscoped ResourceQuota of the namespace that limits
``requests.<gpu resource>``; DRA claims made from templates (one claim per pod) count their
devices per class against ``<class>.deviceclass.resource.k8s.io/devices``. A warning by
default, a denial by setting. A single pod over what is left of a quota is the quota
admission plugin's to refuse (it runs after the webhooks): the webhook only says so, as a
notice, so that ``explain`` shows why the pod is not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.resources.quotas import Quotas, device_class_key, resource_key
from webhook.engine.scheduling.dra import PodClaims


def claim_devices(claims: PodClaims) -> dict[str, int]:
    """Devices per class that the pod's own claims (made from templates) ask for: requests
    with one way to be met and an exact count; ``All`` and ``firstAvailable`` are left
    out (their count is not known before allocation)."""
    out: dict[str, int] = {}
    for entry in claims.claims:
        if entry.claim is None or not entry.source.startswith("ResourceClaimTemplate"):
            continue  # a shared ResourceClaim exists already: its devices are in "used"
        for request in entry.claim.spec.requests:
            if len(request.alternatives) != 1 or request.alternatives[0].all_devices:
                continue
            sub = request.alternatives[0]
            out[sub.device_class] = out.get(sub.device_class, 0) + sub.count
    return out


def _needs(
    templates: Iterable[tuple[PodTemplate, PodGPUs, PodClaims]], *, replicas: bool
) -> dict[str, int]:
    need: dict[str, int] = {}
    for template, pod, claims in templates:
        times = (template.replicas or 0) if replicas else 1
        for resource, count in pod.effective.items():
            key = resource_key(resource)
            need[key] = need.get(key, 0) + count * times
        for device_class, count in claim_devices(claims).items():
            key = device_class_key(device_class)
            need[key] = need.get(key, 0) + count * times
    return {k: v for k, v in need.items() if v > 0}


def workload_quota_findings(
    namespace: str,
    templates: Sequence[tuple[PodTemplate, PodGPUs, PodClaims]],
    quotas: Quotas,
    *,
    action: str,
) -> list[Finding]:
    findings = []
    for key, need in _needs(templates, replicas=True).items():
        for quota, hard, used in quotas.limits(namespace, key):
            if need <= hard:
                continue
            message = (
                f"all pods of this workload together request {need} {_what(key)}, but "
                f"ResourceQuota {namespace}/{quota.name} allows {key}: {hard} ({used} used "
                "now); the quota admission plugin refuses the pods beyond it and their "
                "controller retries them forever. Lower the replicas or GPUs per pod, or "
                "ask for a larger quota."
            )
            findings.append(
                Finding(
                    "builtin",
                    "gpuQuota",
                    action_of(action),
                    message,
                    f"workload needs {need} {key}, quota {quota.name} allows {hard}",
                )
            )
    return findings


def pod_quota_notices(
    namespace: str,
    templates: Sequence[tuple[PodTemplate, PodGPUs, PodClaims]],
    quotas: Quotas,
) -> list[str]:
    """Why the quota admission plugin will refuse this pod, if it will."""
    notices = []
    for key, need in _needs(templates, replicas=False).items():
        for quota, hard, used in quotas.limits(namespace, key):
            if used + need <= hard:
                continue
            never = " (more than the quota allows at all)" if need > hard else ""
            notices.append(
                f"ResourceQuota {namespace}/{quota.name}: {key} hard {hard}, {used} used "
                f"now; this pod asks {need} more{never}, so the quota admission plugin "
                "refuses it until enough is freed"
            )
    return notices


def _what(key: str) -> str:
    return key.removeprefix("requests.")
