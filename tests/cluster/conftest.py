"""A loopback HTTP server that answers like the API server, for the few calls we make.

It keeps objects by path, numbers writes with ``resourceVersion``, answers 404/409/422 with
``Status`` bodies, applies JSON and merge patches, replaces objects on PUT (a stale
``resourceVersion`` is a 409 Conflict, as on the API server), deletes them, lists a
collection page by page (``limit``/``continue``, ``labelSelector`` of ``k=v`` terms; a
path without a namespace lists every namespace), and records every request so tests can
say "the second run only read".
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch
import pytest


@dataclass
class Request:
    method: str
    path: str
    content_type: str
    body: Any
    query: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeApiServer:
    namespaces: set[str] = field(default_factory=set)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    # Called before a request is handled; may answer it instead (status, body).
    intercept: Callable[[Request], tuple[int, dict[str, Any]] | None] | None = None
    url: str = ""
    # Collections that exist while empty (those of a served resource).
    collections: set[str] = field(default_factory=set)
    _version: int = 100

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method != "GET"]

    def put_object(self, path: str, obj: dict[str, Any]) -> None:
        self._version += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        self.objects[path] = obj

    def handle(self, req: Request) -> tuple[int, dict[str, Any]]:
        self.requests.append(req)
        if self.intercept and (answer := self.intercept(req)):
            return answer
        if req.method == "GET":
            if req.path in self.objects:
                return 200, self.objects[req.path]
            members = self._members(req.path)
            if members is not None:
                return self._list(req, members)
            return _status(404, "NotFound", f"{req.path} not found")
        if req.method == "POST":
            return self._create(req)
        if req.method == "PATCH":
            return self._patch(req)
        if req.method == "PUT":
            return self._replace(req)
        if req.method == "DELETE":
            if self.objects.pop(req.path, None) is None:
                return _status(404, "NotFound", f"{req.path} not found")
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return _status(405, "MethodNotAllowed", req.method)

    def _members(self, path: str) -> list[str] | None:
        """Paths of the objects in collection ``path``, or None when it is no collection
        (a collection exists once something was stored in it, or it is in ``collections``)."""
        plural = path.rsplit("/", 1)[-1]
        base = path.rsplit("/", 1)[0]
        found = []
        for key in sorted(self.objects):
            parent, _, _ = key.rpartition("/")
            if parent == path:
                found.append(key)
            elif "/namespaces/" not in path and parent.endswith(f"/{plural}"):
                head = parent.removesuffix(f"/{plural}")
                if head.rpartition("/namespaces/")[0] == base:
                    found.append(key)
        if not found and path not in self.collections:
            return None
        return found

    def _list(self, req: Request, members: list[str]) -> tuple[int, dict[str, Any]]:
        selector = dict(
            term.split("=", 1) for term in req.query.get("labelSelector", "").split(",") if term
        )
        items = [
            self.objects[m]
            for m in members
            if all(
                (self.objects[m]["metadata"].get("labels") or {}).get(k) == v
                for k, v in selector.items()
            )
        ]
        start = int(req.query.get("continue") or 0)
        limit = int(req.query.get("limit") or 0) or len(items) or 1
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(self._version)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        bare = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in page]
        return 200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": bare}

    def _replace(self, req: Request) -> tuple[int, dict[str, Any]]:
        current = self.objects.get(req.path)
        if current is None:
            return _status(404, "NotFound", f"{req.path} not found")
        sent = (req.body.get("metadata") or {}).get("resourceVersion")
        if sent != current["metadata"]["resourceVersion"]:
            return _status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        self.put_object(req.path, req.body)
        return 200, self.objects[req.path]

    def _create(self, req: Request) -> tuple[int, dict[str, Any]]:
        parts = req.path.split("/")
        if "namespaces" in parts:
            namespace = parts[parts.index("namespaces") + 1]
            if namespace not in self.namespaces:
                return _status(404, "NotFound", f'namespaces "{namespace}" not found')
        path = f"{req.path}/{req.body['metadata']['name']}"
        if path in self.objects:
            return _status(409, "AlreadyExists", f"{path} already exists")
        self.put_object(path, req.body)
        return 201, self.objects[path]

    def _patch(self, req: Request) -> tuple[int, dict[str, Any]]:
        current = self.objects.get(req.path)
        if current is None:
            return _status(404, "NotFound", f"{req.path} not found")
        if req.content_type == "application/json-patch+json":
            try:
                patched = jsonpatch.apply_patch(current, req.body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                return _status(422, "Invalid", str(err))
        elif req.content_type == "application/merge-patch+json":
            patched = _merge(current, req.body)
        else:
            return _status(415, "UnsupportedMediaType", req.content_type)
        # As the API server does: a resourceVersion in the patch is a precondition.
        if patched["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified; please try again")
        self.put_object(req.path, patched)
        return 200, self.objects[req.path]


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return code, {**body, "message": message, "reason": reason, "code": code}


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            req = Request(
                method=self.command,
                path=parts.path,
                content_type=self.headers.get("Content-Type", ""),
                body=json.loads(raw) if raw else None,
                query={k: v[0] for k, v in parse_qs(parts.query).items()},
            )
            code, body = api.handle(req)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    api = FakeApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield api
    server.shutdown()
    server.server_close()
    thread.join()
