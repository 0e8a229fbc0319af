"""Hostile clients over loopback cannot take the server down or starve it (issue 11):
unfinished handshakes and requests, clients that never close, huge quantities, endless
kinds, oversized and deeply nested bodies, weak TLS suites, idle probe connections.

One real gunicorn over TLS (two workers of four threads, as deployed) serves the module.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from tests.builders import INVENTORY, RULES, pod, review
from tests.running import Server, post, reviews_answered, rss_kib, threads, wait_until
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.serving.worker.reading import READ_TIMEOUT_SECONDS

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    Server.close_clients()


@pytest.fixture(scope="module")
def server(attacked_server):
    return attacked_server


def tls(server):
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.client_context().wrap_socket(raw, server_hostname="localhost")


def closed_by_server(sock, timeout):
    """True once the server closed ``sock`` (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


# --- 4: read timeouts, and slow connections never starve ready ones ---------------------


def test_unfinished_handshakes_and_requests_neither_starve_reviews_nor_stay_open(server):
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(16)]
    half_hello = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(16)]
    for sock in half_hello:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello that never ends
    slow_headers = [tls(server) for _ in range(100)]
    for sock in slow_headers:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
    slow_body = [tls(server) for _ in range(16)]
    for sock in slow_body:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{")
    try:
        assert reviews_answered(server, count=20, timeout=5.0) == [200] * 20

        # Each had READ_TIMEOUT_SECONDS from its first byte (or its accept) to finish.
        time.sleep(READ_TIMEOUT_SECONDS)
        for sock in [*idle, *half_hello, *slow_headers, *slow_body]:
            assert closed_by_server(sock, timeout=10), "a connection outlived its read timeout"
    finally:
        for sock in [*idle, *half_hello, *slow_headers, *slow_body]:
            sock.close()
    assert set(server.workers()) == server.first_workers


# --- 5: closing connections never blocks a worker's loop ---------------------------------


def test_clients_that_never_close_after_connection_close_do_not_stall_a_worker(server):
    body = json.dumps(review(pod(gpus=1))).encode()
    request = (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body
    stubborn = [tls(server) for _ in range(60)]
    try:
        for sock in stubborn:
            sock.sendall(request)  # and never read, never close
        assert reviews_answered(server, count=20, timeout=5.0) == [200] * 20
        time.sleep(2.5)  # each close lingers 2 s at most, in the poller
        assert reviews_answered(server, count=4, timeout=5.0) == [200] * 4
    finally:
        for sock in stubborn:
            sock.close()
    assert set(server.workers()) == server.first_workers, "a worker was killed"


# --- 3: quantities bounded as Kubernetes bounds them -------------------------------------


def test_a_huge_exponent_is_denied_as_out_of_range_at_once(server):
    conn = server.connection()
    conn.timeout = 5

    status, answer = post(conn, "/mutate", review(pod(gpus="1e20000000")))

    assert status == 200
    assert answer["response"]["allowed"] is False
    assert "out of range" in answer["response"]["status"]["message"]


def test_distinct_huge_quantities_do_not_grow_a_worker(server):
    conn = server.connection()
    before = sum(rss_kib(pid) for pid in server.workers())
    for exponent in range(200):
        status, _ = post(conn, "/validate", review(pod(gpus=f"1e{2_000_000 + exponent}")))
        assert status == 200
    after = sum(rss_kib(pid) for pid in server.workers())
    assert after - before < 20 * 1024, f"workers grew by {after - before} KiB"


# --- 7: metric labels come from a closed set ---------------------------------------------


def test_kinds_named_by_callers_do_not_become_metric_series(server):
    conn = server.connection()
    for index in range(300):
        body = review({"apiVersion": "v1", "kind": f"Kind{index}", "metadata": {"name": "x"}})
        body["request"]["operation"] = ["CREATE", "DELETE"][index % 2]
        assert post(conn, "/validate", body)[0] == 200

    def counted():
        text = server.health("/metrics")[1]
        return re.findall(r'gpu_webhook_requests_total\{[^}]*kind="([^"]*)"', text)

    wait_until(lambda: "other" in counted(), timeout=10, what="the reviews are counted")
    assert not [kind for kind in counted() if kind.startswith("Kind")]


# --- 9: the smaller items ----------------------------------------------------------------


def test_a_chunked_body_over_the_cap_gets_413(server):
    sock = tls(server)
    sock.sendall(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"x" * (1024 * 1024)
    try:
        for _ in range(8):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server may answer and close before the last chunk
    assert sock.recv(100).startswith(b"HTTP/1.1 413 ")
    sock.close()


def test_nesting_past_orjsons_own_limit_still_passes_a_passthrough_kind(server):
    nested: dict = {"leaf": 1}
    for _ in range(600):
        nested = {"a": nested}
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    body = review({**obj, "spec": nested})
    body["request"]["kind"] = {"group": "example.com", "version": "v1", "kind": "Widget"}

    status, answer = post(server.connection(), "/mutate", json.dumps(body).encode())

    assert status == 200
    assert answer["response"]["allowed"] is True


def test_the_review_log_line_clips_what_the_caller_wrote(server):
    uid = "u" * (1024 * 1024)
    body = review(pod(gpus=1), uid=uid)
    body["request"]["userInfo"]["username"] = "n" * 100_000

    status, answer = post(server.connection(), "/mutate", body)

    assert status == 200
    assert answer["response"]["uid"] == uid
    wait_until(lambda: "uuuuuuuu" in server.log.read_text(), timeout=5, what="the line is out")
    longest = max(len(line) for line in server.log.read_text().splitlines())
    assert longest < 4096


def test_tls_1_2_offers_no_cbc_suite(server):
    context = server.client_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:AES128-SHA")
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    with pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="localhost")
    raw.close()


def peak_kib(pid):
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def test_concurrent_large_reviews_are_parsed_one_at_a_time_per_worker(tmp_path):
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    server = Server(tmp=tmp_path, cert_dir=tmp_path, rules=RULES, inventory=INVENTORY, workers=2)
    # 6 MiB of small values, as a custom resource can carry: parsed, about 12 times that.
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    body = review({**widget, "spec": {"items": [f"item-{i:07d}" for i in range(420_000)]}})
    data = json.dumps(body).encode()
    try:
        server.wait_for_fresh_workers(set(), 2)
        connections = [server.connection() for _ in range(8)]
        for conn in connections:
            conn.timeout = 60
            conn.connect()
        statuses = []
        senders = [
            threading.Thread(target=lambda c=conn: statuses.append(post(c, "/validate", data)[0]))
            for conn in connections
        ]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        peak = sum(peak_kib(pid) for pid in server.workers())
    finally:
        Server.close_clients()
        assert server.stop() == 0

    assert statuses == [200] * 8
    # Measured here: 219 MiB for both workers with one large review at a time in each,
    # 344 MiB when every thread of a worker parsed one (before).
    assert peak < 280 * 1024, f"the workers peaked at {peak // 1024} MiB together"


# --- 8: the health port ------------------------------------------------------------------


def test_idle_probe_connections_neither_block_probes_nor_cost_threads(server):
    idle = [socket.create_connection(("127.0.0.1", server.health_port)) for _ in range(300)]
    try:
        for _ in range(5):
            assert server.health("/readyz")[0] == 200
        assert threads(server.process.pid) < 20
    finally:
        for sock in idle:
            sock.close()


def test_broken_probe_connections_log_no_traceback(server):
    for payload in (b"GET /healthz", b"\x00\xff garbage\r\n\r\n", b""):
        sock = socket.create_connection(("127.0.0.1", server.health_port))
        sock.sendall(payload)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset
    assert server.health("/healthz")[0] == 200
    for line in server.log.read_text().splitlines():
        assert line.startswith("{"), f"not a JSON log line: {line[:200]}"
        assert "Traceback" not in line or "exception" in json.loads(line)


def test_the_server_never_answered_5xx_and_kept_its_workers(server):
    assert set(server.workers()) == server.first_workers
    assert server.process.poll() is None
    assert "internal error" not in server.log.read_text()
