"""Reviews as the API server sends them are answered on the worker's own path (no gunicorn
parser), and behave on the wire as gunicorn's answers did:
kept alive, closed when asked, in order when pipelined, whatever their framing.

One real gunicorn over TLS (two workers of four threads, as deployed) serves the module.
"""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest

from tests.builders import pod, review
from tests.running import Server

pytestmark = pytest.mark.slow

LARGE = 64 * 1024  # a body several TLS records long


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    Server.close_clients()


@pytest.fixture(scope="module")
def server(attacked_server):
    return attacked_server


@pytest.fixture
def sock(server):
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    client = server.client_context().wrap_socket(raw, server_hostname="localhost")
    yield client
    client.close()


def plain(path: str, uid: str, *, extra: bytes = b"", padding: int = 0) -> bytes:
    body = json.dumps(review(pod(gpus=1), uid=uid)).encode() + b" " * padding
    return (
        b"POST %s?timeout=10s HTTP/1.1\r\nHost: gpu-webhook.gpu-system.svc:443\r\n"
        b"Content-Type: application/json\r\nAccept: application/json, */*\r\n"
        b"%sContent-Length: %d\r\n\r\n" % (path.encode(), extra, len(body))
    ) + body


def chunked(path: str, uid: str) -> bytes:
    body = json.dumps(review(pod(gpus=1), uid=uid)).encode()
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
        % (path.encode(), len(body), body)
    )


def answers(sock: ssl.SSLSocket, count: int) -> list[tuple[str, dict[str, str], dict]]:
    """``count`` answers read off ``sock``: status line, headers (lower-cased), body."""
    data = b""
    out = []
    while len(out) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            status, *lines = data[:end].decode().split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines)
            headers = {k.lower(): v for k, v in headers.items()}
            size = int(headers["content-length"])
            if len(data) >= end + 4 + size:
                out.append((status, headers, json.loads(data[end + 4 : end + 4 + size])))
                data = data[end + 4 + size :]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(out)} answers"
        data += chunk
    return out


def closed_by_server(sock, timeout):
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_a_review_as_the_api_server_sends_it_is_answered_and_kept_alive(sock):
    first = answers_to(sock, plain("/mutate", "one"))
    second = answers_to(sock, plain("/validate", "two"))

    for (status, headers, body), uid in ((first, "one"), (second, "two")):
        assert status == "HTTP/1.1 200 OK"
        assert headers["connection"] == "keep-alive"
        assert headers["content-type"] == "application/json"
        assert headers["date"].endswith(" GMT")
        assert body["response"]["uid"] == uid


def answers_to(sock, request):
    sock.sendall(request)
    return answers(sock, 1)[0]


def test_pipelined_reviews_are_answered_in_order_whatever_their_framing(sock):
    large = LARGE + 1024
    sock.sendall(
        plain("/mutate", "a")
        + plain("/validate", "b")
        + chunked("/validate", "c")
        + plain("/mutate", "d", padding=large)
        + plain("/validate", "e")
    )

    got = answers(sock, 5)

    assert [status for status, _, _ in got] == ["HTTP/1.1 200 OK"] * 5
    assert [body["response"]["uid"] for _, _, body in got] == ["a", "b", "c", "d", "e"]


def many_containers(uid: str, count: int) -> bytes:
    """A plain review whose pod has ``count`` containers: the engine takes a while."""
    obj = pod(gpus=1)
    first = obj["spec"]["containers"][0]
    obj["spec"]["containers"] = [{**first, "name": f"c{n}"} for n in range(count)]
    body = json.dumps(review(obj, uid=uid)).encode()
    return (
        b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body


def test_a_review_sent_while_the_one_before_is_served_is_answered_after_it(sock):
    # The connection stays with the poller while a thread serves its request; what
    # arrives meanwhile waits for that thread, then is read and answered in turn.
    sock.sendall(many_containers("slow", 2000))
    time.sleep(0.02)  # the first is being served (2,000 containers take far longer)
    sock.sendall(plain("/validate", "next"))

    got = answers(sock, 2)

    assert [body["response"]["uid"] for _, _, body in got] == ["slow", "next"]
    assert got[1][1]["connection"] == "keep-alive"


def test_a_client_that_shuts_its_side_while_served_gets_its_answer_then_a_close(sock):
    sock.sendall(many_containers("served", 2000))
    time.sleep(0.02)
    socket.socket.shutdown(sock, socket.SHUT_WR)  # a bare FIN (ssl's shutdown drops TLS)

    ((status, _, body),) = answers(sock, 1)

    assert status == "HTTP/1.1 200 OK"
    assert body["response"]["uid"] == "served"
    assert closed_by_server(sock, timeout=5)


@pytest.mark.parametrize(
    "padding", [pytest.param(0, id="small"), pytest.param(LARGE + 1, id="large")]
)
def test_a_review_asking_to_close_is_answered_then_closed(sock, padding):
    status, headers, body = answers_to(
        sock, plain("/validate", "last", extra=b"Connection: close\r\n", padding=padding)
    )

    assert status == "HTTP/1.1 200 OK"
    assert headers["connection"] == "close"
    assert body["response"]["uid"] == "last"
    assert closed_by_server(sock, timeout=5)


def test_a_review_over_the_cap_is_refused_by_gunicorns_path_as_before(sock):
    sock.sendall(
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 99999999\r\n\r\n{}"
    )

    status, _, body = answers(sock, 1)[0]

    assert status.startswith("HTTP/1.1 413")
    assert body["code"] == 413
