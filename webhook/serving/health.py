"""Plain-HTTP ``/healthz``, ``/readyz`` and ``/metrics`` served by the gunicorn master.

One place answers for the whole server: readiness is "every live worker reported ready"
and metrics merge every worker's samples, both read from the prometheus multiprocess
files. Kubelet probes and Prometheus then need no TLS and no client certificate, and a
probe never waits behind admission reviews in a worker's queue.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from webhook.admission.service import NOT_SYNCED
from webhook.serving import metrics


def readiness(ready: bool | None, reason: str = "") -> tuple[int, str]:
    """What ``/readyz`` answers, the same on the health port and the TLS port."""
    if ready:
        return 200, "ready\n"
    why = reason or ("workers starting" if ready is None else NOT_SYNCED)
    return 503, f"not ready: {why}\n"


class _Handler(BaseHTTPRequestHandler):
    server_version = "gpu-webhook"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        if path == "/healthz":
            self._send(200, b"ok\n")
        elif path == "/readyz":
            code, text = readiness(metrics.all_workers_ready())
            self._send(code, text.encode())
        elif path == "/metrics":
            body, content_type = metrics.exposition()
            self._send(200, body, content_type)
        else:
            self._send(404, b"not found\n")

    def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds are not worth a log line."""


class HealthServer:
    def __init__(self, host: str, port: int) -> None:
        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
