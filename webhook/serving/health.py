"""Plain-HTTP ``/healthz``, ``/readyz`` and ``/metrics`` served by the gunicorn master.

One place answers for the whole server: readiness is "every live worker reported ready"
and metrics merge every worker's samples, both read from the prometheus multiprocess
files. Kubelet probes and Prometheus then need no TLS and no client certificate, and a
probe never waits behind admission reviews in a worker's queue.

It is one thread running an asyncio loop, so a connection costs no thread. Each connection
gets one request, which must arrive within ``TIMEOUT_SECONDS``; at most
``MAX_CONNECTIONS`` are open, and a new one beyond that closes the one that has waited
longest for its request. Idle or slow clients therefore cannot starve a probe, which sends
its request as soon as it connects. What goes wrong on a connection is not logged: a probe
port sees port scans and half-open connections all day.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable

from webhook.admission.service import NOT_SYNCED
from webhook.serving import metrics

TIMEOUT_SECONDS = 5.0
MAX_CONNECTIONS = 64
MAX_HEAD_BYTES = 8192
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS[503] = "Service Unavailable"


def readiness(ready: bool | None, reason: str = "") -> tuple[int, str]:
    """What ``/readyz`` answers, the same on the health port and the TLS port."""
    if ready:
        return 200, "ready\n"
    why = reason or ("workers starting" if ready is None else NOT_SYNCED)
    return 503, f"not ready: {why}\n"


def answer(
    method: str, path: str, before_scrape: Callable[[], object] | None = None
) -> tuple[int, bytes, str]:
    """Status, body and content type for one request; ``before_scrape`` runs before
    ``/metrics`` is read (what the master refreshes itself: the certificate's expiry)."""
    if method not in ("GET", "HEAD"):
        return 405, b"method not allowed\n", "text/plain"
    path = path.partition("?")[0]
    if path == "/healthz":
        return 200, b"ok\n", "text/plain"
    if path == "/readyz":
        code, text = readiness(metrics.all_workers_ready())
        return code, text.encode(), "text/plain"
    if path == "/metrics":
        if before_scrape is not None:
            # A scrape reports what it can; the TLS context logs its own trouble.
            with contextlib.suppress(OSError, ValueError):  # ssl.SSLError is an OSError
                before_scrape()
        body, content_type = metrics.exposition()
        return 200, body, content_type
    return 404, b"not found\n", "text/plain"


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
        before_scrape: Callable[[], object] | None = None,
    ) -> None:
        self.before_scrape = before_scrape
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=128)
        self.port: int = self._socket.getsockname()[1]
        self.timeout = timeout
        self.max_connections = max_connections
        self._waiting: dict[asyncio.StreamWriter, None] = {}  # oldest first
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = 0
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet)
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop_serving)
            self._thread.join(timeout=self.timeout)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()
        self._socket.close()

    def _stop_serving(self) -> None:
        if self._stopped is not None:
            self._stopped.set()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._client, sock=self._socket)
        async with server:
            await self._stopped.wait()
        for writer in list(self._writers):
            writer.transport.abort()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self.max_connections and self._waiting:
            oldest = next(iter(self._waiting))
            self._waiting.pop(oldest)
            oldest.transport.abort()
        self._open += 1
        self._waiting[writer] = None
        self._writers.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
            self._waiting.pop(writer, None)
            method, path = _request_line(head)
            status, body, content_type = answer(method, path, self.before_scrape)
            writer.write(_response(status, body, content_type, head_only=method == "HEAD"))
            await asyncio.wait_for(writer.drain(), self.timeout)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except (OSError, ValueError):
            pass
        finally:
            self._waiting.pop(writer, None)
            self._writers.discard(writer)
            self._open -= 1
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """Resets and half-open connections are not logged (see the module docstring)."""


def _request_line(head: bytes) -> tuple[str, str]:
    if len(head) > MAX_HEAD_BYTES:
        raise ValueError("head too long")
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[1].startswith("/"):
        return "", ""  # answered 405
    return parts[0], parts[1]


def _response(status: int, body: bytes, content_type: str, *, head_only: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Bad Request')}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\nServer: gpu-webhook\r\n\r\n"
    ).encode()
    return head if head_only else head + body
