"""List answers in the shape the API server sends (recorded in node-list-page1.json): the
list's kind and apiVersion, items without either, and ``metadata.continue`` with
``remainingItemCount`` on every page but the last."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tests.cluster.replayserver import Body


def continue_token(resource_version: int, start: str) -> str:
    """What kube-apiserver's etcd3 store encodes (``{"v":"meta.k8s.io/v1","rv":..,"start":..}``)."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start + "\u0000"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def list_pages(
    list_kind: str,
    api_version: str,
    items: Sequence[Mapping[str, Any]],
    *,
    page_size: int,
    resource_version: int = 4242,
) -> list[bytes]:
    pages = []
    for start in range(0, max(len(items), 1), page_size):
        chunk = [_bare(i) for i in items[start : start + page_size]]
        meta: dict[str, Any] = {"resourceVersion": str(resource_version)}
        rest = len(items) - start - len(chunk)
        if rest > 0:
            last = chunk[-1]["metadata"]
            meta["continue"] = continue_token(
                resource_version, f"/{last.get('namespace', '')}/{last['name']}"
            )
            meta["remainingItemCount"] = rest
        pages.append(
            json.dumps(
                {"kind": list_kind, "apiVersion": api_version, "metadata": meta, "items": chunk}
            ).encode()
        )
    return pages


def list_bodies(*args: Any, **kwargs: Any) -> list[Body]:
    return [Body(page) for page in list_pages(*args, **kwargs)]


def _bare(item: Mapping[str, Any]) -> dict[str, Any]:
    """Items of a list carry no kind or apiVersion."""
    return {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}


def discovery(group_version: str, resources: Sequence[str]) -> bytes:
    return json.dumps(
        {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": [
                {"name": r, "namespaced": True, "kind": r[:-1].capitalize(), "verbs": ["list"]}
                for r in resources
            ],
        }
    ).encode()


def api_group(group: str, version: str) -> bytes:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return json.dumps(
        {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": [gv],
            "preferredVersion": gv,
        }
    ).encode()
