"""``gpu-webhook audit``: what the current rules would say of the objects that already exist."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

import yaml

from webhook.cluster.apiclient import ApiError, KubeconfigError, api_endpoint_from_kubeconfig
from webhook.cluster.clusteraudit import audit_cluster
from webhook.cluster.clusterobjects import ClusterObjects
from webhook.commands import (
    ENGINE_ERRORS,
    SUMMARIES,
    add_ci_options,
    add_context_option,
    add_kubernetes_version_option,
    add_rules_option,
    add_timeout_option,
    fail,
    kubernetes_schema,
    live_rules,
    refusal,
    rules_or_fail,
    say,
    unreadable,
)
from webhook.engine.kube.workloads import WorkloadKind
from webhook.engine.policy.ruleset import Policy
from webhook.files.context import files_view
from webhook.files.inventoryfile import InventoryFileError
from webhook.files.manifests import Document, ManifestError, load_manifests
from webhook.reports.audit import Audit, AuditEntry, render_text
from webhook.reports.escape import for_terminal
from webhook.reports.policyreport import policy_reports
from webhook.reports.results import (
    CI_FORMATS,
    Outcome,
    exit_code,
    github,
    junit,
    sarif_text,
)

PROGRESS_EVERY_SECONDS = 0.2


COMMAND = "audit"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "audit",
        help=SUMMARIES["audit"],
        description="Evaluate every object of the kinds the webhook understands as a CREATE "
        "would, and report: a table, JSON, or wgpolicyk8s.io/v1alpha2 PolicyReports. Pods "
        "owned by an audited workload are folded into it. Without -f, the cluster of "
        "--kubeconfig (or the pod's service account, or the default kubeconfig) is listed "
        "page by page with its live nodes. Exit 0: all allowed; 1: any denied; 2: unusable "
        "input or a kind that could not be listed.",
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        metavar="FILE|DIR|-",
        help="audit these manifests instead of a cluster; repeatable (default: none, the cluster)",
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        help="nodes as 'kubectl get nodes -o yaml' prints them (with -f; default: none, so no "
        "capacity checks)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the cluster to audit (default: in a pod its service account, else "
        "$KUBECONFIG or ~/.kube/config)",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", metavar="NS", help="only this namespace (default: every namespace)"
    )
    scope.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        help="every namespace (default: on unless --namespace)",
    )
    parser.add_argument(
        "--kinds",
        metavar="KIND,...",
        help="only these kinds, e.g. Pod,Deployment,PyTorchJob (kind, plural or kind.group; "
        "default: every kind the webhook understands)",
    )
    add_rules_option(parser)
    parser.add_argument(
        "--output",
        "-o",
        choices=["text", "table", "json", "policyreport", *CI_FORMATS],
        default="text",
        help="text (or table) for people, json for tools, policyreport for kubectl apply, "
        "junit, sarif or github for CI (default: text)",
    )
    add_ci_options(parser)
    add_context_option(parser)
    add_timeout_option(parser)
    add_kubernetes_version_option(parser)
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    return fail("audit", message)


def kind_filter(spec: str | None) -> Callable[[WorkloadKind], bool]:
    """``Pod,deployments,pytorchjob.kubeflow.org``: matched without regard to case."""
    if not spec:
        return lambda _: True
    names = {n.strip().lower() for n in spec.split(",") if n.strip()}

    def wanted(kind: WorkloadKind) -> bool:
        forms = {kind.kind.lower(), kind.resource.lower()}
        if kind.group:
            forms |= {f"{f}.{kind.group.lower()}" for f in list(forms)}
        return bool(forms & names)

    return wanted


def unknown_kinds(spec: str, kinds: Iterable[WorkloadKind]) -> str:
    """What is wrong with ``--kinds``, or an empty string: each name that matches no kind
    the webhook understands, with the closest ones in kubectl's ``kind.group`` spelling
    (as ``kubectl get`` answers "the server doesn't have a resource type")."""
    known = {k.kind for k in kinds}
    forms: dict[str, str] = {}  # a lower-case spelling -> Kind.group as shown
    shown = []
    for kind in sorted(kinds, key=lambda k: (k.kind, k.group)):
        label = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
        shown.append(f"{kind.kind} ({kind.group or 'core'})")
        for form in (kind.kind, kind.resource):
            forms.setdefault(form.lower(), label)
            if kind.group:
                forms.setdefault(f"{form}.{kind.group}".lower(), label)
    problems = []
    for name in (n.strip() for n in spec.split(",") if n.strip()):
        if name.lower() in forms or name in known:
            continue
        close = difflib.get_close_matches(name.lower(), list(forms), n=3, cutoff=0.6)
        guesses = list(dict.fromkeys(forms[c] for c in close))
        hint = f" (did you mean {' or '.join(guesses)}?)" if guesses else ""
        problems.append(f"{name!r} is no kind the webhook understands{hint}")
    if not problems:
        return ""
    return f"{'; '.join(problems)} (known: {', '.join(dict.fromkeys(shown))})"


def run(args: argparse.Namespace) -> int:
    policy = rules_or_fail(COMMAND, args.rules)
    if isinstance(policy, int):
        return policy
    wanted = kind_filter(args.kinds)
    unknown = unknown_kinds(args.kinds, policy.kinds) if args.kinds else ""
    if unknown:
        return _fail(f"--kinds {args.kinds}: {unknown}")
    if args.files:
        if args.kubeconfig:
            return _fail("give either -f (files) or --kubeconfig (a cluster), not both")
        return _offline(args, policy, wanted)
    if args.inventory:
        return _fail("--inventory goes with -f; a cluster audit uses the cluster's nodes")
    return _cluster(args, policy, wanted)


def _offline(
    args: argparse.Namespace, policy: Policy, wanted: Callable[[WorkloadKind], bool]
) -> int:
    schema = kubernetes_schema(COMMAND, args.kubernetes_version)
    if isinstance(schema, int):
        return schema
    # CI formats point each finding at its field's line: only they pay for the line map.
    documents, errors = load_manifests(args.files, fields=args.output in CI_FORMATS)
    try:
        # As check reads them: the inventory file and the files' own claims and classes.
        inventory = files_view(args.inventory, [d.obj for d in documents])
    except InventoryFileError as exc:
        return _fail(f"the inventory is not usable: {exc}")
    unusable = unreadable(errors, paths=args.files, read=bool(documents))
    # Objects kubectl would refuse are unusable, not judged: as check counts them.
    judged = []
    for doc in documents:
        refused = refusal(doc, policy, schema)
        if refused is not None:
            unusable.append(refused)
        else:
            judged.append(doc)
    for outcome in unusable:
        say(f"error: {for_terminal(outcome.where)}: {for_terminal(outcome.problem)}")
    if not args.inventory and args.output in ("text", "table"):
        print("notice: no --inventory given: capacity checks are skipped", file=sys.stderr)
    audit = Audit(policy=policy, inventory=inventory)
    audit.errors.extend(f"{o.where}: {o.problem}" for o in unusable)
    chosen = [d for d in judged if _in_scope(d.obj, policy, wanted, args.namespace, args.kinds)]
    # Owners first, so that pods fold into them without being judged.
    chosen.sort(key=lambda d: d.obj.get("kind") == "Pod")
    for doc in chosen:
        try:
            audit.add(doc.obj, source=doc.where)
        except ENGINE_ERRORS as exc:
            # As check and the server: the engine could not read it; one line, exit 2.
            shown = f"not usable: the webhook cannot evaluate it ({type(exc).__name__}: "
            tripped = ManifestError(doc.source, f"{shown}{str(exc)[:100]})", doc.line)
            (outcome,) = unreadable([tripped], paths=args.files, read=True)
            say(f"error: {for_terminal(outcome.where)}: {for_terminal(outcome.problem)}")
            audit.errors.append(f"{outcome.where}: {outcome.problem}")
            unusable.append(outcome)
    return _report(args, audit, policy, unusable=unusable, located={d.where: d for d in chosen})


def _in_scope(
    obj: Mapping[str, Any],
    policy: Policy,
    wanted: Callable[[WorkloadKind], bool],
    namespace: str | None,
    kinds: str | None,
) -> bool:
    """In the namespace asked for, and of a kind asked for: with no ``--kinds``, every
    object (check judges them all: one with no pod template passes, a claim is judged)."""
    kind = policy.kinds.lookup(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if kind is None and kinds:
        return False
    if kind is not None and not wanted(kind):
        return False
    if namespace is None:
        return True
    meta = obj.get("metadata")
    own = meta.get("namespace") if isinstance(meta, dict) else None
    return (own or "default") == namespace


def _cluster(
    args: argparse.Namespace, policy: Policy, wanted: Callable[[WorkloadKind], bool]
) -> int:
    try:
        endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
        cluster = ClusterObjects(endpoint, request_timeout_seconds=args.timeout)
    except KubeconfigError as exc:
        return _fail(f"no usable cluster configuration: {exc}")
    progress = ProgressLine(sys.stderr)
    with cluster:
        live = live_rules(COMMAND, args.rules, cluster.client)
        if isinstance(live, int):
            return live
        policy = live
        try:
            audit, missing, notices = audit_cluster(
                cluster,
                policy,
                namespace=args.namespace,
                wanted=wanted,
                progress=progress,
                claims=not args.kinds,  # as audit -f judges them
            )
        except ApiError as exc:
            return _fail(f"cannot read the cluster at {endpoint.host}: {exc}")
        finally:
            progress.done()
    if args.kinds:  # asked for by name: say why one is absent
        notices = [*notices, *missing]
    for notice in notices:
        say(f"notice: {notice}")
    unusable = [Outcome(file="", line=0, status="unusable", problem=e) for e in audit.errors]
    return _report(args, audit, policy, unusable=unusable)


def _report(
    args: argparse.Namespace,
    audit: Audit,
    policy: Policy,
    *,
    unusable: list[Outcome],
    located: Mapping[str, Document] | None = None,
) -> int:
    entries = audit.entries()
    summary = dataclasses.replace(audit.summary(), unusable=len(unusable))
    found = located or {}
    outcomes = [*(outcome_of(e, doc=found.get(e.source)) for e in entries), *unusable]
    warnings_fail = args.warn_exit_code is not None
    if args.output == "json":
        report: dict[str, Any] = {
            "summary": summary.to_json(),
            "results": [e.to_json() for e in entries],
        }
        if args.files:
            report["unusable"] = [
                {"source": o.where, "file": o.file, "line": o.line or None, "error": o.problem}
                for o in unusable
            ]
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.output == "policyreport":
        reports = policy_reports(entries, policy=policy, now=time.time(), errors=summary.errors)
        yaml.dump_all(reports, sys.stdout, Dumper=PlainDumper, sort_keys=False)
    elif args.output == "junit":
        sys.stdout.write(junit(outcomes, suite="gpu-webhook audit", warnings_fail=warnings_fail))
    elif args.output == "sarif":
        sys.stdout.write(sarif_text(outcomes, command="audit"))
    elif args.output == "github":
        sys.stdout.write(github(outcomes, warnings_fail=warnings_fail))
    else:
        sys.stdout.write(render_text(entries, summary, sources=bool(args.files)))
    if not args.files:
        for error in summary.errors:
            say(f"error: {error}")
    return exit_code(outcomes, warn_exit_code=args.warn_exit_code)


def outcome_of(entry: AuditEntry, *, doc: Document | None = None) -> Outcome:
    """An audited object for the CI formats: at its file and line when it came from a
    file (each finding at its field's line in ``doc``), else named by namespace, kind and
    name."""
    file, _, line = entry.source.rpartition(":")
    if not file or not line.isdigit():
        file, line = f"{entry.ref.namespace}/{entry.ref.kind}/{entry.ref.name}", "0"
    return Outcome(
        file=file,
        line=int(line),
        status="allowed" if entry.allowed else "denied",
        kind=entry.ref.kind,
        namespace=entry.ref.namespace,
        name=entry.ref.name,
        findings=entry.findings,
        warnings=entry.warnings,
        finding_lines=tuple(doc.line_of(f.path) for f in entry.findings) if doc else (),
    )


class PlainDumper(yaml.SafeDumper):
    """Writes shared values out in full: a report read by other tools has no YAML aliases."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002
        return True


class ProgressLine:
    """``listed 12,500 Pod`` on one line of a terminal, redrawn a few times a second; nothing
    when the output is a file or a pipe (CI logs stay clean)."""

    def __init__(self, stream: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._shown = 0.0
        self._active = stream.isatty()
        self._counts: dict[str, int] = {}

    def __call__(self, kind: str, count: int) -> None:
        self._counts[kind] = count
        now = self._clock()
        if not self._active or now - self._shown < PROGRESS_EVERY_SECONDS:
            return
        self._shown = now
        text = ", ".join(f"{n:,} {k}" for k, n in self._counts.items())
        self._stream.write(f"\raudit: listed {text}\x1b[K")
        self._stream.flush()

    def done(self) -> None:
        if self._active and self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
