"""One audit of a live cluster, shared by ``gpu-webhook audit`` and the server's background
audit: the nodes, the namespaces' labels, then every served workload kind, owners before
pods, page by page into an ``Audit``."""

from __future__ import annotations

from collections.abc import Callable

from webhook.cluster.apiclient import ApiError
from webhook.cluster.clusterobjects import ClusterObjects, Progress
from webhook.engine.evaluate import InventoryView
from webhook.engine.policy import Policy
from webhook.engine.workloads import WorkloadKind
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
) -> tuple[Audit, list[str]]:
    """The audit, and a note per wanted kind the cluster does not serve.

    Raises ``ApiError`` when the nodes, namespaces or API discovery cannot be read; a kind
    that cannot be listed is recorded in ``Audit.errors`` and the others are still read."""
    inventory = cluster.inventory()
    labels = cluster.namespace_labels() if policy.rules else {}
    kinds, missing = cluster.served_kinds(policy.kinds, wanted)
    audit = Audit(policy=policy, inventory=InventoryView(inventory), namespace_labels=labels.get)
    for listed in kinds:
        if listed.kind.kind == "Pod":
            audit.owners_complete()
        try:
            for obj in cluster.objects(listed, namespace=namespace, progress=progress):
                audit.add(obj)
        except ApiError as exc:
            audit.errors.append(f"cannot list {listed.kind.resource}.{listed.group_version}: {exc}")
    return audit, missing
