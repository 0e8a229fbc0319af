"""A loopback API server just large enough for ``helm template --dry-run=server``.

``--dry-run=server`` makes helm ask the cluster: discovery (to map each rendered kind to its
resource), a GET of each object it would create, and the chart's ``lookup`` calls, answered
from ``objects``. Every request is recorded, so a test can say which lookups were made.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The resources of each group version the chart renders: (plural, kind, namespaced).
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("secrets", "Secret", True), ("configmaps", "ConfigMap", True),
        ("services", "Service", True), ("serviceaccounts", "ServiceAccount", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "batch/v1": [("cronjobs", "CronJob", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False), ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True), ("rolebindings", "RoleBinding", True),
    ],
    "admissionregistration.k8s.io/v1": [
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
    ],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "scheduling.k8s.io/v1": [("priorityclasses", "PriorityClass", False)],
}  # fmt: skip
NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "NotFound",
    "code": 404,
}


@dataclass
class ChartCluster:
    url: str = ""
    # Objects by API path (/api/v1/namespaces/ns/secrets/name).
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        self.requests.append(f"{method} {path}")
        if method != "GET":  # a server-side dry run: what would be stored
            return 201, json.loads(body or b"{}")
        path = path.split("?", 1)[0]
        if path == "/version":
            return 200, {"major": "1", "minor": "36", "gitVersion": "v1.36.0"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group(gv) for gv in RESOURCES if "/" in gv],
            }
        version = path.removeprefix("/apis/").removeprefix("/api/")
        if version in RESOURCES:
            return 200, _resources(version)
        if path in self.objects:
            return 200, self.objects[path]
        if path.rsplit("/", 1)[-1] in {
            plural for rows in RESOURCES.values() for plural, _, _ in rows
        }:
            return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}
        return 404, NOT_FOUND

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))  # fmt: skip
        return path


def _group(version: str) -> dict[str, Any]:
    name, number = version.split("/")
    entry = {"groupVersion": version, "version": number}
    return {"name": name, "versions": [entry], "preferredVersion": entry}


def _resources(version: str) -> dict[str, Any]:
    rows = [
        {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
         "verbs": ["get", "list", "create"]}
        for plural, kind, namespaced in RESOURCES[version]
    ]  # fmt: skip
    return {"kind": "APIResourceList", "groupVersion": version, "resources": rows}


@contextmanager
def chart_cluster() -> Iterator[ChartCluster]:
    cluster = ChartCluster()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, obj = cluster.answer(self.command, self.path, body)
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``requests``."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cluster.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield cluster
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
