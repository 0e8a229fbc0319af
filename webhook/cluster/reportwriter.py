"""Writing the audit's PolicyReports into the cluster: create, update, delete stale ones.

Only reports labelled as ours (``app.kubernetes.io/managed-by: gpu-webhook``) are read,
updated or deleted; Kyverno's and others' reports in the same namespaces are left alone.
A report whose results did not change (timestamps aside) is not written again, so an
hourly audit of a quiet cluster writes nothing. Updates carry the ``resourceVersion`` read;
on 409 Conflict the report is read again and the write retried.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiClient, ApiError

log = logging.getLogger("webhook.audit")
GROUP = "wgpolicyk8s.io"
VERSION = "v1alpha2"
BASE = f"/apis/{GROUP}/{VERSION}"
SELECTOR = "app.kubernetes.io/managed-by=gpu-webhook"
ATTEMPTS = 3
CRD_MISSING = (
    "the PolicyReport CRDs (wgpolicyk8s.io/v1alpha2 PolicyReport and ClusterPolicyReport) "
    "are not installed in this cluster, so audit results cannot be written; install them "
    "as docs/deploy.md says (Kyverno installs them too), or turn the background audit off"
)


class CrdMissing(Exception):
    """The cluster does not serve wgpolicyk8s.io/v1alpha2."""


@dataclass(slots=True)
class WriteResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _path(kind: str, namespace: str | None, name: str | None = None) -> str:
    plural = "policyreports" if kind == "PolicyReport" else "clusterpolicyreports"
    where = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    tail = f"/{quote(name, safe='')}" if name else ""
    return f"{BASE}{where}/{plural}{tail}"


def _key(report: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = report.get("metadata") or {}
    return (str(report.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def _label(key: tuple[str, str, str]) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


class ReportWriter:
    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def check_crds(self) -> None:
        """Raise ``CrdMissing`` unless both report kinds are served."""
        try:
            body = self.client.get(BASE)
        except ApiError as exc:
            if exc.code == 404:
                raise CrdMissing(CRD_MISSING) from None
            raise
        names = {str(r.get("name")) for r in body.get("resources") or [] if isinstance(r, Mapping)}
        if not {"policyreports", "clusterpolicyreports"} <= names:
            raise CrdMissing(CRD_MISSING)

    def write(self, reports: Sequence[Mapping[str, Any]]) -> WriteResult:
        """Make the cluster's reports of ours exactly ``reports``."""
        self.check_crds()
        existing = self._ours()
        result = WriteResult()
        wanted = {_key(r): r for r in reports}
        for key, report in wanted.items():
            label = _label(key)
            try:
                self._put(key, report, existing.get(key), result)
            except ApiError as exc:
                log.warning("cannot write %s: %s", label, exc)
                result.failed.append(label)
        for key in existing.keys() - wanted.keys():
            try:
                self.client.send("DELETE", _path(key[0], key[1] or None, key[2]))
                result.deleted.append(_label(key))
            except ApiError as exc:
                if exc.code == 404:  # gone already: what we wanted
                    result.deleted.append(_label(key))
                else:
                    log.warning("cannot delete %s: %s", _label(key), exc)
                    result.failed.append(_label(key))
        return result

    def _ours(self) -> dict[tuple[str, str, str], Mapping[str, Any]]:
        found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for kind in ("PolicyReport", "ClusterPolicyReport"):
            for page in self.client.pages(_path(kind, None), query={"labelSelector": SELECTOR}):
                for item in page.items:
                    found[_key({**item, "kind": kind})] = item
        return found

    def _put(
        self,
        key: tuple[str, str, str],
        report: Mapping[str, Any],
        current: Mapping[str, Any] | None,
        result: WriteResult,
    ) -> None:
        kind, namespace, name = key
        for attempt in range(1, ATTEMPTS + 1):
            try:
                if current is None:
                    self.client.send("POST", _path(kind, namespace or None), report)
                    result.created.append(_label(key))
                    return
                if _same(current, report):
                    result.unchanged.append(_label(key))
                    return
                version = (current.get("metadata") or {}).get("resourceVersion")
                body = {**report, "metadata": {**report["metadata"], "resourceVersion": version}}
                self.client.send("PUT", _path(kind, namespace or None, name), body)
                result.updated.append(_label(key))
                return
            except ApiError as exc:
                # 409: changed since read (update) or created meanwhile (create): read again.
                # 404 on update: deleted meanwhile; create it.
                if exc.code not in (404, 409) or attempt == ATTEMPTS:
                    raise
                current = self._read(kind, namespace, name)
        raise AssertionError("unreachable")

    def _read(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return self.client.get(_path(kind, namespace or None, name))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    def content(report: Mapping[str, Any]) -> Any:
        results = [
            {k: v for k, v in r.items() if k != "timestamp"}
            for r in report.get("results") or []
            if isinstance(r, Mapping)
        ]
        labels = (report.get("metadata") or {}).get("labels") or {}
        return results, report.get("summary"), labels

    return bool(content(current) == content(wanted))
