"""A real HTTP server on 127.0.0.1 that replays an API server's recorded bytes.

Tests script what each request gets: list requests and watch requests each take the next
answer of their own queue. A watch answer streams its lines as HTTP/1.1 chunks, as the API
server does, and may pause on a gate, end cleanly, drop the connection mid-stream, or stay
open like an idle watch until the server stops.

Objects of the scripted collections (``collection_lists``, ``collection_watches``) are
remembered as they are served, and a PUT of one's status subresource is answered as the API
server answers it: 409 Conflict when its resourceVersion is not the stored one (optimistic
concurrency), 422 without one (custom resources allow no unconditional update), else the
stored object with the new status and a new resourceVersion.

Objects put in ``stored`` by path (the webhook configurations) are answered on GET and
take JSON Patches (RFC 6902) as the API server does: a failed ``test`` or a path that does
not apply is 422 Invalid, else the object is patched and gets a new resourceVersion.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch

from tests.builders import APISERVER as FIXTURES

RUNTIME_CLASSES = "/apis/node.k8s.io/v1/runtimeclasses"
RESOURCE_QUOTAS = "/api/v1/resourcequotas"
# What a cluster without ResourceQuotas answers: the list unscripted tests get.
NO_RESOURCE_QUOTAS = json.dumps(
    {
        "kind": "ResourceQuotaList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "1"},
        "items": [],
    }
).encode()
# What a cluster without RuntimeClasses answers: the list unscripted tests get.
NO_RUNTIME_CLASSES = json.dumps(
    {
        "kind": "RuntimeClassList",
        "apiVersion": "node.k8s.io/v1",
        "metadata": {"resourceVersion": "1"},
        "items": [],
    }
).encode()


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture_lines(name: str) -> list[bytes]:
    return [line + b"\n" for line in fixture(name).splitlines() if line.strip()]


def recorded_headers(name: str) -> list[tuple[str, str]]:
    """The API server's own headers, minus those this server sets itself."""
    out = []
    for line in fixture(name).decode().splitlines()[1:]:
        key, _, value = line.partition(":")
        if key and key.lower() not in ("transfer-encoding", "content-length", "date"):
            out.append((key.strip(), value.strip()))
    return out


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a test stopping its source) is expected, not news."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            super().handle_error(request, client_address)


@dataclass
class Body:
    """A whole answer: a list page or an error ``Status``."""

    data: bytes
    status: int = 200
    delay_seconds: float = 0.0
    # Answered only once this is set (or the server stops).
    gate: threading.Event | None = None


@dataclass
class Stream:
    """A watch answer. Items are lines (bytes) or gates (``threading.Event``) to wait on.

    ``end``: ``"close"`` ends the chunked body properly (the server's ``timeoutSeconds``),
    ``"drop"`` closes the socket mid-body, ``"hold"`` keeps it open until the server stops.
    """

    items: list[bytes | threading.Event]
    end: str = "close"
    headers: list[tuple[str, str]] = field(
        default_factory=lambda: recorded_headers("watch-stream.headers")
    )


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class Write:
    method: str
    path: str
    body: Any


class ReplayServer:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        # Answers for nodes; namespaces get their own queues (unscripted watches stay idle).
        self.lists: deque[Body] = deque()
        self.watches: deque[Stream | Body] = deque()
        self.namespace_lists: deque[Body] = deque()
        self.namespace_watches: deque[Stream | Body] = deque()
        # Any other path: its answers in order; the last one repeats (discovery, a pod).
        self.routes: dict[str, deque[Body]] = {}
        # DRA (resource.k8s.io/v1): discovery answers 404 (a cluster without DRA) unless
        # ``dra_served``; then each collection takes answers from its own queues.
        self.dra_served = False
        self.dra_lists: dict[str, deque[Body]] = {}
        self.dra_watches: dict[str, deque[Stream | Body]] = {}
        # Autoscaler collections (NodePools, node classes, ComputeClasses) by path: lists
        # and watches, each from its own queue; an unscripted watch stays idle.
        self.collection_lists: dict[str, deque[Body]] = {}
        self.collection_watches: dict[str, deque[Stream | Body]] = {}
        self.runtime_class_lists: deque[Body] = deque()
        self.runtime_class_watches: deque[Stream | Body] = deque()
        self.quota_lists: deque[Body] = deque()
        self.quota_watches: deque[Stream | Body] = deque()
        self.requests: list[Request] = []
        # Writes (POST, PUT: a Lease, a status): each recorded with its JSON body and
        # answered with that body, unless ``write_answers`` has one for its path.
        self.writes: list[Write] = []
        self.write_answers: dict[str, deque[Body]] = {}
        # Objects of the scripted collections as last served, by object path; and the
        # newest resourceVersion served or written (etcd's revision).
        self.objects: dict[str, dict[str, Any]] = {}
        # Objects read by GET and written by JSON Patch, by path (see the module's docstring).
        self.stored: dict[str, dict[str, Any]] = {}
        self._revision = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as the API server's every connection has it (golang/go,
            # src/net/tcpsock.go, newTCPConn: setNoDelay(fd, true)). Without it a kept-alive
            # client's request waits about 40 ms for each answer: the handler writes the
            # headers, then the body, which Nagle holds until the client's delayed ACK of
            # the headers. A live audit makes about 25 requests (1.3 s a case, 0.1 s with it).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read ``requests`` instead."""

            def do_GET(self) -> None:
                server._serve(self)

            def do_PUT(self) -> None:
                server._write(self, "PUT")

            def do_POST(self) -> None:
                server._write(self, "POST")

            def do_PATCH(self) -> None:
                server._patch(self)

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.scheme = "http"
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self.scheme}://{host!s}:{port}"

    def start(self) -> ReplayServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def watch_requests(self) -> list[Request]:
        """Watches of core resources (RuntimeClasses: ``runtime_class_requests``)."""
        with self._lock:
            return [r for r in self.requests if r.query.get("watch") and _core(r.path)]

    def list_requests(self) -> list[Request]:
        """Lists of core resources (RuntimeClasses: ``runtime_class_requests``)."""
        with self._lock:
            return [r for r in self.requests if not r.query.get("watch") and _core(r.path)]

    def dra_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path.startswith(DRA_PATH)]

    def collection_requests(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def quota_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == RESOURCE_QUOTAS]

    def runtime_class_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == RUNTIME_CLASSES]

    def written(self, path: str) -> list[Write]:
        with self._lock:
            return [w for w in self.writes if w.path == path]

    def _write(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length) or b"null")
        path = urlsplit(handler.path).path
        with self._lock:
            self.writes.append(Write(method, path, body))
            queue = self.write_answers.get(path)
            answer = queue.popleft() if queue else None
            if answer is None and method == "PUT":
                answer = self._status_update(path, body)
        if answer is None:
            answer = Body(json.dumps(body).encode(), 201 if method == "POST" else 200)
        self._body(handler, answer)

    def store(self, path: str, obj: dict[str, Any]) -> None:
        """Keep ``obj`` at ``path`` with a new resourceVersion (as a write by anyone)."""
        with self._lock:
            self._revision += 1
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self._revision)
            self.stored[path] = obj

    def _patch(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length) or b"null")
        path = urlsplit(handler.path).path
        with self._lock:
            self.writes.append(Write("PATCH", path, body))
            stored = self.stored.get(path)
            if stored is None:
                answer = Body(status_body(404, "NotFound", f"{path} not found"), 404)
            else:
                answer = self._patched(path, stored, body, handler.headers.get("Content-Type"))
        self._body(handler, answer)

    def _patched(self, path: str, stored: dict[str, Any], ops: Any, media: str | None) -> Body:
        """A JSON Patch applied as the API server applies it (k8s.io/apiserver
        pkg/endpoints/handlers/patch.go, ``jsonPatcher``: an error of the patch, a failed
        ``test`` among them, is 422 Invalid). Called under the lock."""
        if media != "application/json-patch+json":
            return Body(status_body(415, "UnsupportedMediaType", str(media)), 415)
        try:
            patched = jsonpatch.apply_patch(stored, ops)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            message = f"the server rejected our request due to an error in our request: {exc}"
            return Body(status_body(422, "Invalid", message), 422)
        self._revision += 1
        patched["metadata"]["resourceVersion"] = str(self._revision)
        self.stored[path] = patched
        return Body(json.dumps(patched).encode())

    def _status_update(self, path: str, body: Any) -> Body | None:
        """A PUT to a remembered object's status subresource, as the API server's generic
        store answers it (k8s.io/apiserver pkg/registry/generic/registry/store.go,
        ``Update``: a resourceVersion that is not the stored one is a Conflict with
        ``OptimisticLockErrorMsg``); None for any other write. Called under the lock."""
        stored = self.objects.get(path.removesuffix("/status"))
        if not path.endswith("/status") or stored is None:
            return None
        resource, name = path.removesuffix("/status").split("/")[-2:]
        group = path.split("/")[2] if path.startswith("/apis/") else ""
        qualified = f"{resource}.{group}" if group else resource
        sent = str(((body or {}).get("metadata") or {}).get("resourceVersion") or "")
        if not sent:
            message = (
                f'{qualified} "{name}" is invalid: metadata.resourceVersion: Invalid value: '
                "0: must be specified for an update"
            )
            return Body(status_body(422, "Invalid", message), 422)
        if sent != stored["metadata"].get("resourceVersion"):
            message = (
                f'Operation cannot be fulfilled on {qualified} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )
            return Body(status_body(409, "Conflict", message), 409)
        self._revision += 1
        updated = {
            **stored,
            "metadata": {**stored["metadata"], "resourceVersion": str(self._revision)},
            "status": (body or {}).get("status"),
        }
        self.objects[path.removesuffix("/status")] = updated
        return Body(json.dumps(updated).encode())

    def _remember(self, path: str, obj: Any, *, deleted: bool = False) -> None:
        """An object of ``path``'s collection as served. Called under the lock."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            return
        meta = obj["metadata"]
        rv = str(meta.get("resourceVersion") or "")
        if rv.isdigit():
            self._revision = max(self._revision, int(rv))
        where = f"{path}/{meta.get('name')}"
        namespace = meta.get("namespace")
        if isinstance(namespace, str) and namespace and "/namespaces/" not in path:
            # A namespaced kind listed across namespaces: its own path names the namespace,
            # as a write to it (its status) does.
            collection, _, resource = path.rpartition("/")
            where = f"{collection}/namespaces/{namespace}/{resource}/{meta.get('name')}"
        stored = str(self.objects.get(where, {}).get("metadata", {}).get("resourceVersion", ""))
        if rv.isdigit() and stored.isdigit() and int(rv) < int(stored):
            return  # a scripted list served again (a relist) is older than a write since
        if deleted:
            self.objects.pop(where, None)
        else:
            self.objects[where] = obj

    def _remember_served(self, path: str, data: bytes, *, watch: bool) -> None:
        """What a list page or a watch line of a scripted collection says exists."""
        try:
            parsed = json.loads(data)
        except ValueError:
            return
        if not isinstance(parsed, dict):
            return
        with self._lock:
            if watch:
                deleted = parsed.get("type") == "DELETED"
                self._remember(path, parsed.get("object"), deleted=deleted)
            else:
                for item in parsed.get("items") or []:
                    self._remember(path, item)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        with self._lock:
            self.requests.append(Request(parts.path, query, dict(handler.headers.items())))
            queue: deque[Any] = deque()
            if parts.path in self.stored:
                queue = deque([Body(json.dumps(self.stored[parts.path]).encode())])
            elif parts.path == "/api/v1/nodes":
                queue = self.watches if query.get("watch") else self.lists
            elif parts.path == "/api/v1/namespaces":
                queue = self.namespace_watches if query.get("watch") else self.namespace_lists
            elif parts.path in self.collection_lists:
                queues = self.collection_watches if query.get("watch") else self.collection_lists
                queue = queues.setdefault(parts.path, deque())
                if len(queue) == 1 and not query.get("watch"):
                    queue = deque(queue)
            elif parts.path in self.routes:
                queue = self.routes[parts.path]
                if len(queue) == 1:
                    queue = deque(queue)
            elif parts.path.startswith(DRA_PATH + "/"):
                resource = parts.path.rsplit("/", 1)[1]
                queues = self.dra_watches if query.get("watch") else self.dra_lists
                queue = queues.setdefault(resource, deque())
            elif parts.path == RUNTIME_CLASSES:
                queue = (
                    self.runtime_class_watches if query.get("watch") else self.runtime_class_lists
                )
            elif parts.path == RESOURCE_QUOTAS:
                queue = self.quota_watches if query.get("watch") else self.quota_lists
            answer = queue.popleft() if queue else None
            if parts.path == DRA_PATH and self.dra_served:
                discovery = {"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1"}
                answer = Body(json.dumps(discovery).encode())
        if answer is None and parts.path == RUNTIME_CLASSES and not query.get("watch"):
            answer = Body(NO_RUNTIME_CLASSES)
        if answer is None and parts.path == RESOURCE_QUOTAS and not query.get("watch"):
            answer = Body(NO_RESOURCE_QUOTAS)
        scripted = parts.path in (
            "/api/v1/nodes",
            "/api/v1/namespaces",
            RUNTIME_CLASSES,
            *self.collection_lists,
            RESOURCE_QUOTAS,
        )
        if answer is None and not scripted and not parts.path.startswith(DRA_PATH + "/"):
            # A path nobody scripted: what the API server says of a group it does not serve.
            answer = Body(
                status_body(404, "NotFound", "the server could not find the requested resource"),
                404,
            )
        if answer is None:
            # Nothing scripted: an idle watch, or a list the test did not expect.
            answer = Stream([], end="hold") if query.get("watch") else Body(b"{}", 500)
        collection = parts.path if parts.path in self.collection_lists else None
        if isinstance(answer, Body):
            if collection is not None and answer.status == 200:
                self._remember_served(collection, answer.data, watch=False)
            self._body(handler, answer)
        else:
            self._stream(handler, answer, collection=collection)

    def _body(self, handler: BaseHTTPRequestHandler, body: Body) -> None:
        if body.delay_seconds and self.stopping.wait(body.delay_seconds):
            return
        while body.gate is not None and not body.gate.wait(0.05):
            if self.stopping.is_set():
                return
        handler.send_response(body.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body.data)))
        handler.end_headers()
        handler.wfile.write(body.data)

    def _stream(
        self, handler: BaseHTTPRequestHandler, stream: Stream, *, collection: str | None = None
    ) -> None:
        handler.send_response(200)
        for key, value in stream.headers:
            handler.send_header(key, value)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.wfile.flush()
        try:
            for item in stream.items:
                if isinstance(item, threading.Event):
                    while not item.wait(0.05):
                        if self.stopping.is_set():
                            return
                    continue
                if collection is not None:
                    self._remember_served(collection, item, watch=True)
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(item), item))
                handler.wfile.flush()
            if stream.end == "close":
                handler.wfile.write(b"0\r\n\r\n")
            elif stream.end == "drop":
                handler.connection.shutdown(socket.SHUT_RDWR)
            else:
                self.stopping.wait()
        except (BrokenPipeError, ConnectionResetError):
            return
        handler.close_connection = True


DRA_PATH = "/apis/resource.k8s.io/v1"


def _core(path: str) -> bool:
    # The cluster-autoscaler's status ConfigMap is read by name: not a list or watch; nor are
    # ResourceQuotas (``quota_requests``).
    return path.startswith("/api/v1/") and "/configmaps/" not in path and path != RESOURCE_QUOTAS


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


def eventually(check: Any, *, timeout: float = 5.0) -> Any:
    """Poll ``check`` until it returns something true; fail with its last value."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(0.01)
        value = check()
    assert value, f"still {value!r} after {timeout} s"
    return value
