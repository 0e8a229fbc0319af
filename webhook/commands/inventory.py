"""``gpu-webhook inventory``: print what the webhook sees of the cluster's nodes."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from webhook.cluster.clusterobjects import ClusterObjects
from webhook.cluster.sources.inventorysource import (
    ApiError,
    KubeconfigError,
    api_endpoint_from_kubeconfig,
)
from webhook.commands import (
    SUMMARIES,
    add_context_option,
    add_text_or_json_option,
    add_timeout_option,
    fail,
    say,
)
from webhook.engine.policy.ruleset import compile_policy
from webhook.files.inventoryfile import InventoryFileError, load_inventory_file
from webhook.files.shipped import shipped_catalogue
from webhook.reports.inventory import render_text, summarize
from webhook.reports.pools import pool_lines, sizing


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "inventory",
        help=SUMMARIES["inventory"],
        description="List the cluster's nodes once, as the webhook's cache does, and print "
        "GPU resources per node class, the largest node per resource, and cordoned and "
        "not-ready nodes. Without --inventory or --kubeconfig: the pod's service account "
        "when run in a cluster, else the default kubeconfig. Exit 2: unusable input or API.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--inventory",
        metavar="FILE",
        help="nodes as 'kubectl get nodes -o yaml' (or -o json) prints them (default: none: "
        "list the cluster)",
    )
    where.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the cluster to list (default: in a pod its service account, else "
        "$KUBECONFIG or ~/.kube/config)",
    )
    add_text_or_json_option(parser)
    add_context_option(parser)
    add_timeout_option(parser)
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    return fail("inventory", message)


def run(args: argparse.Namespace) -> int:
    try:
        if args.inventory:
            view = load_inventory_file(args.inventory).view()
        else:
            endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
            notices: list[str] = []
            with ClusterObjects(endpoint, request_timeout_seconds=args.timeout) as cluster:
                view = cluster.view(notices)
            for notice in notices:
                say(f"notice: {notice}")
    except InventoryFileError as exc:
        return _fail(f"the inventory is not usable: {exc}")
    except KubeconfigError as exc:
        return _fail(f"no usable cluster configuration: {exc}")
    except ApiError as exc:
        return _fail(f"cannot list nodes: {exc}")
    assert view.snapshot is not None  # both readers give nodes, or fail
    # Pools are sized with the shipped catalogue and default settings (no rules here).
    policy = compile_policy([], catalogue=shipped_catalogue())
    found = sizing(view.pools, policy=policy, inventory=view.snapshot)
    report = summarize(view.snapshot, view.devices, pools=pool_lines(found))
    if args.output == "json":
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report))
    return 0
