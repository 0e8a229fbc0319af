"""One audit of a live cluster, shared by ``gpu-webhook audit`` and the server's background
audit: the nodes, the namespaces' labels, then every served workload kind, owners before
pods, page by page into an ``Audit``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from webhook.cluster.apiclient import ApiError
from webhook.cluster.clusterobjects import ClusterObjects, Progress
from webhook.engine.evaluation.request import NO_INVENTORY
from webhook.engine.kube.workloads import WorkloadKind
from webhook.engine.policy.ruleset import Policy
from webhook.reports.audit import Audit


def _every(_: WorkloadKind) -> bool:
    return True


def audit_cluster(
    cluster: ClusterObjects,
    policy: Policy,
    *,
    namespace: str | None = None,
    wanted: Callable[[WorkloadKind], bool] = _every,
    progress: Progress | None = None,
    claims: bool = False,
) -> tuple[Audit, list[str], list[str]]:
    """The audit; a note per wanted kind the cluster does not serve; and notices of what
    could not be read and was done without (nodes or namespaces a user may not list).

    Raises ``ApiError`` when API discovery fails, or nodes or namespaces for another
    reason than 403; a kind that cannot be listed is recorded in ``Audit.errors`` and the
    others are still read. ``claims``: ResourceClaims and templates are judged too, as the
    server judges them on create (``gpu-webhook audit`` without ``--kinds``)."""
    notices: list[str] = []
    inventory = NO_INVENTORY
    try:
        inventory = cluster.view(notices)
    except ApiError as exc:
        if exc.code != 403:
            raise
        notices.append(f"cannot list nodes, so capacity checks are skipped: {exc}")
    labels: dict[str, Mapping[str, str]] = {}
    if policy.rules:
        try:
            labels = cluster.namespace_labels()
        except ApiError as exc:
            if exc.code != 403:
                raise
            notices.append(
                f"cannot list namespaces, so rules that select namespaces by label do not "
                f"apply: {exc}"
            )
    kinds, missing = cluster.served_kinds(policy.kinds, wanted)
    audit = Audit(policy=policy, inventory=inventory, namespace_labels=labels.get)
    for listed in kinds:
        if listed.kind.kind == "Pod":
            audit.owners_complete()
        try:
            for obj in cluster.objects(listed, namespace=namespace, progress=progress):
                audit.add(obj)
        except ApiError as exc:
            audit.errors.append(f"cannot list {listed.kind.resource}.{listed.group_version}: {exc}")
    if claims:
        try:
            for obj in cluster.claim_objects(namespace=namespace, progress=progress):
                audit.add(obj)
        except ApiError as exc:
            audit.errors.append(f"cannot list resourceclaims.resource.k8s.io/v1: {exc}")
    return audit, missing, notices
