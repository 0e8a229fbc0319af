"""The health port: probes are answered whatever other clients of the port do."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest

from webhook.serving.health import HealthServer


@pytest.fixture
def health():
    server = HealthServer("127.0.0.1", 0, timeout=1.0, max_connections=8)
    server.start()
    yield server
    server.stop()


def get(server, path):
    url = f"http://127.0.0.1:{server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param("/healthz", 200, id="healthz"),
        pytest.param("/healthz?verbose", 200, id="query"),
        pytest.param("/metrics", 200, id="metrics"),
        pytest.param("/nope", 404, id="unknown"),
    ],
)
def test_paths_are_answered(health, path, status):
    assert get(health, path)[0] == status


def test_more_idle_connections_than_the_bound_never_block_a_probe(health):
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", health.port)) for _ in range(100)]
    try:
        assert get(health, "/healthz") == (200, b"ok\n")
        assert threading.active_count() == before, "a thread per connection"
    finally:
        for sock in idle:
            sock.close()


def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(health):
    sock = socket.create_connection(("127.0.0.1", health.port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the end of the head
    sock.settimeout(10)
    started = time.monotonic()

    assert sock.recv(100) == b""
    assert time.monotonic() - started < 9
    sock.close()


def test_a_request_line_that_is_not_http_gets_an_answer_and_a_close(health):
    sock = socket.create_connection(("127.0.0.1", health.port))
    sock.sendall(b"\x00\xff\r\n\r\n")
    sock.settimeout(5)

    assert sock.recv(100).startswith(b"HTTP/1.1 405 ")
    sock.close()
