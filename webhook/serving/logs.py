"""JSON log lines on stderr: one object per line, so log pipelines need no parsing rules.

The review line is written once per admission, so its path is kept short: the record is
built directly (no caller lookup, no ``extra`` merge) and the formatter reuses the time
text within a second. Measured with ``bench/admission.py``, going through ``Logger.log``
cost about a tenth of the webhook's throughput on a two-core machine.

In the server, review lines are also written in batches (``ReviewLines``): a write to stderr
lets go of the interpreter lock, and a review thread that lets go of it may wait for it
behind another thread's whole review, which showed in the benchmark's p99.

Every field of every line is clipped (``clipped``): ``MAX_FIELD_CHARS`` per string, with a
marker saying how much was cut, ``MAX_ITEMS`` per list or mapping, and a traceback to its
first and last ``MAX_EXCEPTION_CHARS // 2``. A caller writes much of what is logged (a uid,
a name, a body the engine could not read that the traceback quotes), and one review with a
4 MiB uid wrote a 4 MiB line. A line is only walked when its JSON is longer than
``MAX_FIELD_CHARS``, which no field over the limit can be under: a usual review line (about
500 bytes) costs one ``len``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

REVIEW_LOGGER = "gpu_webhook.review"
MAX_FIELD_CHARS = 1024  # a Kubernetes name is at most 253; a message, a few hundred
MAX_ITEMS = 64
MAX_EXCEPTION_CHARS = 16 * 1024  # a traceback of our code is a few KiB
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
_REVIEWS = logging.getLogger(REVIEW_LOGGER)


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", ...fields}``: a record's ``fields`` mapping
    when it has one (review lines), else every key it got from ``extra``."""

    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.time_text(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            line.update(fields)
        else:
            for key, value in record.__dict__.items():
                if key not in _STANDARD and not key.startswith("_"):
                    line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        text = orjson.dumps(line, default=str)
        if len(text) > MAX_FIELD_CHARS:
            text = orjson.dumps(clipped(line), default=str)
        return text.decode()

    def time_text(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            # Two threads may both refresh this at a second's turn; both write the same.
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"


def clipped(line: Mapping[str, Any]) -> dict[str, Any]:
    """``line`` with every field within the limits of the module docstring."""
    kept = {key: _clip(value, depth=0) for key, value in line.items()}
    exception = line.get("exception")
    if isinstance(exception, str):
        kept["exception"] = _clip_both_ends(exception, MAX_EXCEPTION_CHARS)
    return kept


def _clip(value: Any, *, depth: int) -> Any:
    if isinstance(value, str):
        return _clip_text(value, MAX_FIELD_CHARS)
    if isinstance(value, (bytes, bytearray)):
        return _clip_text(
            bytes(value[: MAX_FIELD_CHARS + 1]).decode(errors="replace"), MAX_FIELD_CHARS
        )
    if depth >= 4:
        return (
            _clip_text(str(value), MAX_FIELD_CHARS)
            if isinstance(value, (Mapping, list, tuple))
            else value
        )
    if isinstance(value, Mapping):
        items = list(value.items())
        kept = {
            _clip_text(str(k), MAX_FIELD_CHARS): _clip(v, depth=depth + 1)
            for k, v in items[:MAX_ITEMS]
        }
        if len(items) > MAX_ITEMS:
            kept["..."] = f"{len(items) - MAX_ITEMS} more entries cut"
        return kept
    if isinstance(value, (list, tuple)):
        kept_items = [_clip(item, depth=depth + 1) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            kept_items.append(f"...{len(value) - MAX_ITEMS} more items cut")
        return kept_items
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return _clip_text(str(value), MAX_FIELD_CHARS)  # what orjson's default=str would write


def _clip_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters cut]"


def _clip_both_ends(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}...[{len(text) - 2 * half} characters cut]...{text[-half:]}"


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
        lines.add(text, urgent=level >= logging.WARNING)
        return
    record = logging.LogRecord(REVIEW_LOGGER, level, __file__, 0, message, None, None)
    record.fields = fields
    _REVIEWS.handle(record)
