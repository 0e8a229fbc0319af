"""The Flask app: routes, content checks, error handlers, metrics, one log line per review.

``/metrics`` is not among the routes: this app is served on the webhook port, which every
pod may reach (``deploy/base/networkpolicy.yaml``), and the metrics (rules fired, kinds,
namespaces' traffic) are for Prometheus only, on the health port (``webhook.serving.health``).

Admission logic lives in ``webhook.admission``; this module moves bytes. Malformed calls get
a 4xx with a short JSON reason (never a 500 or a traceback), so the API server's
``failurePolicy`` decides what happens to the object.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from webhook.admission.response import Answer
from webhook.admission.review import MAX_BODY_BYTES, ReviewError, parse_review, read_uid
from webhook.admission.service import AdmissionService
from webhook.serving import metrics
from webhook.serving.config import multiprocess_dir
from webhook.serving.health import readiness
from webhook.serving.logs import review_line

JSON = "application/json"
MAX_LOGGED = 256
log = logging.getLogger("gpu_webhook.app")


def create_app(service: AdmissionService, *, max_body: int = MAX_BODY_BYTES) -> Flask:
    app = Flask("webhook")
    app.config["MAX_CONTENT_LENGTH"] = max_body
    app.wsgi_app = ReviewFastPath(app.wsgi_app, service, max_body=max_body)  # type: ignore[method-assign]

    @app.post("/mutate")
    def mutate() -> Response:
        return _admit(service, "mutate", mutate=True)

    @app.post("/validate")
    def validate() -> Response:
        return _admit(service, "validate", mutate=False)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        # Under the server: every worker's word, as the health port gives it; alone (tests,
        # an embedding app): this service's.
        if multiprocess_dir() is not None:
            code, body = readiness(metrics.all_workers_ready())
        else:
            ready, why = service.ready()
            code, body = readiness(ready, "" if ready else why)
        return Response(body, status=code, mimetype="text/plain")

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        code = error.code or 400
        endpoint = _endpoint_name()
        if endpoint:
            metrics.MALFORMED.labels(endpoint, str(code)).inc()
        review_line(
            "call refused",
            {"endpoint": endpoint or request.path[:100], "status": code, "error": error.name},
            level=logging.WARNING,
        )
        return _error(code, error.name)

    @app.errorhandler(Exception)
    def bug(error: Exception) -> Response:  # noqa: ARG001 - the log has the traceback
        log.exception("internal error answering %s", request.path[:100])
        return _error(500, "internal error")

    return app


def _endpoint_name() -> str:
    path = request.path
    return path[1:] if path in ("/mutate", "/validate") else ""


def _error(code: int, reason: str) -> Response:
    return Response(json.dumps({"error": reason, "code": code}) + "\n", status=code, mimetype=JSON)


def _admit(service: AdmissionService, endpoint: str, *, mutate: bool) -> Response:
    """A review that ``ReviewFastPath`` left to Flask (a chunked body, a wrong type)."""
    started = time.perf_counter()
    if not _is_json(request.environ.get("CONTENT_TYPE", "")):
        return _refuse(endpoint, 415, f"content type must be {JSON}", started)
    body = _body(request.max_content_length or MAX_BODY_BYTES)
    answer = _answer(service, endpoint, body, mutate=mutate, started=started)
    return answer if isinstance(answer, Response) else Response(answer, mimetype=JSON)


def _answer(
    service: AdmissionService, endpoint: str, body: bytes, *, mutate: bool, started: float
) -> bytes | Response:
    """The encoded answer to a review's body, or the refusal of a body that is not one."""
    try:
        admission = parse_review(body)
    except ReviewError as exc:
        return _refuse(endpoint, 400, str(exc), started, uid=read_uid(body))
    outcome = service.review(admission, mutate=mutate)
    answer = outcome.answer
    elapsed = time.perf_counter() - started
    _record(endpoint, service.kind_label(admission), admission.operation, answer, elapsed)
    review_line(
        "review",
        {
            "endpoint": endpoint,
            "uid": _clipped(admission.uid),
            "kind": _clipped(admission.kind),
            "namespace": _clipped(admission.namespace),
            "name": _clipped(admission.name or _generate_name(admission.object)),
            "operation": admission.operation,
            "subresource": _clipped(admission.sub_resource),
            "user": _clipped(admission.user),
            "dry_run": admission.dry_run,
            "decision": answer.verdict,
            "skipped": answer.skipped_because,
            "rules_fired": answer.rules_fired,
            "warnings": len(answer.warnings),
            "patch_ops": answer.patch_ops,
            "rules_generation": answer.rules_generation,
            "duration_ms": round(elapsed * 1000, 3),
        },
    )
    return outcome.encode()


ENDPOINTS = {"/mutate": ("mutate", True), "/validate": ("validate", False)}
StartResponse = Callable[..., Any]


class ReviewFastPath:
    """Reviews as the API server sends them (POST, a declared length within the cap, JSON)
    answered without Flask's request context, URL map and response object, which cost
    about as much per review as everything else outside the engine together. Whatever
    else arrives (other paths and methods, chunked bodies, wrong content types, lengths
    over the cap) goes to Flask as before, and a review here is answered, logged and
    counted exactly as Flask's route and error handlers do."""

    def __init__(self, app: Callable[..., Any], service: AdmissionService, *, max_body: int):
        self.app = app
        self.service = service
        self.max_body = max_body

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        path = environ.get("PATH_INFO", "")
        length = environ.get("CONTENT_LENGTH") or ""
        if (
            path not in ENDPOINTS
            or environ.get("REQUEST_METHOD") != "POST"
            or not length.isdigit()
            or int(length) > self.max_body
            or not _is_json(environ.get("CONTENT_TYPE", ""))
        ):
            return self.app(environ, start_response)
        endpoint, mutate = ENDPOINTS[path]
        started = time.perf_counter()
        try:
            body = environ["wsgi.input"].read(int(length))
            if len(body) < int(length):  # what werkzeug's ClientDisconnected answers
                refusal = _call_refused(endpoint, 400, "Bad Request")
            else:
                answer = _answer(self.service, endpoint, body, mutate=mutate, started=started)
                if not isinstance(answer, Response):
                    headers = [("Content-Type", JSON), ("Content-Length", str(len(answer)))]
                    start_response("200 OK", headers)
                    return [answer]
                refusal = answer
        except Exception:  # what the app's ``bug`` handler does
            log.exception("internal error answering %s", path[:100])
            refusal = _error(500, "internal error")
        return refusal(environ, start_response)


def _call_refused(endpoint: str, code: int, name: str) -> Response:
    metrics.MALFORMED.labels(endpoint, str(code)).inc()
    review_line(
        "call refused",
        {"endpoint": endpoint, "status": code, "error": name},
        level=logging.WARNING,
    )
    return _error(code, name)


def _clipped(text: str) -> str:
    """A request's own text, shortened for the log: a Kubernetes name is at most 253
    characters, and a caller could otherwise make one log line megabytes long."""
    return text if len(text) <= MAX_LOGGED else f"{text[:MAX_LOGGED]}...({len(text)} chars)"


def _body(cap: int) -> bytes:
    """The request body; 413 past ``cap``. A declared length over the cap is refused by
    Flask before anything is read; a chunked body has none, so at most ``cap + 1`` bytes
    of it are read to tell."""
    if request.environ.get("CONTENT_LENGTH"):
        return request.get_data(cache=False)
    body: bytes = request.environ["wsgi.input"].read(cap + 1)
    if len(body) > cap:
        raise RequestEntityTooLarge()
    return body


def _is_json(content_type: str) -> bool:
    """``request.mimetype == JSON`` without werkzeug's header parser, which costs about
    as much as answering a replica from the memo."""
    return content_type.partition(";")[0].strip().lower() == JSON


def _refuse(endpoint: str, code: int, reason: str, started: float, uid: str = "") -> Response:
    metrics.MALFORMED.labels(endpoint, str(code)).inc()
    review_line(
        "call refused",
        {
            "endpoint": endpoint,
            "uid": uid,
            "status": code,
            "error": reason,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        },
        level=logging.WARNING,
    )
    return _error(code, reason)


def _record(endpoint: str, kind: str, operation: str, answer: Answer, elapsed: float) -> None:
    metrics.REVIEWS.add(
        endpoint=endpoint,
        kind=kind,
        operation=operation,
        verdict=answer.verdict,
        seconds=elapsed,
        findings=[(f.id, f.action) for f in answer.findings],
        exceptions=answer.exceptions if endpoint == "validate" else (),
    )


def _generate_name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("generateName") if isinstance(meta, dict) else None
    return str(name) if name else ""
