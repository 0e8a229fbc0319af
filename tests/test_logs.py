"""Review lines: the same JSON line whether written directly or through ``logging``."""

from __future__ import annotations

import io
import json
import logging

import pytest

from webhook import logs
from webhook.logs import REVIEW_LOGGER, JsonFormatter

FIELDS = {"endpoint": "mutate", "uid": "u-1", "rules_fired": ["a"], "dry_run": False}


@pytest.fixture
def direct():
    logger = logging.getLogger(REVIEW_LOGGER)
    previous = logger.level
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    logs.write_reviews_to(stream)
    yield stream
    logs.write_reviews_to(None)
    logger.setLevel(previous)


def _without_time(line: str) -> dict[str, object]:
    data = json.loads(line)
    assert data.pop("time").endswith("Z")
    return data


@pytest.mark.parametrize(
    "level", [pytest.param(logging.INFO, id="info"), pytest.param(logging.WARNING, id="warning")]
)
def test_a_direct_review_line_is_the_line_the_formatter_writes(direct, level):
    record = logging.LogRecord(REVIEW_LOGGER, level, __file__, 0, "review", None, None)
    record.fields = FIELDS

    logs.review_line("review", FIELDS, level=level)

    (line,) = direct.getvalue().splitlines()
    assert _without_time(line) == _without_time(JsonFormatter().format(record))


def test_a_direct_review_line_keeps_to_the_review_loggers_level(direct):
    logging.getLogger(REVIEW_LOGGER).setLevel(logging.WARNING)  # the fixture restores it

    logs.review_line("review", FIELDS)
    logs.review_line("call refused", FIELDS, level=logging.WARNING)

    assert [json.loads(x)["msg"] for x in direct.getvalue().splitlines()] == ["call refused"]
