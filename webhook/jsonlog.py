"""The JSON log line that every process of the webhook writes (the server's workers, the
inventory watcher, the background auditor): one object per line, so log pipelines need no
parsing rules. Kept outside ``webhook.serving`` and ``webhook.cluster`` because both write
it, and neither may import the other.

The formatter reuses the time text within a second (the review line is written once per
admission, see ``webhook.serving.logs``).

Every field of every line is clipped (``clipped``): ``MAX_FIELD_CHARS`` per string, with a
marker saying how much was cut, ``MAX_ITEMS`` per list or mapping, and a traceback to its
first and last ``MAX_EXCEPTION_CHARS // 2``. A caller writes much of what is logged (a uid,
a name, a body the engine could not read that the traceback quotes), and one review with a
4 MiB uid wrote a 4 MiB line. A line is only walked when its JSON is longer than
``MAX_FIELD_CHARS``, which no field over the limit can be under: a usual review line (about
500 bytes) costs one ``len``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

MAX_FIELD_CHARS = 1024  # a Kubernetes name is at most 253; a message, a few hundred
MAX_ITEMS = 64
MAX_EXCEPTION_CHARS = 16 * 1024  # a traceback of our code is a few KiB
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
# What orjson writes as it is though a terminal may act on it: C1 controls (U+009B is CSI to
# some terminals showing ``kubectl logs``) and the Unicode line separators. They can only
# be in a string of the line, where their \u escapes mean the same.
_RAW_IN_JSON = re.compile(rb"\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")


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
        return escaped_controls(text).decode()

    def time_text(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            # Two threads may both refresh this at a second's turn; both write the same.
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"


def escaped_controls(line: bytes) -> bytes:
    """A JSON line with the characters of ``_RAW_IN_JSON`` as ``\\u`` escapes (orjson
    escapes C0, ESC included); an ASCII line, the usual one, costs one check."""
    if line.isascii():
        return line
    return _RAW_IN_JSON.sub(_escaped, line)


def _escaped(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match.group().decode())


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
