"""``gpu-webhook certs generate|inspect|install``: the webhook's TLS, made and checked."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from webhook.commands import SUMMARIES, fail
from webhook.files import certs

DEFAULT_NAME = "gpu-webhook"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("certs", help=SUMMARIES["certs"])
    sub = parser.add_subparsers(dest="certs_command", required=True, metavar="ACTION")

    gen = sub.add_parser("generate", help="write a CA and a serving certificate to a directory")
    _service_args(gen, required=True)
    gen.add_argument(
        "--out", type=Path, default=Path("."), metavar="DIR", help="directory (default: .)"
    )
    gen.add_argument(
        "--days",
        type=int,
        default=certs.DEFAULT_DAYS,
        help=f"validity in days (default: {certs.DEFAULT_DAYS})",
    )
    gen.add_argument(
        "--force",
        action="store_true",
        help="overwrite a CA, certificate or key already in DIR (default: refuse)",
    )
    gen.set_defaults(handler=_generate)

    ins = sub.add_parser("inspect", help="show a certificate directory; fail if it would not serve")
    ins.add_argument(
        "dir", type=Path, metavar="DIR", help="directory with ca.crt, tls.crt, tls.key (required)"
    )
    ins.add_argument(
        "--service",
        help="also require the Service's DNS names, with --namespace (default: none)",
    )
    ins.add_argument("--namespace", help="namespace of --service (default: none)")
    ins.add_argument(
        "--san",
        action="append",
        default=[],
        help="also require this SAN; repeatable (default: none)",
    )
    ins.set_defaults(handler=_inspect)

    inst = sub.add_parser(
        "install",
        help="store the serving pair in a TLS Secret and the CA in the webhook configurations",
    )
    _service_args(inst, required=False)
    inst.add_argument(
        "--secret", default=f"{DEFAULT_NAME}-tls", help="TLS Secret name (default: %(default)s)"
    )
    inst.add_argument(
        "--webhook-config",
        default=DEFAULT_NAME,
        help="name of the Mutating and the Validating webhook configuration (default: %(default)s)",
    )
    inst.add_argument(
        "--days",
        type=int,
        default=certs.DEFAULT_DAYS,
        help="validity in days (default: %(default)s)",
    )
    inst.add_argument(
        "--renew-within",
        type=int,
        default=30,
        metavar="DAYS",
        help="renew when the certificate expires within DAYS (default: 30)",
    )
    where = inst.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    where.add_argument(
        "--in-cluster",
        action="store_true",
        help="use the pod's service account (default: off, use the kubeconfig)",
    )
    inst.add_argument("--context", help="kubeconfig context (default: its current context)")
    inst.set_defaults(handler=_install)


def _service_args(parser: argparse.ArgumentParser, *, required: bool) -> None:
    default = None if required else DEFAULT_NAME
    shown = "required" if required else "default: %(default)s"
    parser.add_argument(
        "--service", required=required, default=default, help=f"Service name ({shown})"
    )
    parser.add_argument(
        "--namespace", required=required, default=default, help=f"its namespace ({shown})"
    )
    parser.add_argument(
        "--san",
        action="append",
        default=[],
        help="extra SAN, DNS name or IP; repeatable (default: none)",
    )


def _generate(args: argparse.Namespace) -> int:
    existing = [
        name
        for name in (certs.CA_FILE, certs.CERT_FILE, certs.KEY_FILE)
        if (args.out / name).exists()
    ]
    if existing and not args.force:
        return _fail(
            f"{args.out} already holds {', '.join(existing)}; not overwriting them (a new CA "
            "breaks every client that trusts the old one): choose another --out, or add --force"
        )
    try:
        pair = certs.generate(
            service=args.service, namespace=args.namespace, extra_sans=args.san, days=args.days
        )
        paths = certs.write(pair, args.out)
    except certs.CertError as err:
        return _fail(str(err))
    except OSError as err:
        return _fail(f"{args.out}: cannot write ({err.strerror})")
    for path in paths:
        print(path)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    if (args.service is None) != (args.namespace is None):
        return _fail("--service and --namespace go together")
    required = list(args.san)
    if args.service:
        required = [*certs.service_names(args.service, args.namespace), *required]
    try:
        report = certs.inspect(certs.read(args.dir), required=required)
    except certs.CertError as err:
        return _fail(f"{args.dir}: {err}" if not str(err).startswith(str(args.dir)) else str(err))
    print("\n".join(report.lines()))
    return 1 if report.problems else 0


def _install(args: argparse.Namespace) -> int:
    # Imported here: only this action needs the kubernetes client, and it is slow to import.
    from webhook.cluster import certinstall

    if args.days <= args.renew_within:
        return _fail(f"--days {args.days} must exceed --renew-within {args.renew_within}")
    target = certinstall.Target(
        namespace=args.namespace,
        service=args.service,
        secret=args.secret,
        webhook_config=args.webhook_config,
        extra_sans=tuple(args.san),
        days=args.days,
        renew_within=dt.timedelta(days=args.renew_within),
    )
    try:
        api = certinstall.connect(
            kubeconfig=args.kubeconfig, context=args.context, in_cluster=args.in_cluster
        )
        actions = certinstall.install(api, target)
    except (certinstall.InstallError, certs.CertError) as err:
        return _fail(str(err))
    for action in actions:
        print(action)
    return 0


def _fail(message: str) -> int:
    return fail("certs", message)
