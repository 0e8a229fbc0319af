"""Review lines: the same JSON line whether written directly or through ``logging``, and
written in batches without losing or reordering one."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import threading
import time

import pytest

from webhook import jsonlog
from webhook.jsonlog import JsonFormatter
from webhook.serving import logs
from webhook.serving.logs import REVIEW_LOGGER, ReviewLines

FIELDS = {"endpoint": "mutate", "uid": "u-1", "rules_fired": ["a"], "dry_run": False}


@pytest.fixture
def direct():
    logger = logging.getLogger(REVIEW_LOGGER)
    previous = logger.level
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    logs.write_reviews_to(stream, interval=60)

    def written() -> str:
        logs.flush_reviews()
        return stream.getvalue()

    yield written
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

    (line,) = direct().splitlines()
    assert _without_time(line) == _without_time(JsonFormatter().format(record))


def test_a_direct_review_line_keeps_to_the_review_loggers_level(direct):
    logging.getLogger(REVIEW_LOGGER).setLevel(logging.WARNING)  # the fixture restores it

    logs.review_line("review", FIELDS)
    logs.review_line("call refused", FIELDS, level=logging.WARNING)

    assert [json.loads(x)["msg"] for x in direct().splitlines()] == ["call refused"]


def test_a_review_line_waits_for_the_batch_and_a_warning_writes_it_in_order(direct):
    logs.review_line("review", {**FIELDS, "uid": "first"})
    pending = logs._Direct.lines.stream.getvalue()

    logs.review_line("call refused", {**FIELDS, "uid": "second"}, level=logging.WARNING)

    assert pending == ""
    assert [json.loads(x)["uid"] for x in direct().splitlines()] == ["first", "second"]


def test_going_back_to_logging_writes_the_lines_held():
    stream = io.StringIO()
    logs.write_reviews_to(stream, interval=60)
    logging.getLogger(REVIEW_LOGGER).setLevel(logging.INFO)
    try:
        logs.review_line("review", FIELDS)
    finally:
        logs.write_reviews_to(None)
        logging.getLogger(REVIEW_LOGGER).setLevel(logging.NOTSET)

    assert json.loads(stream.getvalue())["uid"] == FIELDS["uid"]


def _lines(stream: io.StringIO) -> list[bytes]:
    return stream.getvalue().encode().splitlines(keepends=True)


@pytest.mark.parametrize(
    ("max_bytes", "written"),
    [
        pytest.param(1024, 0, id="under the cap waits"),
        pytest.param(18, 3, id="each line at the cap is written at once"),
    ],
)
def test_lines_are_written_once_max_bytes_pile_up(max_bytes, written):
    stream = io.StringIO()
    lines = ReviewLines(stream, interval=60, max_bytes=max_bytes)

    for number in range(3):
        lines.add(b"0123456789 line %d\n" % number)

    assert len(_lines(stream)) == written


def test_the_writer_thread_writes_within_its_interval_and_close_writes_the_rest():
    stream = io.StringIO()
    lines = ReviewLines(stream, interval=0.01)
    lines.start()
    lines.add(b"early\n")
    deadline = time.monotonic() + 10
    while not stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.005)
    early = stream.getvalue()

    lines.add(b"late\n")
    lines.close()

    assert early == "early\n"
    assert stream.getvalue() == "early\nlate\n"
    assert not lines._thread.is_alive()


def test_a_text_stream_with_a_buffer_gets_bytes_after_its_own_pending_text():
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=False)
    stream.write("from logging\n")
    lines = ReviewLines(stream, interval=60)

    lines.add(b"review\n")
    lines.flush()

    assert raw.getvalue() == b"from logging\nreview\n"


def test_lines_added_from_many_threads_are_all_written_whole():
    stream = io.StringIO()
    lines = ReviewLines(stream, interval=0.001, max_bytes=512)
    lines.start()

    def add(thread: int) -> None:
        for number in range(200):
            lines.add(b"%d-%d\n" % (thread, number))

    threads = [threading.Thread(target=add, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines.close()

    written = stream.getvalue().splitlines()
    assert sorted(written) == sorted(f"{t}-{n}" for t in range(4) for n in range(200))


# --- every field clipped (issue 27) -------------------------------------------------------

CUT = jsonlog.MAX_FIELD_CHARS


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        pytest.param("u" * 100, "u" * 100, id="a-short-text-whole"),
        pytest.param(
            "u" * (4 << 20), "u" * CUT + f"...[{(4 << 20) - CUT} more characters cut]", id="4-MiB"
        ),
        pytest.param(
            ["r"] * 100,
            ["r"] * jsonlog.MAX_ITEMS + [f"...{100 - jsonlog.MAX_ITEMS} more items cut"],
            id="a-long-list",
        ),
        pytest.param(
            {"k": "v" * (CUT + 5)}, {"k": "v" * CUT + "...[5 more characters cut]"}, id="nested"
        ),
        pytest.param(12345, 12345, id="a-number"),
    ],
)
def test_every_field_of_a_long_line_is_clipped_with_a_marker_of_what_was_cut(direct, value, kept):
    logs.review_line("call refused", {"uid": value, "pad": "p" * CUT}, level=logging.WARNING)

    (line,) = direct().splitlines()
    assert json.loads(line)["uid"] == kept


def test_a_log_line_quoting_a_huge_uid_in_its_message_and_traceback_stays_short():
    uid = "u" * (4 << 20)
    message = "engine failed on %s %s"
    try:
        raise ValueError(f"cannot read {uid}")
    except ValueError:
        record = logging.LogRecord(
            "gpu_webhook.service", logging.ERROR, __file__, 0, message, ("Widget", uid),
            sys.exc_info(),
        )  # fmt: skip

    line = json.loads(JsonFormatter().format(record))

    assert len(json.dumps(line)) < jsonlog.MAX_EXCEPTION_CHARS + 4 * CUT
    full = len(message % ("Widget", uid))
    assert line["msg"].endswith(f"...[{full - CUT} more characters cut]")
    assert line["exception"].startswith("Traceback")
    assert line["exception"].endswith("u" * 100)
    assert "characters cut]..." in line["exception"]


HOSTILE_NAME = "pod\x1b[2J\x85\x9b31m\u2028\u2029::warning ::x é"


def test_a_review_line_names_a_hostile_pod_with_escapes_and_reads_back(direct):
    logs.review_line("review", {**FIELDS, "name": HOSTILE_NAME})

    (line,) = direct().splitlines()
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", line)
    assert "\\u009b" in line
    assert json.loads(line)["name"] == HOSTILE_NAME


def test_a_formatted_line_names_a_hostile_pod_with_escapes_and_reads_back():
    record = logging.LogRecord(
        "gpu_webhook", logging.INFO, __file__, 0, "%s", (HOSTILE_NAME,), None
    )

    line = JsonFormatter().format(record)

    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", line)
    assert json.loads(line)["msg"] == HOSTILE_NAME
