"""JSON log lines on stderr: one object per line, so log pipelines need no parsing rules."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

REVIEW_LOGGER = "gpu_webhook.review"
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", ...fields}``; fields come from ``extra``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key != "fields":
                line[key] = value
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def review_line(message: str, fields: Mapping[str, Any], *, level: int = logging.INFO) -> None:
    """Fields go under ``fields`` (``name`` and ``msg`` are taken on a LogRecord); the
    formatter lifts them to the top of the JSON line."""
    logging.getLogger(REVIEW_LOGGER).log(level, message, extra={"fields": dict(fields)})
