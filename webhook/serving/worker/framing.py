"""What the worker's main loop judges of a request's bytes before a thread serves it: where
its head ends, the body's declared size, and where the request ends (framing only; the
thread's parser and the app judge the rest)."""

from __future__ import annotations

import re

from webhook.admission.review import MAX_BODY_BYTES

MAX_HEAD_BYTES = 64 * 1024
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*([0-9]{1,12})[ \t]*(?=\r\n|$)")
_CHUNKED = re.compile(rb"\r\ntransfer-encoding[ \t]*:[^\r\n]*chunked")
EXPECT_CONTINUE = re.compile(rb"\r\nexpect[ \t]*:[ \t]*100-continue")


def request_head(data: bytes | bytearray) -> tuple[int, int] | None:
    """Where the body of the first request in ``data`` starts and the size its head
    declares (0: none, -1: chunked), or None until the head is complete. A head longer than
    ``MAX_HEAD_BYTES`` ends where it is: the thread's parser refuses it."""
    head_end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if head_end < 0:
        return (len(data), 0) if len(data) > MAX_HEAD_BYTES else None
    head = bytes(data[:head_end]).lower()
    if _CHUNKED.search(head):
        return head_end + 4, -1
    declared = _CONTENT_LENGTH.search(head)
    return head_end + 4, int(declared[1]) if declared else 0


def request_end(data: bytes | bytearray, head: tuple[int, int]) -> int | None:
    """Where the request whose head is ``head`` ends in ``data``; None: not all there yet.

    Only framing is judged here. A body over the cap, or chunks that do not parse, end the
    request where it is: the thread's parser and the app refuse it (400, 413) from there.
    """
    start, size = head
    if size < 0:
        return _chunked_end(data, start)
    if size > MAX_BODY_BYTES:
        return start
    return start + size if len(data) >= start + size else None


def _chunked_end(data: bytes | bytearray, pos: int) -> int | None:
    body = 0
    while True:
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            return len(data) if len(data) - pos > 1024 else None
        try:
            size = int(bytes(data[pos:line_end]).split(b";")[0].strip(), 16)
        except ValueError:
            return line_end  # not chunked framing: the parser says so
        if size == 0:
            if data[line_end + 2 : line_end + 4] == b"\r\n":
                return line_end + 4
            trailers = data.find(b"\r\n\r\n", line_end)
            return trailers + 4 if trailers >= 0 else None
        body += size
        if body > MAX_BODY_BYTES:
            return len(data)  # over the cap: the app answers 413 from what it got
        pos = line_end + 2 + size + 2
        if pos > len(data):
            return None
