"""Plain requests: the calls the API server makes to a webhook (``POST``, HTTP/1.1, a
declared length, a handful of ordinary headers), recognised from the bytes the worker's main
loop already holds, so that a thread can answer them without gunicorn's parser and response.

gunicorn's pure-Python parser (``gunicorn/http/message.py``: the request line, each header,
the trusted-proxy check that parses the peer's address with ``ipaddress``), its environ
(``gunicorn/http/wsgi.py`` ``create``) and its response (``default_headers``, ``http_date``
formatted per answer) cost about a fifth of a worker's time on unique pods, more than the
engine's review. Here the head is matched by a few strict patterns and the environ is
built the way ``create`` builds it. Whatever is not plain goes to gunicorn exactly as
before and is judged by it: a method other than POST, another HTTP version, a target with
``%`` escapes or other than origin-form, chunked framing, ``Expect``, ``Upgrade``, a
``Connection`` other than ``keep-alive`` or ``close``, headers gunicorn maps specially
(forwarded and scheme headers, names with ``_``, ``SCRIPT_NAME``), a folded or malformed
line, more or longer lines than its limits, a length missing, repeated or over the cap.
So every refusal (400, 413, 431) is still gunicorn's or the app's own.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from typing import Any

from gunicorn import SERVER_SOFTWARE
from gunicorn.http.wsgi import base_environ

# RFC 9110 5.6.2 tchar, without "_" (gunicorn drops or refuses such names: never plain),
# and a value of visible ASCII with inner spaces and tabs; origin-form without escapes, so
# that PATH_INFO is the target's path as sent. The head is judged whole in one match.
_NAME = r"[!#$%&'*+.^`|~0-9A-Za-z-]+"
_VALUE = r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?"
# Blanks before an empty value or around a value belong to one place only: two runs of
# blanks side by side took a head of 60,000 of them 45 s to refuse.
_HEAD = re.compile(
    rf"POST (/[A-Za-z0-9._~!$&'()*+,;=:@/-]*)(\?[\x21-\x7e]*)? HTTP/1\.1"
    rf"((?:\r\n{_NAME}:[ \t]*(?:{_VALUE}[ \t]*)?)*)"
)
_NOT_PLAIN = frozenset(
    {
        "TRANSFER-ENCODING",
        "EXPECT",
        "UPGRADE",
        "FORWARDED",
        "SCRIPT_NAME",
        "HTTP2-SETTINGS",
        "TE",
    }
)


@dataclass(frozen=True, slots=True)
class PlainRequest:
    """A plain request's parts, as gunicorn's ``Request`` would hold them."""

    path: str
    query: str
    target: str
    headers: list[tuple[str, str]]  # names upper-cased, in order
    body: bytes
    close: bool  # the client asked for ``Connection: close``


# A plain head's path, query (with its "?"), headers, declared length and Connection: close.
_Head = tuple[str, str, tuple[tuple[str, str], ...], int, bool]


@dataclass(frozen=True, slots=True)
class Limits:
    """gunicorn's own limits for a head (``limit_request_*``) and the body cap."""

    line: int
    fields: int
    field_size: int
    body: int
    scheme_headers: frozenset[str]  # ``secure_scheme_headers``: gunicorn's to judge


def limits_of(cfg: Any, *, body: int) -> Limits:
    return Limits(
        line=cfg.limit_request_line or 1 << 30,
        fields=cfg.limit_request_fields,
        field_size=cfg.limit_request_field_size or 1 << 30,
        body=body,
        scheme_headers=frozenset(name.upper() for name in cfg.secure_scheme_headers),
    )


def plain_request(
    data: bytes | bytearray, *, body_start: int, end: int, limits: Limits
) -> PlainRequest | None:
    """The request that fills ``data[:end]`` (its head ends at ``body_start``), if plain."""
    text = bytes(data[: body_start - 4]).decode("latin-1")  # the patterns take ASCII only
    key = (text, limits)
    head = _heads.get(key, _UNSEEN)
    if head is _UNSEEN:
        head = _plain_head(text, limits)
        if len(_heads) >= MAX_HEADS:
            _heads.clear()
        _heads[key] = head
    if head is None:
        return None
    path, query, headers, length, close = head
    if body_start + length != end:
        return None
    return PlainRequest(
        path, query[1:], path + query, list(headers), bytes(data[body_start:end]), close
    )


# Heads already judged, by their text (and the limits they were judged by): the API
# server sends the same head again and again, bar the body's length, and matching one
# costs several times what looking it up does. Bounded: a client sending heads of its own
# empties it, and the next ones are matched again.
MAX_HEADS = 256
_heads: dict[tuple[str, Limits], _Head | None] = {}
_UNSEEN: Any = object()


def _plain_head(text: str, limits: Limits) -> _Head | None:
    """The parts of a plain request's head ``text``; None if it is not plain."""
    head = _HEAD.fullmatch(text)
    if head is None or head.start(3) > limits.line:
        return None
    # The match proved every line a name, a colon and a value with its blanks around it:
    # splitting is enough to take them apart (a second pattern over the lines cost twice
    # what the match did).
    lines = head[3].split("\r\n")[1:]
    if len(lines) > limits.fields:
        return None
    if len(text) > limits.field_size and (
        head.start(3) > limits.field_size or any(len(line) > limits.field_size for line in lines)
    ):
        return None
    headers = []
    for line in lines:
        name, _, value = line.partition(":")
        headers.append((name.upper(), value.strip(" \t")))
    length = None
    close = False
    for name, value in headers:
        if name in _NOT_PLAIN or name.startswith("X-FORWARDED-") or name in limits.scheme_headers:
            return None
        if name == "CONTENT-LENGTH":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name == "CONNECTION":
            token = value.strip().lower()
            if token not in ("close", "keep-alive"):
                return None
            close = close or token == "close"
    if length is None or length > limits.body:
        return None
    return head[1], head[2] or "", tuple(headers), length, close


def base_of(cfg: Any, *, scheme: str) -> dict[str, Any]:
    """What every plain request's environ holds, built once per worker (gunicorn builds
    it per request, its ``wsgi.errors`` wrapper walking the log handlers each time)."""
    environ: dict[str, Any] = base_environ(cfg)
    environ.update(
        {
            "wsgi.multithread": True,
            "wsgi.url_scheme": scheme,
            "REQUEST_METHOD": "POST",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "SERVER_SOFTWARE": SERVER_SOFTWARE,
            "SCRIPT_NAME": "",
        }
    )
    return environ


def wsgi_environ(
    request: PlainRequest, *, base: dict[str, Any], client: Any, server: Any
) -> dict[str, Any]:
    """The environ gunicorn's ``create`` builds for this request (``gunicorn/http/wsgi.py``),
    without the parts a plain request never has (a proxy protocol line, ``SCRIPT_NAME``)."""
    environ = dict(base)
    environ["wsgi.input"] = io.BytesIO(request.body)
    environ["QUERY_STRING"] = request.query
    environ["RAW_URI"] = request.target
    environ["PATH_INFO"] = request.path
    repeated: dict[str, list[str]] = {}
    for name, value in request.headers:
        if name == "CONTENT-TYPE":
            environ["CONTENT_TYPE"] = value
            continue
        if name == "CONTENT-LENGTH":
            environ["CONTENT_LENGTH"] = value
            continue
        key = "HTTP_" + name.replace("-", "_")
        if key in environ:
            repeated.setdefault(key, [environ[key]]).append(value)
        else:
            environ[key] = value
    for key, values in repeated.items():
        environ[key] = ",".join(values)
    if isinstance(client, (str, bytes)):
        environ["REMOTE_ADDR"] = client if isinstance(client, str) else client.decode()
    else:
        environ["REMOTE_ADDR"] = client[0]
        environ["REMOTE_PORT"] = str(client[1])
    environ["SERVER_NAME"] = str(server[0])
    environ["SERVER_PORT"] = str(server[1])
    return environ


def script_name_set() -> bool:
    """gunicorn takes ``SCRIPT_NAME`` from the process environment: then nothing is plain."""
    return bool(os.environ.get("SCRIPT_NAME"))
