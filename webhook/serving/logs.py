"""JSON log lines on stderr: one object per line, so log pipelines need no parsing rules.

The review line is written once per admission, so its path is kept short: the record is
built directly (no caller lookup, no ``extra`` merge) and the formatter reuses the time
text within a second. Measured with ``bench/admission.py``, going through ``Logger.log``
cost about a tenth of the webhook's throughput on a two-core machine.

In the server, review lines are also written in batches (``ReviewLines``): a write to stderr
lets go of the interpreter lock, and a review thread that lets go of it may wait for it
behind another thread's whole review, which showed in the benchmark's p99.

The line's format and the clipping of its fields are ``webhook.jsonlog``'s, shared with the
inventory watcher's process.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

from webhook.jsonlog import MAX_FIELD_CHARS, JsonFormatter, clipped, escaped_controls

REVIEW_LOGGER = "gpu_webhook.review"
_REVIEWS = logging.getLogger(REVIEW_LOGGER)


class ReviewLines:
    """Review lines gathered in memory and written to ``stream`` at most every ``interval``
    seconds, or sooner when ``max_bytes`` pile up or a warning comes.

    A worker answering a thousand reviews a second makes ten writes instead of a thousand.
    The price: a line reaches the log up to ``interval`` late, and a worker killed outright
    (SIGKILL, out of memory) loses the lines it had not written yet. ``close`` (worker exit)
    and interpreter exit write what is left.
    """

    def __init__(
        self, stream: TextIO, *, interval: float = 0.1, max_bytes: int = 256 * 1024
    ) -> None:
        self.stream = stream
        self.interval = interval
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._lines: list[bytes] = []
        self._size = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="review-lines", daemon=True)

    def start(self) -> None:
        self._thread.start()
        atexit.register(self.close)

    def add(self, line: bytes, *, urgent: bool = False) -> None:
        with self._lock:
            self._lines.append(line)
            self._size += len(line)
            full = self._size >= self.max_bytes
        if urgent or full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            lines, self._lines, self._size = self._lines, [], 0
        if lines:
            _write(self.stream, b"".join(lines))

    def close(self) -> None:
        self._closed.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self.flush()
        atexit.unregister(self.close)

    def _run(self) -> None:
        while not self._closed.wait(self.interval):
            self.flush()


def _write(stream: TextIO, data: bytes) -> None:
    binary = getattr(stream, "buffer", None)
    if binary is None:
        stream.write(data.decode())
        stream.flush()
        return
    stream.flush()  # whatever the text layer holds goes first
    binary.write(data)
    binary.flush()


class _Direct:
    """Where review lines go when the server writes them itself (``write_reviews_to``)."""

    lines: ReviewLines | None = None
    formatter = JsonFormatter()


def write_reviews_to(stream: TextIO | None, *, interval: float = 0.1) -> None:
    """Write review lines to ``stream`` (the server's stderr) in batches (``ReviewLines``),
    skipping the logging machinery: the same JSON line, at the same levels, for a fraction
    of the cost (record, handler lock, formatter). ``None`` writes what is pending and goes
    back to ``logging``. The server calls this in each worker, where its logging
    configuration sends every line to stderr."""
    previous, _Direct.lines = _Direct.lines, None
    if previous is not None:
        previous.close()
    if stream is not None:
        lines = ReviewLines(stream, interval=interval)
        lines.start()
        _Direct.lines = lines


def flush_reviews() -> None:
    """Write the review lines still held (``write_reviews_to``) now."""
    lines = _Direct.lines
    if lines is not None:
        lines.flush()


def review_line(message: str, fields: Mapping[str, Any], *, level: int = logging.INFO) -> None:
    """One review's line. Through ``logging``, fields go under ``fields`` (``name`` and
    ``msg`` are taken on a LogRecord) and the formatter lifts them to the top."""
    if not _REVIEWS.isEnabledFor(level):
        return
    lines = _Direct.lines
    if lines is not None:
        line = {
            "time": _Direct.formatter.time_text(time.time()),
            "level": logging.getLevelName(level).lower(),
            "logger": REVIEW_LOGGER,
            "msg": message,
            **fields,
        }
        text = orjson.dumps(line, default=str, option=orjson.OPT_APPEND_NEWLINE)
        if len(text) > MAX_FIELD_CHARS:
            text = orjson.dumps(clipped(line), default=str, option=orjson.OPT_APPEND_NEWLINE)
        lines.add(escaped_controls(text), urgent=level >= logging.WARNING)
        return
    record = logging.LogRecord(REVIEW_LOGGER, level, __file__, 0, message, None, None)
    record.fields = fields
    _REVIEWS.handle(record)
