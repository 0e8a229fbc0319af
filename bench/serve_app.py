"""Serve the webhook, a do-nothing Flask app or a do-nothing WSGI app with the *same*
gunicorn configuration.

Used by ``bench/admission.py`` (``noop``) and ``bench/admission_floor.py`` (``floor``); run
from the repository root: ``python bench/serve_app.py {webhook,noop,floor} PORT CERT_DIR``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from webhook.serving import config
from webhook.serving.config import Settings

NOOP_ANSWER = json.dumps(
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"allowed": True}}
)


def noop_app(settings: Settings) -> tuple[Any, Any]:  # noqa: ARG001
    from flask import Flask, Response, request

    app = Flask("noop")

    @app.post("/mutate")
    @app.post("/validate")
    def answer() -> Response:
        request.get_data()
        return Response(NOOP_ANSWER, mimetype="application/json")

    return app, lambda: None


def floor_app(settings: Settings) -> tuple[Any, Any]:  # noqa: ARG001
    """What ``bench/go/noopwebhook`` does, as a WSGI app: decode the review for its uid and
    allow it. Served by the webhook's own worker, it is the floor of that serving path."""
    import orjson

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        review = orjson.loads(environ["wsgi.input"].read())
        uid = (review.get("request") or {}).get("uid", "")
        response = {"uid": uid, "allowed": True}
        head = {"apiVersion": review.get("apiVersion"), "kind": review.get("kind")}
        answer = orjson.dumps({**head, "response": response})
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))]
        start_response("200 OK", headers)
        return [answer]

    return app, lambda: None


def main() -> None:
    which, port, cert_dir = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    config.use_multiprocess_metrics(tempfile.mkdtemp(prefix="bench-metrics-"))
    from webhook.serving.server import WebhookServer, webhook_app

    settings = Settings(
        host="127.0.0.1",
        port=port,
        health_port=0,
        cert_dir=cert_dir,
        rules=Path("rules"),
        inventory=Path("examples/inventory.yaml"),
        workers=2,
        log_level="info",
    )
    factory = {"webhook": webhook_app, "noop": noop_app, "floor": floor_app}[which]
    WebhookServer(settings, app_factory=factory).run()


if __name__ == "__main__":
    main()
