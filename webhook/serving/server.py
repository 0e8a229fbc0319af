"""gunicorn, configured for an admission webhook, serving the app in every worker.

Choices, each for a reason (see docs/server.md):
- ``gthread`` workers: they keep connections alive; ``sync`` workers close each one,
  so the API server would pay a TLS handshake per pod. Ours (``webhook.serving.worker``) also
  spread connections over the workers by how many each holds: a kept-alive connection
  stays with the worker that accepted it.
- ``keepalive`` 120 s, above the API server's idle timeout (90 s): the client closes idle
  connections first, so it never sends a review on a connection we are closing.
- ``timeout`` 8 s, below the webhook's default ``timeoutSeconds`` (10 s): a stuck worker is
  replaced before the API server gives up on it.
- ``graceful_timeout`` 20 s: on SIGTERM, reviews in flight finish (within the pod's 30 s
  termination grace period) and new connections are refused.
- No ``preload_app``: each worker loads rules and starts its background threads after
  the fork, so no thread or lock crosses a fork.
- A live inventory is watched once per pod: the master starts one watcher process
  (``webhook.cluster.watcherprocess``) and every worker follows it over a Unix socket, so
  parsing node events never takes a worker's interpreter lock from admissions.
- The TLS context comes from ``webhook.serving.tls.ReloadingContext`` (rotated certificates).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import ssl
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornBaseLogger

from webhook import jsonlog
from webhook.admission.inventory import InventorySource, StaticInventorySource
from webhook.admission.memo import DecisionMemo, memo_bytes_per_worker
from webhook.admission.service import AdmissionService
from webhook.files.lastgood import LastGood
from webhook.files.rulefiles import RuleStore
from webhook.serving import logs, metrics, tls
from webhook.serving.app import create_app
from webhook.serving.config import Settings
from webhook.serving.health import HealthServer
from webhook.serving.reloader import Reloader
from webhook.serving.tls import ReloadingContext
from webhook.serving.worker import FREE, ConnectionTable

if TYPE_CHECKING:
    from webhook.cluster.liveobjects import LiveObjects
    from webhook.cluster.watcherprocess import WatcherProcess
    from webhook.serving.auditor import AuditorProcess

log = logging.getLogger("gpu_webhook.server")
WSGIApp = Callable[..., Any]
LIVE_MAX_STALENESS_SECONDS = 300.0
KEEPALIVE_SECONDS = 120
WORKER_TIMEOUT_SECONDS = 8
GRACEFUL_TIMEOUT_SECONDS = 20
GIL_SWITCH_SECONDS = 0.0005


def live_inventory(settings: Settings) -> InventorySource:
    """The nodes and namespaces of the cluster: from the pod's watcher when the master runs
    one, else watched in this process. Imported here, not at the top: a server with a
    static inventory never loads the cluster code."""
    if settings.inventory_feed is not None:
        from webhook.cluster.sources.feedsource import FeedInventorySource

        return FeedInventorySource(
            socket_path=str(settings.inventory_feed),
            max_staleness_seconds=LIVE_MAX_STALENESS_SECONDS,
        )
    from webhook.cluster.sources.inventorysource import (
        LiveInventorySource,
        api_endpoint_from_kubeconfig,
    )

    return LiveInventorySource(
        api=api_endpoint_from_kubeconfig(_kubeconfig(settings), context=settings.context),
        watch_namespaces=True,
        max_staleness_seconds=LIVE_MAX_STALENESS_SECONDS,
    )


def cluster_reader(settings: Settings) -> LiveObjects | None:
    """Direct reads of what the live view has not seen yet (a claim created a moment before
    its pod), for the reviews of this worker; none with a static inventory. A kubeconfig
    that cannot be read here leaves the reviews to the view alone, with their warnings."""
    if settings.inventory is not None or not settings.live_inventory:
        return None
    from webhook.cluster.apiclient import KubeconfigError, api_endpoint_from_kubeconfig
    from webhook.cluster.liveobjects import LiveObjects

    try:
        endpoint = api_endpoint_from_kubeconfig(_kubeconfig(settings), context=settings.context)
        return LiveObjects(endpoint)
    except KubeconfigError as exc:
        log.warning("no direct reads of unseen claims: %s", exc)
        return None


def _kubeconfig(settings: Settings) -> str | None:
    return str(settings.kubeconfig) if settings.kubeconfig else None


def last_good(settings: Settings) -> LastGood | None:
    return LastGood(settings.last_good) if settings.last_good is not None else None


def inventory_source(settings: Settings) -> InventorySource | None:
    if settings.inventory is not None:
        return StaticInventorySource(str(settings.inventory), last_good=last_good(settings))
    if settings.live_inventory:
        return live_inventory(settings)
    return None


def inventory_watcher(settings: Settings) -> WatcherProcess | None:
    """The pod's one watcher, for the master to run, when the inventory is live."""
    if settings.inventory is not None or not settings.live_inventory:
        return None
    from webhook.cluster.watcherprocess import WatcherProcess
    from webhook.serving.auditor import lease_namespace

    return WatcherProcess(
        kubeconfig=_kubeconfig(settings),
        context=settings.context,
        log_level=settings.log_level,
        # The watcher also writes the rule objects' status, on one replica (issue 33).
        status_rules=str(settings.rules),
        lease_namespace=lease_namespace(settings.audit_lease_namespace),
        # And the webhooks' match conditions, on one replica, when asked (issue 43).
        match_conditions=settings.webhook_configuration if settings.sync_match_conditions else "",
    )


def background_auditor(settings: Settings) -> AuditorProcess | None:
    """The pod's auditor process, when the background audit is on (one replica audits at
    a time: the process takes a Lease before it lists anything)."""
    if not settings.audit or not settings.live_inventory:
        return None
    from webhook.serving.auditor import AuditorProcess, lease_namespace

    return AuditorProcess(
        kubeconfig=_kubeconfig(settings),
        context=settings.context,
        rules=str(settings.rules),
        period_seconds=settings.audit_period,
        lease_namespace=lease_namespace(settings.audit_lease_namespace),
        log_level=settings.log_level,
    )


def webhook_app(settings: Settings) -> tuple[WSGIApp, Callable[[], None]]:
    """The admission app for one worker, and what stops its background work."""
    inventory = inventory_source(settings)
    reader = cluster_reader(settings)
    # Rule objects the API server serves, merged with the files (issue 33).
    objects = getattr(inventory, "rule_objects", None)
    service = AdmissionService(
        rules=RuleStore(str(settings.rules), last_good=last_good(settings), objects=objects),
        inventory=inventory,
        inventory_failure_mode=settings.inventory_failure_mode,
        memo=DecisionMemo(max_bytes=memo_bytes_per_worker(settings.workers)),
        cluster=reader,
    )
    if inventory is not None:
        inventory.start()
    reloader = Reloader(service, interval=settings.reload_interval)
    reloader.start()

    def stop() -> None:
        reloader.stop()
        if inventory is not None:
            inventory.stop()
        if reader is not None:
            reader.close()

    return create_app(service), stop


AppFactory = Callable[[Settings], tuple[WSGIApp, Callable[[], None]]]


class GunicornLogger(GunicornBaseLogger):  # type: ignore[misc]
    """gunicorn's logger with its access log off: the review line is our access log.

    gunicorn turns its access log on whenever a logging configuration is given, and then
    builds an access record for every request even though ``gunicorn.access`` is silenced
    (about 15 us per request)."""

    @property
    def access_log_enabled(self) -> bool:
        return False

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        """No access lines (see the class docstring)."""


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    return {
        "bind": [f"{_host(settings.host)}:{settings.port}"],
        "workers": settings.workers,
        "worker_class": "webhook.serving.worker.BalancedThreadWorker",  # gthread, balanced
        "threads": settings.threads,
        "keepalive": KEEPALIVE_SECONDS,
        "timeout": WORKER_TIMEOUT_SECONDS,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "certfile": str(settings.cert_file),
        "keyfile": str(settings.key_file),
        "preload_app": False,
        "max_requests": 0,
        "accesslog": None,  # the review log line is the access log
        "logger_class": GunicornLogger,
        "loglevel": settings.log_level,
        "logconfig_dict": _logging_config(settings.log_level),
        "control_socket_disable": True,
        "proc_name": "gpu-webhook",
        # Request line and headers: the API server sends few, small ones.
        "limit_request_line": 8190,
        "limit_request_fields": 50,
        # Connections a worker holds, idle and slow ones included (each costs a file
        # descriptor and a poller slot, never a thread: webhook.serving.worker).
        "worker_connections": worker_connections(),
    }


MAX_WORKER_CONNECTIONS = 1000


def worker_connections() -> int:
    """At most 1,000 connections per worker, fewer when the descriptor limit is low: a
    worker out of descriptors can accept nothing, not even the API server's next try."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_WORKER_CONNECTIONS
    return max(16, min(MAX_WORKER_CONNECTIONS, soft - 100))


def raise_descriptor_limit() -> None:
    """The soft limit up to the hard one (containers often start at 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_WORKER_CONNECTIONS + 200
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _logging_config(level: str) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": jsonlog.JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }


class WebhookServer(BaseApplication):  # type: ignore[misc]
    """``gunicorn`` with our settings; ``app_factory`` runs in each worker after the fork."""

    def __init__(self, settings: Settings, *, app_factory: AppFactory = webhook_app) -> None:
        self.settings = settings
        self.app_factory = app_factory
        self._tls = ReloadingContext(
            settings.cert_file,
            settings.key_file,
            on_load=metrics.certificate_loaded,
            on_refusal=metrics.certificate_refused,
        )
        self._health: HealthServer | None = None
        self._watcher: WatcherProcess | None = None
        self._auditor: AuditorProcess | None = None
        self._stop_worker: Callable[[], None] | None = None
        self._connections = ConnectionTable()  # mapped before any fork: shared with workers
        super().__init__()

    def load_config(self) -> None:
        raise_descriptor_limit()
        for key, value in gunicorn_options(self.settings).items():
            self.cfg.set(key, value)
        self.cfg.set("ssl_context", self._ssl_context)
        self.cfg.set("when_ready", self._when_ready)
        self.cfg.set("on_exit", self._on_exit)
        self.cfg.set("child_exit", self._child_exit)
        self.cfg.set("worker_exit", self._worker_exit)
        self.cfg.set("pre_fork", self._pre_fork)
        self.cfg.set("post_fork", self._post_fork)

    def load(self) -> WSGIApp:
        app, self._stop_worker = self.app_factory(self.settings)
        # What a worker loads (Flask, rules, schemas, engine) lives as long as it does. A
        # full collection walked all of it: about 30 ms here, stalling every review in
        # flight. Frozen objects are never walked again.
        gc.collect()
        gc.freeze()
        logs.write_reviews_to(sys.stderr)  # where _logging_config sends them anyway
        return app

    def _ssl_context(self, conf: Any, default_factory: Any) -> ssl.SSLContext:  # noqa: ARG002
        return self._tls.context()

    def _when_ready(self, server: Any) -> None:  # noqa: ARG002
        self._tls.context()  # fail at start, not at the first handshake
        # Importing the metrics made this (master) process a zero-valued "live" member of
        # every gauge; only workers report, so drop the master's files.
        metrics.worker_exited(os.getpid())
        for process in metrics.HELPER_PROCESSES:  # at 0 from the first scrape
            metrics.PROCESS_RESTARTS.labels(process)
        for reason in tls.REFUSALS:
            metrics.CERTIFICATE_REJECTIONS.labels(reason)
        self._start_watcher()
        self._auditor = background_auditor(self.settings)
        if self._auditor is not None:
            self._auditor.on_restart = metrics.PROCESS_RESTARTS.labels("auditor").inc
            self._auditor.start()
        if self.settings.health_port:
            # Each scrape looks at the certificate files (two stats): a rotation shows in
            # the expiry gauge even while no new connection made a worker reload it.
            self._health = HealthServer(
                self.settings.host, self.settings.health_port, before_scrape=self._tls.context
            )
            self._health.start()
        log.info(
            "serving",
            extra={
                "port": self.settings.port,
                "health_port": self.settings.health_port,
                "rules": str(self.settings.rules),
                "workers": self.settings.workers,
            },
        )

    def _start_watcher(self) -> None:
        """Before the first worker is forked, so that every worker finds its socket."""
        self._watcher = inventory_watcher(self.settings)
        if self._watcher is not None:
            self._watcher.on_restart = metrics.PROCESS_RESTARTS.labels("inventory-watcher").inc
            self._watcher.start()
            feed = Path(self._watcher.socket_path)
            self.settings = replace(self.settings, inventory_feed=feed)

    def _on_exit(self, server: Any) -> None:  # noqa: ARG002
        if self._auditor is not None:
            self._auditor.stop()
        if self._watcher is not None:
            self._watcher.stop()
        if self._health is not None:
            self._health.stop()

    def _child_exit(self, server: Any, worker: Any) -> None:
        metrics.worker_exited(worker.pid)
        if server.LISTENERS:  # emptied by gunicorn's stop: exits at shutdown are no restart
            metrics.WORKER_RESTARTS.inc()
        self._connections.release(getattr(worker, "slot", FREE))

    def _pre_fork(self, server: Any, worker: Any) -> None:
        taken = [getattr(w, "slot", FREE) for w in server.WORKERS.values()]
        worker.table, worker.slot = self._connections, self._connections.claim(taken)

    def _post_fork(self, server: Any, worker: Any) -> None:  # noqa: ARG002
        # A worker thread busy with a review holds the GIL for up to the switch interval
        # (5 ms by default) before the thread that polls kept-alive connections runs:
        # a shorter interval cuts the queueing delay of the next review.
        sys.setswitchinterval(GIL_SWITCH_SECONDS)

    def _worker_exit(self, server: Any, worker: Any) -> None:  # noqa: ARG002
        if self._stop_worker is not None:
            self._stop_worker()
        logs.write_reviews_to(None)  # the lines of the last reviews
