"""``gpu-webhook rules lint [PATH]``, ``rules schema`` and ``rules export [PATH]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.commands import (
    DEFAULT_RULES,
    RULES_ENV,
    SUMMARIES,
    add_context_option,
    fail,
    rules_directory,
)
from webhook.engine.policy.crds import resource_of
from webhook.engine.policy.exemptions import exemption_warnings
from webhook.engine.policy.ruleset import PolicyError
from webhook.engine.policy.schema import DOCUMENT_KINDS, rules_schema
from webhook.engine.resources.inventory import Inventory, Node
from webhook.engine.scheduling.schedulability import memory_warnings
from webhook.files.rulefiles import (
    RULE_SUFFIXES,
    compile_rule_files,
    load_policy,
    read_documents,
    read_rule_files,
)
from webhook.reports.wording import counted

if TYPE_CHECKING:
    from webhook.engine.resources.devices import DeviceInventory


def register(sub: Any) -> None:
    parser = sub.add_parser("rules", help=SUMMARIES["rules"])
    rules = parser.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    lint = rules.add_parser(
        "lint",
        help="report every problem in a rule directory or file",
        description="Validate every rule file in PATH against the schema and the semantic "
        "checks (conflicting rules, bad quantities); report all problems, and warn about "
        "rules that would leave pods unschedulable and about exemptions by namespace name "
        "that a namespace creator could take (with --kubeconfig: names that do not exist). "
        "Exit 0: usable (warnings allowed); 1: problems found; 2: PATH, --inventory or the "
        "cluster unusable.",
    )
    lint.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help=f"rule directory or one rule file ({', '.join(RULE_SUFFIXES)}) (default: "
        f"${RULES_ENV}, else ./{DEFAULT_RULES})",
    )
    lint.add_argument(
        "--inventory",
        metavar="FILE",
        help="nodes as 'kubectl get nodes -o yaml' prints them, to check memory limits "
        "against (default: none, only the rules' declared node pools)",
    )
    lint.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="list this cluster's namespaces (read once) to warn about exempted namespaces "
        "that do not exist (default: not checked)",
    )
    add_context_option(lint)
    lint.set_defaults(handler=_lint)
    schema = rules.add_parser("schema", help="print the JSON Schema of rule file documents")
    schema.add_argument(
        "--suite",
        action="store_true",
        help="print the schema of policy test suites (kind: GPUPolicyTest, for gpu-webhook "
        "test) instead (default: the rule files' schema)",
    )
    schema.set_defaults(handler=_schema)
    export = rules.add_parser(
        "export",
        help="print rule documents as Kubernetes objects, for kubectl apply or a GitOps repo",
        description="Lint PATH, then print its rule documents as one YAML stream of objects "
        "(kubectl apply -f - takes it once the CRDs are installed), or write one file per "
        "object under --output-dir (KIND-PLURAL/NAME.yaml), the layout of a policy "
        "repository. Comments are not kept. Exit 0: exported; 1: problems found (nothing "
        "exported); 2: PATH unusable or a file to write exists.",
    )
    export.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help=f"rule directory or one rule file (default: ${RULES_ENV}, else ./{DEFAULT_RULES})",
    )
    export.add_argument(
        "--kind",
        action="append",
        choices=list(DOCUMENT_KINDS),
        help="export only documents of this kind (repeatable; default: all)",
    )
    export.add_argument(
        "--output-dir",
        metavar="DIR",
        help="write one file per object under DIR (default: one stream on stdout)",
    )
    export.set_defaults(handler=_export)


def _fail(message: str) -> int:
    return fail("rules lint", message)


def _lint(args: argparse.Namespace) -> int:
    path, origin = rules_directory(args.path)
    if not Path(path).exists():
        where = f"{path} ({origin})" if origin != "--rules" else path
        return _fail(
            f"{where}: no such directory or file; give a rule directory or file, or set {RULES_ENV}"
        )
    if Path(path).is_file() and Path(path).suffix not in RULE_SUFFIXES:
        return _fail(f"{path}: not a rule file; rule files end in {', '.join(RULE_SUFFIXES)}")
    nodes: tuple[Node, ...] = ()
    snapshot: Inventory | None = None
    devices: DeviceInventory | None = None
    if args.inventory:
        # Only with an inventory: the inventory file's parser and the device model are
        # a third of what lint of rules alone would import (bench/startup.py).
        from webhook.files.inventoryfile import InventoryFileError, load_inventory_file

        try:
            view = load_inventory_file(args.inventory).view()
        except InventoryFileError as exc:
            return _fail(f"the inventory is not usable: {exc}")
        snapshot, devices = view.snapshot, view.devices
        nodes = snapshot.nodes if snapshot is not None else ()
    try:
        policy = load_policy(path)
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{counted(len(exc.problems), 'problem')} found", file=sys.stderr)
        return 1
    namespaces: set[str] | None = None
    if args.kubeconfig or args.context:
        found = _cluster_namespaces(args)
        if isinstance(found, int):
            return found
        namespaces = found
    warnings = memory_warnings(policy, nodes)
    if snapshot is not None:  # label_warnings finds nothing without nodes to look at
        from webhook.engine.scheduling.labelkeys import label_warnings

        warnings += label_warnings(policy, snapshot, devices)
    warnings += exemption_warnings(policy, namespaces)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"{path}: {counted(len(policy.rules), 'rule')}, "
        f"{counted(len(policy.node_pools), 'node pool')}, no problems"
        + (f", {counted(len(warnings), 'warning')}" if warnings else "")
    )
    return 0


def _cluster_namespaces(args: argparse.Namespace) -> set[str] | int:
    """The names of the cluster's namespaces, or the exit code of a one-line failure. The
    cluster client only for a cluster: lint of files runs in CI loops."""
    from webhook.cluster.apiclient import ApiError, KubeconfigError, api_endpoint_from_kubeconfig
    from webhook.cluster.clusterobjects import ClusterObjects

    try:
        endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
        with ClusterObjects(endpoint) as cluster:
            return set(cluster.namespace_labels())
    except KubeconfigError as exc:
        return _fail(f"no usable cluster configuration: {exc}")
    except ApiError as exc:
        return _fail(f"cannot list the cluster's namespaces: {exc}")


def _export(args: argparse.Namespace) -> int:
    """The documents exactly as linted: the file form is the object form."""
    path, _ = rules_directory(args.path)
    if not Path(path).exists():
        return fail("rules export", f"{path}: no such directory or file")
    files = read_rule_files(path)
    try:
        compile_rule_files(files, directory=path)
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{counted(len(exc.problems), 'problem')} found; nothing exported", file=sys.stderr)
        return 1
    documents, _ = read_documents(files)
    chosen = [d for d in documents if not args.kind or d.ref.kind in args.kind]
    if args.output_dir is None:
        yaml.safe_dump_all([dict(d.body) for d in chosen], sys.stdout, sort_keys=False)
        return 0
    targets = {
        Path(args.output_dir) / resource_of(d.ref.kind) / f"{d.ref.name}.yaml": d for d in chosen
    }
    existing = [str(t) for t in targets if t.exists()]
    if existing:
        return fail("rules export", f"{existing[0]} exists: not overwritten")
    for target, document in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(dict(document.body), sort_keys=False))
    print(f"{counted(len(targets), 'object')} written under {args.output_dir}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from webhook.engine.policy.policytest import suite_schema

    json.dump(suite_schema() if args.suite else rules_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
