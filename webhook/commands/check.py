"""``gpu-webhook check``: evaluate manifests offline as a pod CREATE would, for CI."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from webhook.commands import (
    ENGINE_ERRORS,
    SUMMARIES,
    add_ci_options,
    add_context_option,
    add_kubernetes_version_option,
    add_rules_option,
    fail,
    kubernetes_schema,
    live_rules,
    refusal,
    refused_outcome,
    rules_or_fail,
    say,
    unreadable,
)
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import (
    NO_INVENTORY_NOTICE,
    InventoryView,
    Request,
)
from webhook.engine.kube.strict import KubeSchema
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import Policy
from webhook.files.context import applied_together, files_view, review_time
from webhook.files.inventoryfile import InventoryFileError
from webhook.files.manifests import Document, load_manifests
from webhook.reports.colour import Paint
from webhook.reports.escape import for_terminal, for_yaml_comment
from webhook.reports.findings import finding_json, object_diff, waiver_json, waiver_line
from webhook.reports.results import (
    CI_FORMATS,
    Outcome,
    exit_code,
    github,
    junit,
    sarif_text,
)
from webhook.reports.wording import counted

COMMAND = "check"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "check",
        help=SUMMARIES["check"],
        description="Evaluate every object in the files as a pod CREATE would: decision, "
        "messages, warnings and the patch. Exit 0: all allowed; 1: any denied; 2: unusable "
        "input (the other files are still checked).",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="manifest files or directories, as with -f (default: none)",
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        default=[],
        metavar="FILE|DIR|-",
        help="manifest file, directory (walked for .yaml/.yml/.json) or - for stdin; "
        "repeatable (default: none; give a PATH or -f)",
    )
    add_rules_option(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--inventory",
        metavar="FILE",
        help="nodes as 'kubectl get nodes -o yaml' prints them, and DRA device classes, "
        "resource slices, claims and templates (default: none, so no capacity checks)",
    )
    where.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="use this cluster's live nodes and namespace labels (read once) instead of a file "
        "(default: none)",
    )
    add_context_option(parser)
    parser.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        help="namespace for objects that name none (default: default); an object's own "
        "metadata.namespace always wins",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=["text", "json", "yaml", "patch", *CI_FORMATS],
        default="text",
        help="text: per object for people; json: a result per object; yaml: the mutated "
        "objects; patch: a JSON Patch per line; junit, sarif, github: for CI (default: text)",
    )
    add_ci_options(parser)
    add_kubernetes_version_option(parser)
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    return fail("check", message)


@dataclass(frozen=True, slots=True)
class Checked:
    doc: Document
    namespace: str
    decision: Decision


def run(args: argparse.Namespace) -> int:
    paths = [*args.paths, *args.files]
    if not paths:
        return _fail("no manifests given: name files or directories (or - for stdin)")
    schema = kubernetes_schema(COMMAND, args.kubernetes_version)
    if isinstance(schema, int):
        return schema
    policy = rules_or_fail(COMMAND, args.rules)
    if isinstance(policy, int):
        return policy
    # CI formats point each finding at its field's line: only they pay for the line map.
    documents, errors = load_manifests(paths, fields=args.output in CI_FORMATS)
    objects = [d.obj for d in documents]
    labels: Mapping[str, Mapping[str, str]] = {}
    if args.inventory or not (args.kubeconfig or args.context):
        try:
            inventory = files_view(args.inventory, objects)
        except InventoryFileError as exc:
            return _fail(f"the inventory is not usable: {exc}")
    else:
        # The cluster client only for a cluster: check of files starts in a CI loop.
        from webhook.cluster.apiclient import ApiError, KubeconfigError

        try:
            inventory, labels, policy = _cluster(args)
        except KubeconfigError as exc:
            return _fail(f"no usable cluster configuration: {exc}")
        except ApiError as exc:
            return _fail(f"cannot read the cluster's nodes and namespaces: {exc}")
        except _Unusable as exc:
            return exc.code
        inventory = applied_together(inventory, objects)
    unusable = unreadable(errors, paths=paths, read=bool(documents))
    results, refused = judge(
        documents,
        policy=policy,
        inventory=inventory,
        namespace=args.namespace,
        labels=labels,
        schema=schema,
    )
    unusable.extend(refused)
    paint = Paint.for_stream(sys.stderr, no_color=args.no_color)
    for outcome in unusable:
        where, problem = for_terminal(outcome.where), for_terminal(_problem(outcome))
        print(f"{paint('red', 'error:')} {where}: {problem}", file=sys.stderr)
    if inventory.snapshot is None:
        print("notice: no --inventory given: capacity checks are skipped", file=sys.stderr)
    outcomes = [*map(outcome_of, results), *unusable]
    _print(args, results, unusable, outcomes)
    return exit_code(outcomes, warn_exit_code=args.warn_exit_code)


def judge(
    documents: list[Document],
    *,
    policy: Policy,
    inventory: InventoryView,
    namespace: str | None,
    labels: Mapping[str, Mapping[str, str]],
    schema: KubeSchema | None = None,
) -> tuple[list[Checked], list[Outcome]]:
    """Each object as ``check`` judges it, and those it cannot judge (kubectl would refuse
    them, or the engine trips on them). ``gpu-webhook test`` judges its suites' objects
    here too, so that a suite's expectation is held to check's very answer. ``schema``:
    the Kubernetes version's API the objects must decode into (default the newest)."""
    from webhook.files.shipped import kube_schema

    schema = schema or kube_schema()
    results: list[Checked] = []
    unusable: list[Outcome] = []
    for doc in documents:
        refused = refusal(doc, policy, schema)
        if refused is not None:
            unusable.append(refused)
            continue
        try:
            results.append(_evaluate(doc, policy, inventory, namespace, labels))
        except ENGINE_ERRORS as exc:
            # What the server answers such an object with (admission/service.py): the
            # engine could not read it. One line and exit 2 here, never a traceback.
            error = f"{type(exc).__name__}: {str(exc)[:100]}"
            unusable.append(
                refused_outcome(doc, [f"not usable: the webhook cannot evaluate it ({error})"])
            )
    return results, unusable


def _problem(outcome: Outcome) -> str:
    return f"{outcome.label}: {outcome.problem}" if outcome.kind else outcome.problem


def outcome_of(checked: Checked) -> Outcome:
    decision = checked.decision
    ident = _identity(checked)
    return Outcome(
        file=checked.doc.source,
        line=checked.doc.line,
        status="allowed" if decision.allowed else "denied",
        kind=ident["kind"],
        namespace=ident["namespace"],
        name=ident["name"],
        findings=tuple(decision.findings),
        warnings=_own_warnings(decision),
        finding_lines=tuple(checked.doc.line_of(f.path) for f in decision.findings),
    )


def _own_warnings(decision: Decision) -> tuple[str, ...]:
    """Warnings that are not a finding's own."""
    return tuple(w for w in decision.warnings if not any(w == f.warning for f in decision.findings))


def _label(doc: Document) -> str:
    meta = doc.obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    kind = doc.obj.get("kind")
    return f"{kind if isinstance(kind, str) and kind else 'object'} {name or '(no name)'}"


def _own_namespace(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    own = meta.get("namespace") if isinstance(meta, Mapping) else None
    return own if isinstance(own, str) else ""


class _Unusable(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _cluster(
    args: argparse.Namespace,
) -> tuple[InventoryView, Mapping[str, Mapping[str, str]], Policy]:
    """What the server reads of the cluster (nodes, DRA objects, RuntimeClasses, autoscaler
    pools, rule objects), and its namespaces' labels when rules may match on them."""
    from webhook.cluster.apiclient import api_endpoint_from_kubeconfig
    from webhook.cluster.clusterobjects import ClusterObjects

    endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
    with ClusterObjects(endpoint) as cluster:
        live = live_rules(COMMAND, args.rules, cluster.client)
        if isinstance(live, int):
            raise _Unusable(live)
        notices: list[str] = []
        inventory = cluster.view(notices)
        for notice in notices:
            say(f"notice: {notice}")
        return inventory, cluster.namespace_labels() if live.rules else {}, live


def _evaluate(
    doc: Document,
    policy: Policy,
    inventory: InventoryView,
    namespace: str | None,
    labels: Mapping[str, Mapping[str, str]],
) -> Checked:
    # As kubectl does: the object's own namespace, else -n, else default.
    effective = _own_namespace(doc.obj) or namespace or "default"
    own = labels.get(effective) if labels else None
    request = Request(doc.obj, namespace=effective, namespace_labels=own, now=review_time())
    return Checked(doc, effective, evaluate(request, policy=policy, inventory=inventory))


def _identity(checked: Checked) -> dict[str, str]:
    obj = checked.doc.obj
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {
        "kind": str(obj.get("kind", "")),
        "apiVersion": str(obj.get("apiVersion", "")),
        "name": str(meta.get("name") or meta.get("generateName") or ""),
        "namespace": checked.namespace,
    }


def _notices(decision: Decision) -> list[str]:
    """The object's notices, less the one said once per run."""
    return [n for n in decision.notices if n != NO_INVENTORY_NOTICE]


def result_json(checked: Checked) -> dict[str, Any]:
    decision = checked.decision
    return {
        **_identity(checked),
        "source": checked.doc.where,
        "file": checked.doc.source,
        "line": checked.doc.line,
        "status": "allowed" if decision.allowed else "denied",
        "allowed": decision.allowed,
        "messages": [f.message for f in decision.denials],
        "warnings": list(decision.warnings),
        "findings": [finding_json(f) for f in decision.findings],
        "audit": dict(decision.audit),
        "waived": [waiver_json(w) for w in decision.waivers],
        "notices": _notices(decision),
        "patch": list(decision.patch),
    }


def unusable_json(outcome: Outcome) -> dict[str, Any]:
    """A file or object that could not be judged, in the place of its result."""
    return {
        "kind": outcome.kind if outcome.kind != "object" else "",
        "apiVersion": "",
        "name": outcome.name,
        "namespace": outcome.namespace,
        "source": outcome.where,
        "file": outcome.file,
        "line": outcome.line or None,
        "status": "unusable",
        "allowed": None,
        "error": outcome.problem,
    }


def _print(
    args: argparse.Namespace,
    results: list[Checked],
    unusable: list[Outcome],
    outcomes: list[Outcome],
) -> None:
    output = args.output
    warnings_fail = args.warn_exit_code is not None
    if output == "json":
        entries = [*map(result_json, results), *map(unusable_json, unusable)]
        json.dump(entries, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif output == "patch":
        for checked in results:
            sys.stdout.write(f"# {for_yaml_comment(f'{_name(checked)} ({checked.doc.where})')}\n")
            sys.stdout.write(json.dumps(list(checked.decision.patch)) + "\n")
    elif output == "yaml":
        for checked in results:
            sys.stdout.write(_yaml_document(checked))
    elif output == "junit":
        sys.stdout.write(junit(outcomes, suite="gpu-webhook check", warnings_fail=warnings_fail))
    elif output == "sarif":
        sys.stdout.write(sarif_text(outcomes, command="check"))
    elif output == "github":
        sys.stdout.write(github(outcomes, warnings_fail=warnings_fail))
    else:
        paint = Paint.for_stream(sys.stdout, no_color=args.no_color)
        for checked in results:
            sys.stdout.write(_text(checked, paint))
        sys.stdout.write(summary(outcomes, paint) + "\n")


def _name(checked: Checked) -> str:
    ident = _identity(checked)
    return f"{ident['kind']} {ident['namespace']}/{ident['name']}"


def _yaml_document(checked: Checked) -> str:
    """The mutated object, after a comment that names it and says its decision: a denied
    object would not be stored, so applying this output as it is would fail on it."""
    decision = checked.decision
    obj = decision.mutated if decision.mutated is not None else checked.doc.obj
    verdict = "allowed"
    if not decision.allowed:
        rules = ", ".join(dict.fromkeys(f.id for f in decision.denials))
        verdict = f"DENIED by {rules}" if rules else "DENIED"
    # Comments one line each, whatever a name holds: a newline in a container's name
    # must not end the comment and start a document of its own. The object is written by
    # the dumper, which quotes and escapes every scalar.
    head = f"---\n# {for_yaml_comment(f'{_name(checked)} ({checked.doc.where}): {verdict}')}\n"
    if not decision.allowed:
        head += "".join(f"#   {for_yaml_comment(f.message)}\n" for f in decision.denials)
    return head + yaml.safe_dump(obj, sort_keys=False)


def summary(outcomes: list[Outcome], paint: Paint) -> str:
    """The last line of text output: objects, allowed, denied, unusable, with warnings."""
    allowed = sum(1 for o in outcomes if o.status == "allowed")
    denied = sum(1 for o in outcomes if o.status == "denied")
    unusable = sum(1 for o in outcomes if o.status == "unusable")
    warned = sum(1 for o in outcomes if o.status != "unusable" and o.warned)
    return (
        f"{paint('bold', counted(len(outcomes), 'object'))}: "
        f"{paint('green', f'{allowed} allowed')}, "
        f"{paint('red' if denied else 'green', f'{denied} denied')}, "
        f"{paint('red' if unusable else 'green', f'{unusable} unusable')}, "
        f"{paint('yellow' if warned else 'green', f'{warned} with warnings')}"
    )


def _text(checked: Checked, paint: Paint) -> str:
    """An object's lines: every name escaped before colour is added (``for_terminal``)."""
    doc, decision = checked.doc, checked.decision
    ident = {k: for_terminal(v) for k, v in _identity(checked).items()}
    verdict = paint("green", "ALLOWED") if decision.allowed else paint("red", "DENIED")
    if not decision.understood:
        verdict = paint("green", "ALLOWED") + " (no pod template: passed through)"
    where = for_terminal(doc.where)
    lines = [f"{ident['kind']} {ident['namespace']}/{ident['name']} ({where}): {verdict}"]
    for finding in decision.findings:
        colour = {"deny": "red", "warn": "yellow"}.get(finding.action, "dim")
        said = f"{for_terminal(finding.id)}: {for_terminal(finding.message)}"
        lines.append(f"  {paint(colour, f'{finding.action:5}')} {said}")
    lines.extend(
        f"  {paint('dim', 'waived')} {for_terminal(waiver_line(w))}" for w in decision.waivers
    )
    lines.extend(
        f"  {paint('yellow', 'warning:')} {for_terminal(w)}"
        for w in decision.warnings
        if not any(w == f.warning for f in decision.findings)
    )
    lines.extend(f"  notice: {for_terminal(n)}" for n in _notices(decision))
    if decision.patch and decision.mutated is not None:
        # YAML lines, each escaped again: a scalar that spans lines may start one with ::.
        diff = object_diff(doc.obj, decision.mutated)
        lines.extend("  " + _diff_colour(for_terminal(line), paint) for line in diff)
    return "\n".join(lines) + "\n"


def _diff_colour(line: str, paint: Paint) -> str:
    if line.startswith("+") and not line.startswith("+++"):
        return paint("green", line)
    if line.startswith("-") and not line.startswith("---"):
        return paint("red", line)
    return line
