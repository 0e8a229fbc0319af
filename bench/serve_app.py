"""Serve the webhook or a do-nothing Flask app with the *same* gunicorn configuration.

Used by ``bench/admission.py``; run from the repository root:
``python bench/serve_app.py {webhook,noop} PORT CERT_DIR``.
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
    factory = webhook_app if which == "webhook" else noop_app
    WebhookServer(settings, app_factory=factory).run()


if __name__ == "__main__":
    main()
