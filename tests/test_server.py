"""The gunicorn configuration: choices that no request can show."""

from __future__ import annotations

import gc

from gunicorn.config import Config

from webhook.config import Settings
from webhook.server import WebhookServer, gunicorn_options


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
