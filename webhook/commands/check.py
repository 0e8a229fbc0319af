"""``gpu-webhook check``: evaluate manifests offline as a pod CREATE would, for CI."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from webhook.commands import fail
from webhook.engine.decision import Decision
from webhook.engine.evaluate import NO_INVENTORY, InventoryView, Request, evaluate
from webhook.engine.policy import Policy, PolicyError
from webhook.files.inventoryfile import (
    InventoryFileError,
    load_inventory,
    load_runtime_classes,
)
from webhook.files.manifests import Document, load_manifests
from webhook.files.rulefiles import load_policy

DEFAULT_RULES = "rules"


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
    parser.add_argument(
        "--rules",
        default=os.environ.get("GPU_WEBHOOK_RULES", DEFAULT_RULES),
        metavar="DIR",
        help="rule file directory (default: $GPU_WEBHOOK_RULES or ./rules)",
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        help="nodes as 'kubectl get nodes -o yaml' prints them; without it, no capacity checks",
    )
    parser.add_argument("--namespace", metavar="NS", help="namespace for objects that name none")
    parser.add_argument("--output", "-o", choices=["text", "json", "yaml", "patch"], default="text")
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    return fail("check", message)


def run(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.rules)
    except PolicyError as exc:
        return _fail(f"the rules in {args.rules} are not usable:\n{exc}")
    inventory = NO_INVENTORY
    if args.inventory:
        try:
            inventory = InventoryView(
                load_inventory(args.inventory),
                runtime_classes=load_runtime_classes(args.inventory),
            )
        except InventoryFileError as exc:
            return _fail(f"the inventory is not usable: {exc}")
    documents, errors = load_manifests(args.files)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if not args.inventory and args.output == "text":
        print("notice: no --inventory given: capacity checks are skipped", file=sys.stderr)
    results = [(doc, _evaluate(doc, policy, inventory, args.namespace)) for doc in documents]
    _print(args.output, results)
    if errors:
        return 2
    return 1 if any(not d.allowed for _, d in results) else 0


def _evaluate(
    doc: Document, policy: Policy, inventory: InventoryView, namespace: str | None
) -> Decision:
    return evaluate(Request(doc.obj, namespace=namespace or ""), policy=policy, inventory=inventory)


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
        "findings": [
            {
                "rule": f.rule,
                "check": f.check,
                "action": f.action,
                "message": f.message,
                "path": f.path,
            }
            for f in decision.findings
        ],
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
        before = yaml.safe_dump(dict(doc.obj), sort_keys=False).splitlines()
        after = yaml.safe_dump(dict(decision.mutated), sort_keys=False).splitlines()
        diff = difflib.unified_diff(before, after, "original", "mutated", n=2, lineterm="")
        lines.extend("  " + line for line in diff)
    return "\n".join(lines) + "\n"
