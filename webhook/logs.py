"""JSON log lines on stderr: one object per line, so log pipelines need no parsing rules.

The review line is written once per admission, so its path is kept short: the record is
built directly (no caller lookup, no ``extra`` merge) and the formatter reuses the time
text within a second. Measured with ``bench/admission.py``, going through ``Logger.log``
cost about a tenth of the webhook's throughput on a two-core machine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

REVIEW_LOGGER = "gpu_webhook.review"
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
        return orjson.dumps(line, default=str).decode()

    def time_text(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            # Two threads may both refresh this at a second's turn; both write the same.
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"


class _Direct:
    """Where review lines go when the server writes them itself (``write_reviews_to``)."""

    stream: TextIO | None = None
    formatter = JsonFormatter()


def write_reviews_to(stream: TextIO | None) -> None:
    """Write review lines straight to ``stream`` (the server's stderr), skipping the
    logging machinery: the same JSON line, at the same levels, for a fraction of the cost
    (record, handler lock, formatter); ``None`` goes back to ``logging``. The server calls
    this in each worker, where its logging configuration sends every line to stderr."""
    _Direct.stream = stream


def review_line(message: str, fields: Mapping[str, Any], *, level: int = logging.INFO) -> None:
    """One review's line. Through ``logging``, fields go under ``fields`` (``name`` and
    ``msg`` are taken on a LogRecord) and the formatter lifts them to the top."""
    if not _REVIEWS.isEnabledFor(level):
        return
    stream = _Direct.stream
    if stream is not None:
        line = {
            "time": _Direct.formatter.time_text(time.time()),
            "level": logging.getLevelName(level).lower(),
            "logger": REVIEW_LOGGER,
            "msg": message,
            **fields,
        }
        stream.write(orjson.dumps(line, default=str).decode() + "\n")
        return
    record = logging.LogRecord(REVIEW_LOGGER, level, __file__, 0, message, None, None)
    record.fields = fields
    _REVIEWS.handle(record)
