"""A loopback API server large enough for ``helm template --dry-run=server``, ``helm install``
and ``helm upgrade`` of the chart.

Helm asks the cluster for discovery (to map each rendered kind to its resource), a GET of
each object it would create or adopt, the chart's ``lookup`` calls, and its release records
(Secrets labelled ``owner=helm``, listed by label selector). Objects are kept by API path in
``objects``: a create stores one (409 if it exists), a GET or list answers from them, and a
write with ``?dryRun=`` stores nothing. Helm 4 writes with server-side apply (helm/helm v4.1.4
``pkg/kube/client.go``, ``patchResourceServerSide``: a PATCH of the whole object as
``application/apply-patch+yaml``, field manager ``helm``), which creates an object that does
not exist and otherwise merges the fields sent into it (maps merged, lists replaced: enough
for objects one manager owns); any other PATCH type is refused with 415, as a server without
server-side apply would. Every request is recorded, writes with their content type and body,
so a test can say what helm sent.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

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
    "apiextensions.k8s.io/v1": [
        ("customresourcedefinitions", "CustomResourceDefinition", False),
    ],
}  # fmt: skip
KINDS = {plural: kind for rows in RESOURCES.values() for plural, kind, _ in rows}
APPLY_PATCH = "application/apply-patch+yaml"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": reason, "message": message, "code": code}  # fmt: skip


NOT_FOUND = _status(404, "NotFound", "not found")


@dataclass(frozen=True)
class Write:
    """A request that would change the cluster, as helm sent it."""

    method: str
    path: str
    content_type: str
    body: dict[str, Any]
    dry_run: bool


@dataclass
class ChartCluster:
    url: str = ""
    # Objects by API path (/api/v1/namespaces/ns/secrets/name).
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    _version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(
        self, method: str, target: str, body: bytes, content_type: str = ""
    ) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(f"{method} {target}")
            url = urlsplit(target)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if method == "GET":
                return self._get(url.path, query)
            sent = _decoded(body, content_type)
            self.writes.append(Write(method, url.path, content_type.partition(";")[0],
                                     sent or {}, "dryRun" in query))  # fmt: skip
            return self._write(method, url.path, sent or {}, content_type, "dryRun" in query)

    def _get(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
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
        plural = path.rsplit("/", 1)[-1]
        if plural in KINDS:
            items = [
                obj for key, obj in sorted(self.objects.items())
                if key.rsplit("/", 1)[0] == path
                and _selects(query.get("labelSelector", ""), obj["metadata"].get("labels") or {})
            ]  # fmt: skip
            meta = {"resourceVersion": str(self._version)}
            return 200, {"kind": f"{KINDS[plural]}List", "apiVersion": "v1", "metadata": meta,
                         "items": items}  # fmt: skip
        return 404, NOT_FOUND

    def _write(
        self, method: str, path: str, sent: dict[str, Any], content_type: str, dry_run: bool
    ) -> tuple[int, Any]:
        if method == "POST":
            path = f"{path}/{sent.get('metadata', {}).get('name', '')}"
        stored = self.objects.get(path)
        if method == "DELETE":
            if stored is None:
                return 404, NOT_FOUND
            if not dry_run:
                del self.objects[path]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if method == "POST" and stored is not None:
            return 409, _status(409, "AlreadyExists", f"{path} already exists")
        if method == "PUT" and stored is None:
            return 404, NOT_FOUND
        if method == "PATCH":
            if not content_type.startswith(APPLY_PATCH):
                return 415, _status(415, "UnsupportedMediaType", f"{content_type}: apply only")
            sent = _merged(stored or {}, sent)
        obj = self._stamped(sent, path, stored)
        if not dry_run:
            self.objects[path] = obj
        return (201 if stored is None else 200), obj

    def _stamped(
        self, sent: dict[str, Any], path: str, stored: dict[str, Any] | None
    ) -> dict[str, Any]:
        """What the API server fills in: uid and creation time kept, a new resourceVersion."""
        self._version += 1
        obj = copy.deepcopy(sent)
        meta = obj.setdefault("metadata", {})
        before = (stored or {}).get("metadata", {})
        meta["uid"] = before.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = before.get("creationTimestamp") or "2026-01-01T00:00:00Z"
        meta["resourceVersion"] = str(self._version)
        parts = path.split("/")
        if "namespaces" in parts[:-2]:
            meta["namespace"] = parts[parts.index("namespaces") + 1]
        if obj.get("kind") == "CustomResourceDefinition":
            # Established at once: helm (with --wait) waits for it before using the kind.
            obj["status"] = {"conditions": [{"type": "Established", "status": "True"},
                                            {"type": "NamesAccepted", "status": "True"}],
                             "acceptedNames": obj.get("spec", {}).get("names", {})}  # fmt: skip
        return obj

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))  # fmt: skip
        return path


def _decoded(body: bytes, content_type: str) -> dict[str, Any]:
    """A request body: JSON or YAML, or a Secret as protobuf, which helm's release storage
    (a typed client-go client) sends."""
    if not body:
        return {}
    if content_type.startswith(PROTOBUF):
        return _secret(body)
    return yaml.safe_load(body) or {}


PROTOBUF = "application/vnd.kubernetes.protobuf"
# Field numbers of k8s.io/apimachinery runtime.Unknown (typeMeta 1, raw 2), TypeMeta
# (apiVersion 1, kind 2), ObjectMeta (name 1, namespace 3, labels 11, annotations 12) and
# core/v1 Secret (metadata 1, data 2, type 3): their generated.proto files.
_UNKNOWN_TYPE, _UNKNOWN_RAW = 1, 2
_SECRET_META, _SECRET_DATA, _SECRET_TYPE = 1, 2, 3
_META_STRINGS = {1: "name", 3: "namespace"}
_META_MAPS = {11: "labels", 12: "annotations"}


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a protobuf message: varints and length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 2:
            size = varint()
            out.append((number, data[i : i + size]))
            i += size
        else:
            raise ValueError(f"protobuf wire type {wire} is not used by a Secret")
    return out


def _entry(data: bytes) -> tuple[str, bytes]:
    pairs = dict(_fields(data))
    key, value = pairs.get(1, b""), pairs.get(2, b"")
    assert isinstance(key, bytes)
    assert isinstance(value, bytes)
    return key.decode(), value


def _secret(body: bytes) -> dict[str, Any]:
    if not body.startswith(b"k8s\x00"):
        raise ValueError("protobuf body without the k8s envelope")
    envelope = dict(_fields(body[4:]))
    raw = envelope[_UNKNOWN_RAW]
    assert isinstance(raw, bytes)
    meta: dict[str, Any] = {}
    secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": meta}
    for number, value in _fields(raw):
        if not isinstance(value, bytes):  # immutable: unset
            continue
        if number == _SECRET_META:
            for field_number, part in _fields(value):
                if not isinstance(part, bytes):  # generation and the like: unset
                    continue
                if field_number in _META_STRINGS:
                    meta[_META_STRINGS[field_number]] = part.decode()
                elif field_number in _META_MAPS:
                    key, item = _entry(part)
                    meta.setdefault(_META_MAPS[field_number], {})[key] = item.decode()
        elif number == _SECRET_DATA:
            key, item = _entry(value)
            secret.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == _SECRET_TYPE:
            secret["type"] = value.decode()
    return secret


def _merged(stored: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply by one manager, simplified: the fields sent win, maps merge."""
    out = copy.deepcopy(stored)
    for key, value in sent.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (``a=b,c!=d,e``): what helm's release storage sends."""
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def _group(version: str) -> dict[str, Any]:
    name, number = version.split("/")
    entry = {"groupVersion": version, "version": number}
    return {"name": name, "versions": [entry], "preferredVersion": entry}


def _resources(version: str) -> dict[str, Any]:
    verbs = ["get", "list", "create", "update", "patch", "delete"]
    rows = [
        {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
         "verbs": verbs}
        for plural, kind, namespaced in RESOURCES[version]
    ]  # fmt: skip
    return {"kind": "APIResourceList", "groupVersion": version, "resources": rows}


@contextmanager
def chart_cluster() -> Iterator[ChartCluster]:
    cluster = ChartCluster()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type") or ""
            status, obj = cluster.answer(self.command, self.path, body, content_type)
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

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
