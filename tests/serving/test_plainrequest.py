"""A plain request is recognised from its bytes and gets the environ gunicorn would build;
anything else is left to gunicorn's parser, which judges it as before."""

from __future__ import annotations

from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.http import wsgi
from gunicorn.http.message import Request
from gunicorn.http.unreader import IterUnreader

from webhook.serving import plainrequest
from webhook.serving.plainrequest import base_of, limits_of, plain_request, wsgi_environ
from webhook.serving.server import gunicorn_options
from webhook.serving.worker.framing import request_end, request_head

CLIENT = ("127.0.0.1", 50123)
SERVER = ("127.0.0.1", 8443)
BODY = b'{"kind":"AdmissionReview"}'
# As kube-apiserver's client (Go net/http) sends a review.
API_SERVER_HEAD = (
    b"POST /mutate?timeout=10s HTTP/1.1\r\n"
    b"Host: gpu-webhook.gpu-system.svc:443\r\n"
    b"User-Agent: kube-apiserver-admission\r\n"
    b"Content-Length: 26\r\n"
    b"Accept: application/json, */*\r\n"
    b"Content-Type: application/json\r\n"
    b"Accept-Encoding: gzip\r\n"
)


def config() -> Config:
    cfg = Config()
    for name, value in gunicorn_options_for_tests().items():
        if name in cfg.settings:
            cfg.set(name, value)
    return cfg


def gunicorn_options_for_tests() -> dict[str, Any]:
    """The server's own limits (request line, fields), not gunicorn's defaults."""
    from webhook.serving.config import Settings

    options = gunicorn_options(Settings())
    return {k: options[k] for k in ("limit_request_line", "limit_request_fields")}


def parsed(data: bytes) -> Any:
    cfg = config()
    head = request_head(data)
    assert head is not None
    end = request_end(data, head)
    assert end is not None
    return plain_request(data, body_start=head[0], end=end, limits=limits_of(cfg, body=1 << 20))


def comparable(environ: dict[str, Any]) -> dict[str, Any]:
    """An environ without the objects that differ by identity (streams, callbacks)."""
    return {
        k: v
        for k, v in environ.items()
        if k not in ("wsgi.input", "wsgi.errors", "wsgi.early_hints", "gunicorn.socket")
    }


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(API_SERVER_HEAD, id="the-api-servers-review"),
        pytest.param(API_SERVER_HEAD + b"Connection: close\r\n", id="connection-close"),
        pytest.param(API_SERVER_HEAD + b"Accept: a\r\nAccept: b\r\n", id="a-repeated-header"),
        pytest.param(
            b"POST /validate HTTP/1.1\r\nContent-Length: 26\r\n", id="no-query-and-no-host"
        ),
        pytest.param(
            b"POST /mutate? HTTP/1.1\r\nContent-Length:26\r\nX-Empty:\r\n", id="empty-parts"
        ),
    ],
)
def test_a_plain_request_gets_the_environ_gunicorn_builds(head):
    data = head + b"\r\n" + BODY
    cfg = config()
    request = Request(cfg, IterUnreader([data]), CLIENT, 1)
    _, expected = wsgi.create(request, None, CLIENT, SERVER, cfg)
    expected["wsgi.multithread"] = True  # gthread sets it after create

    plain = parsed(data)

    assert plain is not None
    base = base_of(cfg, scheme="http")
    environ = wsgi_environ(plain, base=base, client=CLIENT, server=SERVER)
    assert comparable(environ) == comparable(expected)
    assert environ["wsgi.input"].read() == BODY
    assert plain.close == (b"close" in head)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", id="another-method"),
        pytest.param(b"POST /mutate HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", id="http-1.0"),
        pytest.param(b"POST /mu%74ate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", id="an-escape"),
        pytest.param(
            b"POST http://x/mutate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", id="absolute-form"
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            id="chunked",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
            id="expect",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nConnection: upgrade\r\nContent-Length: 2\r\n\r\n{}",
            id="connection-upgrade",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nX-Forwarded-Proto: http\r\nContent-Length: 2\r\n\r\n{}",
            id="a-scheme-header",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nX_Odd: 1\r\nContent-Length: 2\r\n\r\n{}",
            id="an-underscore-in-a-name",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\n{}",
            id="a-folded-line",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nX-A : 1\r\nContent-Length: 2\r\n\r\n{}",
            id="a-space-before-the-colon",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
            id="a-repeated-length",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}", id="a-signed-length"
        ),
        pytest.param(b"POST /mutate HTTP/1.1\r\nHost: x\r\n\r\n", id="no-length"),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nContent-Length: 9999999\r\n\r\n{}", id="over-the-cap"
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\n" + b"X-A: 1\r\n" * 50 + b"Content-Length: 2\r\n\r\n{}",
            id="more-fields-than-the-limit",
        ),
        pytest.param(
            b"POST /" + b"a" * 8190 + b" HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            id="a-request-line-over-the-limit",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nX-A: \x01\r\nContent-Length: 2\r\n\r\n{}",
            id="a-control-character",
        ),
        pytest.param(
            b"POST /mutate HTTP/1.1\r\nX-A: " + b" \t" * 30000 + b"\x01\r\n\r\n",
            id="a-long-run-of-blanks-refused-without-backtracking",
        ),
    ],
)
def test_a_request_that_is_not_plain_is_left_to_gunicorn(data):
    assert parsed(data) is None


def test_a_head_seen_before_is_judged_again_against_the_length_of_what_follows():
    data = API_SERVER_HEAD + b"\r\n" + BODY
    body_start = len(API_SERVER_HEAD) + 2
    limits = limits_of(config(), body=1 << 20)

    first = plain_request(data, body_start=body_start, end=len(data), limits=limits)
    short = plain_request(data, body_start=body_start, end=len(data) - 1, limits=limits)
    again = plain_request(data, body_start=body_start, end=len(data), limits=limits)

    assert first is not None
    assert short is None
    assert again == first


def test_a_head_refused_once_is_refused_again():
    data = API_SERVER_HEAD + b"Expect: 100-continue\r\n\r\n" + BODY

    assert [parsed(data), parsed(data)] == [None, None]


def test_the_heads_remembered_are_bounded_and_the_newest_still_judged():
    limits = limits_of(config(), body=1 << 20)
    answers = []
    for number in range(plainrequest.MAX_HEADS + 10):
        head = API_SERVER_HEAD.replace(b"kube-apiserver-admission", b"client-%d" % number)
        data = head + b"\r\n" + BODY
        answers.append(plain_request(data, body_start=len(head) + 2, end=len(data), limits=limits))

    assert len(plainrequest._heads) <= plainrequest.MAX_HEADS
    assert answers[-1] is not None
    assert ("USER-AGENT", f"client-{plainrequest.MAX_HEADS + 9}") in answers[-1].headers
