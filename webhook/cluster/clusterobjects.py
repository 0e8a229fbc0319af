"""Reading what runs in a cluster, for ``audit``, ``explain`` and ``check --kubeconfig``.

Lists go page by page (``limit``/``continue``) through the project's own client, and each
page is handed on and dropped before the next is read, so a cluster with 100,000 pods is
listed in the memory of one page. Items of a list carry no ``apiVersion`` and ``kind``
(the list does); they are set on each item so that the engine reads them as objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiEndpoint, ApiError, Expired
from webhook.cluster.sources.devicesource import GROUP_VERSION_PATH, PATHS, read_devices
from webhook.cluster.sources.inventorysource import NODES_PATH, RUNTIME_CLASSES_PATH
from webhook.cluster.sources.poolsource import list_pools
from webhook.engine.demand.gpuaccess import nvidia_classes
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.kube.workloads import POD, KindTable, WorkloadKind
from webhook.engine.resources.inventory import Inventory, node_from_json
from webhook.engine.resources.nodepools import PoolInventory
from webhook.engine.resources.quotas import Quotas, quota_from_json

PAGE_SIZE = 500
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
LIST_ATTEMPTS = 3
Progress = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class ListedKind:
    """A workload kind the cluster serves, and where its collection lives."""

    kind: WorkloadKind
    group_version: str  # "v1", "apps/v1", "kubeflow.org/v1"

    @property
    def base(self) -> str:
        return (
            f"/api/{self.group_version}"
            if "/" not in self.group_version
            else (f"/apis/{self.group_version}")
        )

    def path(self, namespace: str | None) -> str:
        where = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
        return f"{self.base}{where}/{self.kind.resource}"


class ClusterObjects:
    """One API server's workloads, namespaces, nodes, pods and events, read on demand."""

    def __init__(
        self,
        endpoint: ApiEndpoint,
        *,
        request_timeout_seconds: float = 30.0,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.endpoint = endpoint
        self.page_size = page_size
        self._client = ApiClient(endpoint, request_timeout_seconds=request_timeout_seconds)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ClusterObjects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> ApiClient:
        return self._client

    def served_kinds(
        self, kinds: KindTable, wanted: Callable[[WorkloadKind], bool]
    ) -> tuple[list[ListedKind], list[str]]:
        """The wanted kinds the cluster serves, in the preferred version of their group,
        owners before pods; and a note per group that is not installed."""
        found: list[ListedKind] = []
        missing: list[str] = []
        versions: dict[str, str | None] = {}
        resources: dict[str, set[str]] = {}
        for kind in kinds:
            if not wanted(kind):
                continue
            if kind.group not in versions:
                versions[kind.group] = self._preferred_version(kind.group)
            version = versions[kind.group]
            if version is None:
                missing.append(f"{kind.kind}.{kind.group}: the API group is not served")
                continue
            if version not in resources:
                resources[version] = self._resource_names(version)
            if kind.resource not in resources[version]:
                missing.append(
                    f"{kind.kind}.{kind.group or 'core'}: {version} has no {kind.resource}"
                )
                continue
            listed = ListedKind(kind=kind, group_version=version)
            # Two layouts of one kind (MPIJob v1 and v1alpha1) are one collection: listed
            # once, each object then read by the layout of its own apiVersion.
            if all(f.path(None) != listed.path(None) for f in found):
                found.append(listed)
        found.sort(key=lambda k: k.kind is POD)
        return found, missing

    def _preferred_version(self, group: str) -> str | None:
        if not group:
            return "v1"
        try:
            body = self._client.get(f"/apis/{group}")
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        preferred = body.get("preferredVersion")
        version = preferred.get("groupVersion") if isinstance(preferred, Mapping) else None
        return str(version) if version else None

    def _resource_names(self, group_version: str) -> set[str]:
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        body = self._client.get(path)
        listed = body.get("resources")
        return {
            str(r.get("name"))
            for r in listed or []
            if isinstance(r, Mapping) and "/" not in str(r.get("name"))
        }

    def objects(
        self,
        listed: ListedKind,
        *,
        namespace: str | None = None,
        progress: Progress | None = None,
    ) -> Iterator[Mapping[str, Any]]:
        """Every object of one kind, page by page, with ``apiVersion`` and ``kind`` set.

        A ``continue`` token that expires (410) while a long list is read starts the list
        again, skipping the objects already handed out (by uid)."""
        seen: set[str] | None = None
        count = 0
        for attempt in range(1, LIST_ATTEMPTS + 1):
            handed: set[str] = set()
            try:
                for page in self._client.pages(listed.path(namespace), limit=self.page_size):
                    for item in page.items:
                        uid = str((item.get("metadata") or {}).get("uid") or "")
                        if seen is not None and uid in seen:
                            continue
                        handed.add(uid)
                        count += 1
                        # The page is ours and dropped after this: set the two fields in
                        # place rather than copy 10,000 pods.
                        item["apiVersion"] = listed.group_version
                        item["kind"] = listed.kind.kind
                        yield item
                    if progress is not None:
                        progress(listed.kind.kind, count)
                return
            except Expired:
                if attempt == LIST_ATTEMPTS:
                    raise
                seen = handed if seen is None else seen | handed

    def claim_objects(
        self, *, namespace: str | None = None, progress: Progress | None = None
    ) -> Iterator[Mapping[str, Any]]:
        """Every ResourceClaim and ResourceClaimTemplate, page by page, with ``apiVersion``
        and ``kind`` set: the server judges both on create (deploy/base/webhooks.yaml), so
        an audit judges them too. Nothing where the cluster serves no resource.k8s.io/v1."""
        if not self._client.serves(GROUP_VERSION_PATH):
            return
        for kind in CLAIM_KINDS:
            path = PATHS[kind]
            if namespace:
                resource = path.rsplit("/", 1)[1]
                path = f"{GROUP_VERSION_PATH}/namespaces/{quote(namespace, safe='')}/{resource}"
            count = 0
            for page in self._client.pages(path, limit=self.page_size):
                for item in page.items:
                    count += 1
                    item["apiVersion"] = "resource.k8s.io/v1"
                    item["kind"] = kind
                    yield item
                if progress is not None:
                    progress(kind, count)

    def namespace_labels(self) -> dict[str, Mapping[str, str]]:
        labels: dict[str, Mapping[str, str]] = {}
        for page in self._client.pages("/api/v1/namespaces", limit=self.page_size):
            for item in page.items:
                meta = item.get("metadata") or {}
                raw = meta.get("labels")
                labels[str(meta.get("name", ""))] = (
                    {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
                )
        return labels

    def inventory(self) -> Inventory:
        nodes, version = self._client.list(NODES_PATH, parse=node_from_json, limit=self.page_size)
        return Inventory(nodes, resource_version=version, source=self.endpoint.host)

    def pools(self) -> PoolInventory:
        """The cluster's autoscaler objects (Karpenter NodePools, node classes, the
        cluster-autoscaler status, GKE ComputeClasses): nodes that could exist."""
        return list_pools(self._client)

    def view(self, notices: list[str] | None = None) -> InventoryView:
        """Every source the server reads, once: nodes, the DRA objects (device classes,
        slices, claims, templates and DeviceTaintRules where served), RuntimeClasses,
        ResourceQuotas and the autoscalers' objects (nodes that could exist).
        What cannot be read for want of RBAC (403) is left out, with a notice, and the
        checks that need it are skipped; nodes are required."""
        said = notices if notices is not None else []
        devices, dra_notices = read_devices(self._client, page_size=self.page_size)
        said.extend(dra_notices)
        classes = self.runtime_classes(said)
        return InventoryView(
            self.inventory(),
            devices=devices,
            runtime_classes=None if classes is None else frozenset(n for n, _ in classes),
            nvidia_runtime_classes=nvidia_classes(classes or ()),
            pools=self.pools(),
            quotas=self._quotas(said),
        )

    def _quotas(self, notices: list[str]) -> Quotas | None:
        try:
            return self.resource_quotas()
        except ApiError as exc:
            # Optional, unlike nodes: whatever stops the list, the rest goes on without.
            notices.append(f"cannot list resourcequotas, so GPU quotas are not judged: {exc}")
            return None

    def runtime_classes(self, notices: list[str]) -> list[tuple[str, str]] | None:
        """The cluster's RuntimeClasses, (name, handler); None when they cannot be read."""
        try:
            classes, _ = self._client.list(
                RUNTIME_CLASSES_PATH,
                parse=lambda o: (
                    str((o.get("metadata") or {}).get("name", "")),
                    str(o.get("handler", "")),
                ),
                limit=self.page_size,
            )
        except ApiError as exc:
            if exc.code not in (403, 404):
                raise
            if exc.code == 403:
                notices.append(
                    f"cannot list runtimeclasses, so runtimeClassName is not checked: {exc}"
                )
            return None
        return list(classes)

    def resource_quotas(self) -> Quotas:
        """Every ResourceQuota of the cluster (issue 26: gpuQuota)."""
        quotas, _ = self._client.list(
            "/api/v1/resourcequotas", parse=quota_from_json, limit=self.page_size
        )
        return Quotas.of(quotas)

    def pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        pod = self._client.get(path)
        return {**pod, "apiVersion": pod.get("apiVersion") or "v1", "kind": "Pod"}

    def scheduling_events(
        self, namespace: str, name: str, uid: str = ""
    ) -> list[Mapping[str, Any]]:
        """The pod's ``FailedScheduling`` events, oldest first."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={name},reason=FailedScheduling"
        if uid:
            selector += f",involvedObject.uid={uid}"
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
        events: list[Mapping[str, Any]] = []
        for page in self._client.pages(
            path, limit=self.page_size, query={"fieldSelector": selector}
        ):
            events.extend(page.items)
        return sorted(events, key=event_time)


def event_time(event: Mapping[str, Any]) -> str:
    """When an event last happened: a series' last observation, else the last timestamp,
    else the event time (``core/v1`` events fill different fields by their origin)."""
    series = event.get("series")
    if isinstance(series, Mapping) and series.get("lastObservedTime"):
        return str(series["lastObservedTime"])
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key):
            return str(event[key])
    return str((event.get("metadata") or {}).get("creationTimestamp") or "")
