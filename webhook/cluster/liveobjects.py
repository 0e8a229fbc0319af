"""Single reads for the server's reviews: a claim, claim template or device class the watch
has not delivered yet, and the pods that name a new claim (``webhook.admission.lookups``).

Each call is bounded by the time the review has left; an error, a 403 or a timeout is "not
read" (the review goes on with the warning it would have given anyway), never a failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiEndpoint, ApiError
from webhook.cluster.sources.devicesource import GROUP_VERSION_PATH
from webhook.engine.evaluation.references import (
    DEVICE_CLASS,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    Reference,
)
from webhook.engine.evaluation.request import Resource

log = logging.getLogger("gpu_webhook.lookups")

_RESOURCES = {
    RESOURCE_CLAIM: "resourceclaims",
    RESOURCE_CLAIM_TEMPLATE: "resourceclaimtemplates",
}
# Pods per page when looking for those that name a claim: one page is what most
# namespaces hold; a larger namespace is read page by page until the budget ends.
POD_PAGE = 500


def object_path(ref: Reference) -> str:
    name = quote(ref.name, safe="")
    if ref.kind == DEVICE_CLASS:
        return f"{GROUP_VERSION_PATH}/deviceclasses/{name}"
    namespace = quote(ref.namespace, safe="")
    return f"{GROUP_VERSION_PATH}/namespaces/{namespace}/{_RESOURCES[ref.kind]}/{name}"


def workload_path(target: Resource, namespace: str) -> str:
    """``/apis/<group>/<version>/namespaces/<ns>/<resource>/<name>`` (``/api/v1`` for the
    core group)."""
    names = (target.group, target.version, namespace, target.resource, target.name)
    group, version, ns, resource, name = (quote(n, safe="") for n in names)
    root = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return f"{root}/namespaces/{ns}/{resource}/{name}"


class LiveObjects:
    """``webhook.admission.lookups.ClusterReader`` on one API server."""

    def __init__(self, endpoint: ApiEndpoint) -> None:
        self._client = ApiClient(endpoint)

    def close(self) -> None:
        self._client.close()

    def read(self, ref: Reference, *, timeout: float) -> Mapping[str, Any] | None:
        try:
            obj = self._client.get(object_path(ref), timeout_seconds=timeout)
        except ApiError as exc:
            if exc.code != 404:
                log.info("cannot read %s %s/%s: %s", ref.kind, ref.namespace, ref.name, exc)
            return None
        # A GET names its kind; set both in case a proxy strips them, as lists do.
        return {**obj, "apiVersion": "resource.k8s.io/v1", "kind": ref.kind}

    def workload(
        self, target: Resource, namespace: str, *, timeout: float
    ) -> tuple[Mapping[str, Any] | None, str]:
        """The parent of a ``scale`` request, at the version the request names (its layout
        of pod templates is that version's); an error says what could not be read."""
        path = workload_path(target, namespace)
        qualified = f"{target.resource}.{target.group}" if target.group else target.resource
        what = f"{qualified} {namespace}/{target.name}"
        try:
            obj = self._client.get(path, timeout_seconds=timeout)
        except ApiError as exc:
            log.info("cannot read %s: %s", what, exc)
            if exc.code == 404:
                return None, f"{what} was not found"
            if exc.code == 403:
                return None, (
                    f"reading {what} was forbidden (the webhook's ClusterRole needs get on "
                    f"{target.resource})"
                )
            return None, f"{what} could not be read ({str(exc)[:120]})"
        if not obj.get("apiVersion") or not obj.get("kind"):
            return None, f"{what} was read without its apiVersion and kind"
        return obj, ""

    def pods_naming(
        self, namespace: str, claim: str, *, timeout: float
    ) -> tuple[list[Mapping[str, Any]], bool]:
        deadline = time.monotonic() + timeout
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        found: list[Mapping[str, Any]] = []
        token = ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return found, False
            query: dict[str, str | int] = {"limit": POD_PAGE}
            if token:
                query["continue"] = token
            try:
                page = self._client.get(path, query, timeout_seconds=left)
            except ApiError as exc:
                log.info("cannot list pods in %s: %s", namespace, exc)
                return found, False
            found.extend(
                {**pod, "apiVersion": "v1", "kind": "Pod"}
                for pod in page.get("items") or ()
                if isinstance(pod, Mapping) and _names(pod, claim)
            )
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return found, True


def _names(pod: Mapping[str, Any], claim: str) -> bool:
    spec = pod.get("spec")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    return any(
        isinstance(e, Mapping) and e.get("resourceClaimName") == claim for e in entries or ()
    )
