"""``gpu-webhook check``: evaluate manifests offline as a pod CREATE would, for CI."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from webhook.cluster.apiclient import ApiError, KubeconfigError, api_endpoint_from_kubeconfig
from webhook.cluster.clusterobjects import ClusterObjects
from webhook.commands import add_rules_option, fail, rules_or_fail
from webhook.engine.decision import Decision
from webhook.engine.devices import DeviceInventory, is_dra_object
from webhook.engine.evaluate import NO_INVENTORY, InventoryView, Request, evaluate
from webhook.engine.policy import Policy
from webhook.files.inventoryfile import InventoryFileError, load_inventory_file
from webhook.files.manifests import Document, load_manifests
from webhook.reports.audit import finding_json
from webhook.reports.explain import object_diff

COMMAND = "check"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "check",
        help="evaluate manifests offline, as the webhook would on create",
        description="Evaluate every object in the files as a pod CREATE would: decision, "
        "messages, warnings and the patch. Exit 0: all allowed; 1: any denied; 2: unusable "
        "input (the other files are still checked).",
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE|DIR|-",
        help="manifest file, directory (walked for .yaml/.yml/.json) or - for stdin; repeatable",
    )
    add_rules_option(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--inventory",
        metavar="FILE",
        help="nodes as 'kubectl get nodes -o yaml' prints them, and DRA device classes, "
        "resource slices, claims and templates; without it, no capacity checks",
    )
    where.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="use this cluster's live nodes and namespace labels (read once) instead of a file",
    )
    parser.add_argument("--namespace", metavar="NS", help="namespace for objects that name none")
    parser.add_argument("--output", "-o", choices=["text", "json", "yaml", "patch"], default="text")
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    return fail("check", message)


def run(args: argparse.Namespace) -> int:
    policy = rules_or_fail(COMMAND, args.rules)
    if isinstance(policy, int):
        return policy
    inventory = NO_INVENTORY
    labels: Mapping[str, Mapping[str, str]] = {}
    if args.inventory:
        try:
            inventory = load_inventory_file(args.inventory).view()
        except InventoryFileError as exc:
            return _fail(f"the inventory is not usable: {exc}")
    elif args.kubeconfig:
        try:
            inventory, labels = _cluster(args.kubeconfig, namespaces=bool(policy.rules))
        except KubeconfigError as exc:
            return _fail(f"no usable cluster configuration: {exc}")
        except ApiError as exc:
            return _fail(f"cannot read the cluster's nodes and namespaces: {exc}")
    documents, errors = load_manifests(args.files)
    inventory = with_checked_claims(inventory, [d.obj for d in documents])
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if inventory.snapshot is None and args.output == "text":
        print("notice: no --inventory given: capacity checks are skipped", file=sys.stderr)
    results = [
        (doc, _evaluate(doc, policy, inventory, args.namespace, labels)) for doc in documents
    ]
    _print(args.output, results)
    if errors:
        return 2
    return 1 if any(not d.allowed for _, d in results) else 0


def _cluster(
    kubeconfig: str, *, namespaces: bool
) -> tuple[InventoryView, Mapping[str, Mapping[str, str]]]:
    """The cluster's nodes, and its namespaces' labels when rules may match on them."""
    with ClusterObjects(api_endpoint_from_kubeconfig(kubeconfig)) as cluster:
        inventory = InventoryView(cluster.inventory())
        return inventory, cluster.namespace_labels() if namespaces else {}


def with_checked_claims(view: InventoryView, objects: list[Mapping[str, Any]]) -> InventoryView:
    """The claims and claim templates being checked are seen by the pods checked with them,
    as they would be in the cluster once applied together."""
    claims = [
        o
        for o in objects
        if is_dra_object(o) and o.get("kind") in ("ResourceClaim", "ResourceClaimTemplate")
    ]
    if not claims:
        return view
    devices = view.devices or DeviceInventory({}, (), {}, {}, complete=False)
    return InventoryView(view.snapshot, view.problem, devices.with_claims(claims))


def _evaluate(
    doc: Document,
    policy: Policy,
    inventory: InventoryView,
    namespace: str | None,
    labels: Mapping[str, Mapping[str, str]],
) -> Decision:
    request = Request(doc.obj, namespace=namespace or "")
    own = labels.get(request.effective_namespace) if labels else None
    request = Request(doc.obj, namespace=namespace or "", namespace_labels=own)
    return evaluate(request, policy=policy, inventory=inventory)


def _identity(obj: Mapping[str, Any], namespace: str | None) -> dict[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {
        "kind": str(obj.get("kind", "")),
        "apiVersion": str(obj.get("apiVersion", "")),
        "name": str(meta.get("name") or meta.get("generateName") or ""),
        "namespace": namespace or str(meta.get("namespace") or "default"),
    }


def result_json(doc: Document, decision: Decision, namespace: str | None = None) -> dict[str, Any]:
    return {
        **_identity(doc.obj, namespace),
        "source": f"{doc.source}#{doc.index}",
        "allowed": decision.allowed,
        "messages": [f.message for f in decision.denials],
        "warnings": list(decision.warnings),
        "findings": [finding_json(f) for f in decision.findings],
        "audit": dict(decision.audit),
        "notices": list(decision.notices),
        "patch": list(decision.patch),
    }


def _print(output: str, results: list[tuple[Document, Decision]]) -> None:
    if output == "json":
        json.dump([result_json(doc, d) for doc, d in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif output == "patch":
        for _, decision in results:
            sys.stdout.write(json.dumps(list(decision.patch)) + "\n")
    elif output == "yaml":
        yaml.safe_dump_all(
            [d.mutated if d.mutated is not None else doc.obj for doc, d in results],
            sys.stdout,
            sort_keys=False,
        )
    else:
        for doc, decision in results:
            sys.stdout.write(_text(doc, decision))


def _text(doc: Document, decision: Decision) -> str:
    ident = _identity(doc.obj, None)
    verdict = "ALLOWED" if decision.allowed else "DENIED"
    if not decision.understood:
        verdict = "ALLOWED (no pod template: passed through)"
    where = f"{doc.source}#{doc.index}"
    lines = [f"{ident['kind']} {ident['namespace']}/{ident['name']} ({where}): {verdict}"]
    for finding in decision.findings:
        lines.append(f"  {finding.action:5} {finding.id}: {finding.message}")
    lines.extend(
        f"  warning: {w}"
        for w in decision.warnings
        if not any(w == f.warning for f in decision.findings)
    )
    lines.extend(f"  notice: {n}" for n in decision.notices)
    if decision.patch and decision.mutated is not None:
        lines.extend("  " + line for line in object_diff(doc.obj, decision.mutated))
    return "\n".join(lines) + "\n"
