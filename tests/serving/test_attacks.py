"""The second round of hostile clients over loopback (issue 27): every way a connection can
fail costs that connection only, slow readers of large answers are cut at the answer
deadline without starving reviews, answers are bounded in size, ``Expect: 100-continue`` gets
one ``100 Continue``, ``/metrics`` stays off the webhook port and log lines stay short.

One real gunicorn over TLS (two workers of four threads, as deployed) serves the module; the
worker pids are read from /proc before and after each attack.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import threading
import time

import pytest

from tests.builders import pod, review
from tests.running import Server, post, reviews_answered
from webhook.serving.worker.reading import ANSWER_SECONDS

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    Server.close_clients()


@pytest.fixture(scope="module")
def server(attacked_server):
    return attacked_server


def tcp(server, *, receive_buffer=0):
    sock = socket.socket()
    if receive_buffer:  # before connecting: the window the server may fill
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    return sock


def tls(server, **options):
    return server.client_context().wrap_socket(tcp(server, **options), server_hostname="localhost")


def reset(sock):
    """Close with an RST instead of a FIN (SO_LINGER on, zero seconds)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def client_hello(server):
    """A real ClientHello for the server, as bytes (TLS over memory, no socket)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_object = server.client_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls_object.do_handshake()
    return outgoing.read()


def request(body: bytes, *extra: bytes) -> bytes:
    head = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    return head + b"".join(extra) + b"Content-Length: %d\r\n\r\n" % len(body) + body


REVIEW = json.dumps(review(pod(gpus=1))).encode()


def wide_pod(containers):
    """A pod of ``containers`` containers tolerating the GPU taint: the GPU-hiding patch
    adds two variables to each, about 150 bytes of patch per container."""
    obj = pod(gpus=None, name="wide")
    obj["spec"]["containers"] = [{"name": f"c{i}", "image": "busybox"} for i in range(containers)]
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    return obj


# --- item 1: a connection-level failure costs that connection, never a worker ------------


def reset_before_tls(server):
    reset(tcp(server))


def fin_before_tls(server):
    tcp(server).close()


def reset_after_part_of_a_client_hello(server):
    sock = tcp(server)
    sock.sendall(client_hello(server)[:20])
    reset(sock)


def reset_during_the_handshake(server):
    sock = tcp(server)
    sock.sendall(client_hello(server))
    sock.recv(100)  # the ServerHello has begun
    reset(sock)


def eof_during_the_handshake(server):
    sock = tcp(server)
    sock.sendall(client_hello(server))
    sock.shutdown(socket.SHUT_WR)
    time.sleep(0.05)
    sock.close()


def tls_alert_for_a_client_hello(server):
    sock = tcp(server)
    sock.sendall(b"\x15\x03\x03\x00\x02\x02\x28")  # fatal handshake_failure
    reset(sock)


def garbage_for_a_client_hello(server):
    sock = tcp(server)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
    time.sleep(0.02)
    sock.close()


def half_open_after_the_handshake(server):
    sock = tls(server)
    socket.socket.shutdown(sock, socket.SHUT_WR)  # no close_notify, a bare FIN
    time.sleep(0.02)
    sock.close()


def eof_mid_headers(server):
    sock = tls(server)
    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Ty")
    sock.close()


def reset_mid_headers(server):
    sock = tls(server)
    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Ty")
    reset(sock)


def eof_mid_body(server):
    sock = tls(server)
    sock.sendall(request(REVIEW)[:-10])
    sock.close()


def reset_mid_body(server):
    sock = tls(server)
    sock.sendall(request(REVIEW)[:-10])
    reset(sock)


def reset_before_the_answer_is_read(server):
    sock = tls(server)
    sock.sendall(request(REVIEW))
    reset(sock)


WIDE = json.dumps(review(wide_pod(5000))).encode()  # an answer of about 1 MB


def reset_while_the_answer_is_written(server):
    sock = tls(server, receive_buffer=4096)
    sock.sendall(request(WIDE))
    sock.recv(2048)
    reset(sock)


def eof_while_the_answer_is_written(server):
    sock = tls(server, receive_buffer=4096)
    sock.sendall(request(WIDE))
    sock.recv(2048)
    sock.close()


@pytest.mark.parametrize(
    ("attack", "times"),
    [
        pytest.param(reset_before_tls, 40, id="reset-before-tls-40-times"),
        pytest.param(fin_before_tls, 10, id="fin-before-tls"),
        pytest.param(reset_after_part_of_a_client_hello, 10, id="reset-mid-client-hello"),
        pytest.param(reset_during_the_handshake, 10, id="reset-during-handshake"),
        pytest.param(eof_during_the_handshake, 10, id="eof-during-handshake"),
        pytest.param(tls_alert_for_a_client_hello, 10, id="tls-alert"),
        pytest.param(garbage_for_a_client_hello, 10, id="garbage-instead-of-client-hello"),
        pytest.param(half_open_after_the_handshake, 10, id="half-open-after-handshake"),
        pytest.param(eof_mid_headers, 10, id="eof-mid-headers"),
        pytest.param(reset_mid_headers, 10, id="reset-mid-headers"),
        pytest.param(eof_mid_body, 10, id="eof-mid-body"),
        pytest.param(reset_mid_body, 10, id="reset-mid-body"),
        pytest.param(reset_before_the_answer_is_read, 10, id="reset-before-answer-read"),
        pytest.param(reset_while_the_answer_is_written, 6, id="reset-while-answer-written"),
        pytest.param(eof_while_the_answer_is_written, 6, id="eof-while-answer-written"),
    ],
)
def test_a_connection_that_fails_costs_that_connection_and_never_a_worker(server, attack, times):
    for _ in range(times):
        with contextlib.suppress(OSError):
            attack(server)

    assert reviews_answered(server, count=4, timeout=10.0) == [200] * 4
    assert set(server.workers()) == server.first_workers, server.log.read_text()[-3000:]
    assert "exited with code" not in server.log.read_text()


def test_a_client_that_shuts_its_write_side_after_a_whole_request_gets_its_answer(server):
    sock = tls(server)
    sock.sendall(request(REVIEW))
    socket.socket.shutdown(sock, socket.SHUT_WR)  # a bare FIN: ssl's shutdown drops TLS
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()

    assert answer.startswith(b"HTTP/1.1 200 ")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["response"]["allowed"] is True


def test_resets_at_twenty_a_second_cost_no_review(server):
    stop = threading.Event()

    def resets():
        while not stop.wait(0.05):
            with contextlib.suppress(OSError):
                reset_before_tls(server)

    attacker = threading.Thread(target=resets)
    attacker.start()
    try:
        statuses = reviews_answered(server, count=20, timeout=10.0)
    finally:
        stop.set()
        attacker.join()

    assert statuses == [200] * 20
    assert set(server.workers()) == server.first_workers


# --- item 2: slow readers of large answers are cut at the deadline -------------------------

READERS = 16
TALL = wide_pod(19_000)  # a patch just under MAX_PATCH_BYTES: an answer of about 3.8 MB


def connected(sock):
    """False once the server closed or reset the connection (TCP_INFO's state)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == ESTABLISHED


ESTABLISHED = 1


def slow_reader(server, body, outcomes, budget=30.0):
    """Sends ``body`` and reads its answer 2 KB every 4 s until the server ends the
    connection, for ``budget`` seconds at most: what it got, and when the server ended it
    (None: never)."""
    started = time.monotonic()
    got, ended = 0, None
    sock = None
    try:
        sock = tls(server, receive_buffer=4096)
        sock.sendall(body)
        while ended is None and time.monotonic() - started < budget:
            for _ in range(4):
                time.sleep(1)
                if not connected(sock):
                    ended = time.monotonic() - started
                    break
            got += len(sock.recv(2048))
    except OSError:  # the server's reset
        ended = ended or time.monotonic() - started
    if sock is not None:
        sock.close()
    outcomes.append((got, ended))


def test_slow_readers_of_large_answers_neither_stall_reviews_nor_keep_their_answer(server):
    body = request(json.dumps(review(TALL)).encode())
    outcomes: list[tuple[int, float]] = []
    readers = [
        threading.Thread(target=slow_reader, args=(server, body, outcomes)) for _ in range(READERS)
    ]
    for reader in readers:
        reader.start()
    statuses = []
    until = time.monotonic() + ANSWER_SECONDS + 4
    try:
        while time.monotonic() < until:
            # A review takes a millisecond; the API server waits 10 s by default. Measured
            # here: 4,500 answered in these 14 s, the slowest in 2 s (behind the readers'
            # own large reviews); before, 2 answered, the slowest in 11 s.
            statuses += reviews_answered(server, count=1, timeout=8)
    finally:
        for reader in readers:
            reader.join(timeout=40)

    assert len(statuses) >= 10
    assert statuses == [200] * len(statuses)
    # Each reader was cut within the 30 s it reads for (3.8 MB at 2 KB every 4 s would
    # take about two hours), with a small part of its answer.
    assert len(outcomes) == READERS
    assert all(got < 1024 * 1024 for got, _ in outcomes), outcomes
    assert all(ended is not None for _, ended in outcomes), outcomes
    assert set(server.workers()) == server.first_workers


def test_a_pod_whose_patch_would_pass_the_limit_gets_a_short_denial_saying_why(server):
    conn = server.connection()
    conn.timeout = 60

    status, answer = post(conn, "/mutate", review(wide_pod(29_000)))

    assert status == 200
    assert answer["response"]["allowed"] is False
    assert "over its limit of 3,145,728" in answer["response"]["status"]["message"]
    assert len(json.dumps(answer)) < 2048


# --- item 3: small server things -----------------------------------------------------------


def read_answer(sock):
    """Everything up to the end of the first final (non-1xx) answer's body."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
        final = data.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
        head, _, rest = final.partition(b"\r\n\r\n")
        length = [
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        ]
        if length and len(rest) >= length[0]:
            return data


@pytest.mark.parametrize(
    ("waits", "continues"),
    [
        pytest.param(True, 1, id="a-client-that-waits-gets-exactly-one"),
        pytest.param(False, 0, id="a-body-sent-at-once-gets-none"),
    ],
)
def test_expect_100_continue_is_answered_once_at_most(server, waits, continues):
    whole = request(REVIEW, b"Expect: 100-continue\r\n")
    head, body = whole[: -len(REVIEW)], REVIEW
    sock = tls(server)
    if waits:
        sock.sendall(head)
        assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = b"HTTP/1.1 100 Continue\r\n\r\n" + read_answer(sock)
    else:
        sock.sendall(whole)
        answer = read_answer(sock)
    sock.close()

    assert answer.count(b"100 Continue") == continues
    assert b"HTTP/1.1 200 OK" in answer


def test_metrics_are_served_on_the_health_port_only(server):
    conn = server.connection()
    conn.request("GET", "/metrics")
    reply = conn.getresponse()
    reply.read()

    assert reply.status == 404
    assert server.health("/metrics")[0] == 200


def test_the_module_ended_with_the_workers_it_began_with(server):
    assert set(server.workers()) == server.first_workers
    assert "internal error" not in server.log.read_text()
    assert "Traceback" not in server.log.read_text()
