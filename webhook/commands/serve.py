"""``gpu-webhook serve``: the admission webhook over TLS on gunicorn.

Checks what it can before gunicorn starts (rules, inventory file, certificates), so a bad
setting is one clear line and exit code 2, not a crash loop of workers.
"""

from __future__ import annotations

import argparse
import errno
import gc
import os
import shutil
import socket
import ssl
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from webhook.commands import SUMMARIES, fail
from webhook.serving import config
from webhook.serving.config import ConfigError, Settings, env_default

DEV_CERTS = Path("certs/dev")
DEV_INVENTORY = Path("examples/inventory.yaml")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "serve",
        help=SUMMARIES["serve"],
        description="Serve the admission webhook. Every option can also come from the "
        "environment variable named in its help; the flag wins.",
    )
    env = config.ENVIRONMENT
    parser.add_argument(
        "--port",
        default=env_default("port"),
        help=f"TLS port for admission (default: %(default)s; ${env['port']})",
    )
    parser.add_argument(
        "--health-port",
        default=env_default("health_port"),
        help="plain-HTTP port for /healthz, /readyz, /metrics; 0: none "
        f"(default: %(default)s; ${env['health_port']})",
    )
    parser.add_argument(
        "--host",
        default=env_default("host"),
        help="address both ports listen on; --dev makes 0.0.0.0 127.0.0.1 "
        f"(default: %(default)s; ${env['host']})",
    )
    parser.add_argument(
        "--cert-dir",
        default=env_default("cert_dir"),
        metavar="DIR",
        help=f"holds tls.crt and tls.key, as a Kubernetes TLS Secret mounts them "
        f"(default: %(default)s, or {DEV_CERTS} with --dev; ${env['cert_dir']})",
    )
    parser.add_argument(
        "--rules",
        default=env_default("rules"),
        metavar="DIR",
        help=f"rule file directory (default: %(default)s; ${env['rules']})",
    )
    parser.add_argument(
        "--inventory",
        default=env_default("inventory"),
        metavar="FILE",
        help="static nodes, as 'kubectl get nodes -o yaml' prints them (default: none, or "
        f"{DEV_INVENTORY} with --dev; ${env['inventory']})",
    )
    parser.add_argument(
        "--kubeconfig",
        default=env_default("kubeconfig"),
        metavar="FILE",
        help="watch nodes live through this kubeconfig (default: none; in a pod, the "
        f"in-cluster config when neither this nor --inventory is given; ${env['kubeconfig']})",
    )
    parser.add_argument(
        "--context",
        default=env_default("context"),
        metavar="NAME",
        help="kubeconfig context, with --kubeconfig, as with kubectl (default: its "
        f"current-context; ${env['context']})",
    )
    parser.add_argument(
        "--workers",
        default=env_default("workers"),
        help=f"worker processes (default: %(default)s; ${env['workers']})",
    )
    parser.add_argument(
        "--log-level",
        default=env_default("log_level"),
        choices=config.LOG_LEVELS,
        help=f"log level (default: %(default)s; ${env['log_level']})",
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        default=None,
        help="audit the cluster in the background and write PolicyReports (one replica, "
        f"by Lease; needs a live cluster and the PolicyReport CRD) (default: off; "
        f"${env['audit']}=true)",
    )
    parser.add_argument(
        "--audit-period",
        default=env_default("audit_period"),
        metavar="SECONDS",
        help=f"seconds between background audits; rule changes audit at once "
        f"(${env['audit_period']}, default 3600)",
    )
    parser.add_argument(
        "--audit-lease-namespace",
        default=env_default("audit_lease_namespace"),
        metavar="NS",
        help=f"namespace of the audit Lease; default: the pod's own "
        f"(${env['audit_lease_namespace']})",
    )
    parser.add_argument(
        "--sync-match-conditions",
        action="store_true",
        default=None,
        help="keep the webhooks' matchConditions in sync with the rules in force and the "
        "nodes (one replica, by Lease; needs a live cluster and RBAC to patch the two webhook "
        "configurations: deploy/overlays/match-conditions-sync) (default: off, the conditions "
        f"are rendered at deploy time; ${env['sync_match_conditions']}=true)",
    )
    parser.add_argument(
        "--webhook-configuration",
        default=env_default("webhook_configuration"),
        metavar="NAME",
        help="name of the Mutating- and ValidatingWebhookConfiguration whose matchConditions "
        f"--sync-match-conditions writes (default: %(default)s; "
        f"${env['webhook_configuration']})",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help=f"development: throwaway CA and localhost certificate in {DEV_CERTS}/, the "
        f"shipped rules and {DEV_INVENTORY}, listening on 127.0.0.1 (default: off)",
    )
    parser.set_defaults(handler=run)


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from parsed flags (whose defaults already read the environment)."""
    cert_dir = Path(args.cert_dir)
    inventory = Path(args.inventory) if args.inventory else None
    host = args.host
    if args.dev:
        cert_dir = DEV_CERTS if args.cert_dir == env_default("cert_dir") else cert_dir
        inventory = inventory or (DEV_INVENTORY if not args.kubeconfig else None)
        host = "127.0.0.1" if host == config.DEFAULTS["host"] else host
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    return Settings(
        port=config.port(args.port, "--port"),
        health_port=config.port(args.health_port, "--health-port"),
        host=host,
        cert_dir=cert_dir,
        rules=Path(args.rules),
        inventory=inventory,
        kubeconfig=kubeconfig,
        context=args.context or None,
        in_cluster=inventory is None and kubeconfig is None and config.in_cluster(),
        workers=config.integer(args.workers, "--workers", minimum=1),
        log_level=config.log_level(args.log_level),
        inventory_failure_mode=config.failure_mode(env_default("inventory_failure_mode")),
        audit=args.audit or config.switch(env_default("audit"), config.ENVIRONMENT["audit"]),
        audit_period=config.seconds(args.audit_period, "--audit-period", minimum=60.0),
        audit_lease_namespace=args.audit_lease_namespace or None,
        sync_match_conditions=args.sync_match_conditions
        or config.switch(
            env_default("sync_match_conditions"), config.ENVIRONMENT["sync_match_conditions"]
        ),
        webhook_configuration=config.name(args.webhook_configuration, "--webhook-configuration"),
    )


def _fail(message: str) -> int:
    return fail("serve", message)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except ConfigError as exc:
        return _fail(str(exc))
    problem = preflight(settings, dev=args.dev)
    if problem:
        return _fail(problem)
    # This server's private files: metrics of every worker, and the last good rules and
    # inventory for workers that start while the files on disk are broken.
    state = Path(tempfile.mkdtemp(prefix="gpu-webhook-"))
    owner = os.getpid()
    try:
        # prometheus_client reads the variable when it is first imported, so set it
        # before importing anything that imports it.
        (state / "metrics").mkdir()
        config.use_multiprocess_metrics(str(state / "metrics"))
        settings = replace(settings, last_good=state / "last-good")
        remember_last_good(settings)
        # What the master holds now (the inventory file, parsed once and taken by each
        # worker: files/inventoryfile) leaves the collector's generations: a worker's
        # collections then never write to those pages, which stay shared with the master.
        gc.freeze()
        from webhook.serving.server import WebhookServer

        if args.dev:
            print(_dev_banner(settings), file=sys.stderr)
        WebhookServer(settings).run()
    finally:
        # gunicorn's workers are forks of this stack and leave through it too: only the
        # process that made the directory may remove it, or a worker's exit would take
        # every sibling's metrics files with it.
        if os.getpid() == owner:
            shutil.rmtree(state, ignore_errors=True)
    return 0


def remember_last_good(settings: Settings) -> None:
    """Keep the rules and inventory that ``preflight`` found good as the server's last
    good state, before any worker starts."""
    from webhook.admission.inventory import StaticInventorySource
    from webhook.files.lastgood import LastGood
    from webhook.files.rulefiles import RuleStore

    assert settings.last_good is not None
    kept = LastGood(settings.last_good)
    RuleStore(str(settings.rules), last_good=kept)
    if settings.inventory is not None:
        StaticInventorySource(str(settings.inventory), last_good=kept)


def preflight(settings: Settings, *, dev: bool = False) -> str:
    """The first reason this configuration cannot serve, or an empty string. With ``dev``,
    the throwaway certificates are made once the rules are found (not in any directory
    ``serve --dev`` happens to be run from)."""
    from webhook.engine.policy.ruleset import PolicyError
    from webhook.files.inventoryfile import InventoryFileError, load_inventory
    from webhook.files.rulefiles import load_policy

    if not settings.rules.exists():
        return (
            f"no rules at {settings.rules} (--rules, ${config.ENVIRONMENT['rules']}); run from "
            "the repository root for its rules/, or pass --rules DIR"
        )
    try:
        load_policy(str(settings.rules))
    except PolicyError as exc:
        first, more = (str(exc.problems[0]) if exc.problems else str(exc)), len(exc.problems) - 1
        rest = f" (and {more} more: gpu-webhook rules lint {settings.rules})" if more > 0 else ""
        return f"the rules in {settings.rules} are not usable: {first}{rest}"
    if dev:
        from webhook.files.certs import ensure_dev

        try:
            ensure_dev(settings.cert_dir)
        except OSError as exc:  # a read-only root filesystem, as deploy/ runs the image
            return (
                f"cannot write the development certificates to {settings.cert_dir} "
                f"({exc.strerror or exc}): pass --cert-dir a writable directory, or serve "
                "without --dev with tls.crt and tls.key mounted (--cert-dir)"
            )
    for path in (settings.cert_file, settings.key_file):
        if not path.is_file():
            return f"{path} does not exist (--cert-dir holds tls.crt and tls.key)"
    problem = _tls_problem(settings)
    if problem:
        return problem
    if settings.inventory is not None:
        try:
            load_inventory(str(settings.inventory))
        except InventoryFileError as exc:
            return f"the inventory is not usable: {exc}"
    elif settings.live_inventory:
        from webhook.cluster.sources.inventorysource import (
            KubeconfigError,
            api_endpoint_from_kubeconfig,
        )

        try:
            api_endpoint_from_kubeconfig(
                str(settings.kubeconfig) if settings.kubeconfig else None, context=settings.context
            )
        except KubeconfigError as exc:
            return f"the cluster configuration is not usable: {exc}"
    if settings.context and settings.kubeconfig is None:
        return "--context goes with --kubeconfig: name the kubeconfig whose context it is"
    if settings.audit and not settings.live_inventory:
        return (
            "--audit needs a cluster to audit: give --kubeconfig (or run in a pod), not --inventory"
        )
    if settings.sync_match_conditions and not settings.live_inventory:
        return (
            "--sync-match-conditions needs the cluster whose webhook configurations it writes: "
            "give --kubeconfig (or run in a pod), not --inventory"
        )
    return _port_problem(settings)


def _tls_problem(settings: Settings) -> str:
    """Load the pair as the server will, so a bad pair is a line here and not a traceback
    from gunicorn's master after it said it was listening."""
    from webhook.serving.tls import server_context

    try:
        server_context(settings.cert_file, settings.key_file)
    except ssl.SSLError as exc:
        reason = (exc.reason or str(exc)).lower().replace("_", " ")
        return (
            f"{settings.cert_file} and {settings.key_file} do not load as a TLS certificate and "
            f"its key ({reason}); write a matching pair with 'gpu-webhook certs generate'"
        )
    except OSError as exc:
        name = exc.filename or settings.cert_dir
        return f"cannot read {name}: {exc.strerror or exc}"
    return ""


def _port_problem(settings: Settings) -> str:
    """Whether both ports can be listened on now. gunicorn would otherwise retry for 5 s
    and exit 1, and the health port would fail in its master after the start-up line."""
    env = config.ENVIRONMENT
    ports = [("--port", env["port"], settings.port)]
    if settings.health_port:
        if settings.health_port == settings.port:
            return f"--port and --health-port are both {settings.port}; give them different ports"
        ports.append(("--health-port", env["health_port"], settings.health_port))
    for flag, variable, number in ports:
        if number == 0:
            continue
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn does
            try:
                probe.bind((settings.host, number))
            except OSError as exc:
                where = f"port {number} on {settings.host} ({flag}, ${variable})"
                if exc.errno == errno.EADDRINUSE:
                    return f"{where} is in use: stop what listens there or choose another port"
                return f"cannot listen on {where}: {exc.strerror or exc}"
    return ""


def _dev_banner(settings: Settings) -> str:
    url = f"https://localhost:{settings.port}"
    return (
        f"gpu-webhook (dev): {url}/mutate and /validate, CA in {settings.cert_dir}/ca.crt\n"
        f"  health and metrics: http://localhost:{settings.health_port}/metrics\n"
        f"  try: curl --cacert {settings.cert_dir}/ca.crt -H 'Content-Type: application/json' "
        f"--data @tests/fixtures/admission/pod-gpu-limits-mutate-Pod-CREATE.json {url}/mutate"
    )
