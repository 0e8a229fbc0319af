"""The gunicorn configuration: choices that no request can show."""

from __future__ import annotations

import gc
import json
import logging

import pytest
from gunicorn.config import Config

from webhook.serving import logs
from webhook.serving.config import Settings
from webhook.serving.server import WebhookServer, gunicorn_options


@pytest.fixture
def logging_restored():
    """gunicorn's logger applies the server's logging configuration to this process."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


def test_gunicorn_builds_no_access_record_because_the_review_line_is_the_access_log(
    logging_restored,
):
    cfg = Config()
    for key, value in gunicorn_options(Settings()).items():
        cfg.set(key, value)
    logger = cfg.logger_class(cfg)
    calls = []
    logger.atoms = lambda *args: calls.append(args) or {}

    logger.access(resp=None, req=None, environ={}, request_time=None)

    assert cfg.logconfig_dict, "a logging configuration is what turns gunicorn's access log on"
    assert logger.access_log_enabled is False
    assert calls == []


def test_a_worker_freezes_what_it_loaded_so_full_collections_never_walk_it_again(tmp_path):
    def factory(settings):
        return (lambda *_: []), lambda: None

    server = WebhookServer(Settings(cert_dir=tmp_path), app_factory=factory)
    gc.unfreeze()
    try:
        server.load()
        assert gc.get_freeze_count() > 1000, "nothing was frozen"
    finally:
        gc.unfreeze()
        logs.write_reviews_to(None)


def test_a_worker_writes_review_lines_to_stderr_itself(tmp_path, monkeypatch, capsys):
    def factory(settings):
        return (lambda *_: []), lambda: None

    monkeypatch.setattr(gc, "freeze", lambda: None)
    reviews = logging.getLogger(logs.REVIEW_LOGGER)
    previous = reviews.level
    reviews.setLevel(logging.INFO)
    server = WebhookServer(Settings(cert_dir=tmp_path), app_factory=factory)
    try:
        server.load()
        logs.review_line("review", {"uid": "u-1"})
    finally:
        logs.write_reviews_to(None)
        reviews.setLevel(previous)

    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["uid"] == "u-1"
