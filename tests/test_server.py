"""The gunicorn configuration: choices that no request can show."""

from __future__ import annotations

from gunicorn.config import Config

from webhook.config import Settings
from webhook.server import gunicorn_options


def test_gunicorn_builds_no_access_record_because_the_review_line_is_the_access_log():
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
