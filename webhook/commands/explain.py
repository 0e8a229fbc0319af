"""``gpu-webhook explain``: why a pod can or cannot run on this cluster's GPUs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from webhook.cluster.apiclient import ApiError, KubeconfigError, api_endpoint_from_kubeconfig
from webhook.cluster.clusterobjects import ClusterObjects, event_time
from webhook.commands import (
    ENGINE_ERRORS,
    NO_OBJECTS,
    SUMMARIES,
    add_context_option,
    add_kubernetes_version_option,
    add_rules_option,
    add_text_or_json_option,
    add_timeout_option,
    fail,
    kubernetes_schema,
    live_rules,
    refusal,
    rules_or_fail,
    say,
)
from webhook.engine.policy.ruleset import Policy
from webhook.files.context import files_view
from webhook.files.inventoryfile import InventoryFileError
from webhook.files.manifests import ManifestError, load_manifests
from webhook.reports.escape import for_terminal
from webhook.reports.explain import Explanation, SchedulerEvent, explain, render_text

COMMAND = "explain"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "explain",
        help=SUMMARIES["explain"],
        description="Per GPU node class: fits, or the first reason it does not, in "
        "kube-scheduler's words; what the webhook would change and whether it would deny; "
        "for a live pod, the scheduler's last FailedScheduling message. "
        "'explain pod NAME -n NS' reads the pod and the nodes from the cluster "
        "(--kubeconfig, the pod's service account, or the default kubeconfig); "
        "'explain -f FILE --inventory FILE' works offline. Exit 0: allowed and some node "
        "class fits; 1: denied, or no node class fits; 2: unusable input.",
    )
    parser.add_argument(
        "target",
        nargs="*",
        metavar="pod NAME",
        help="a live pod: the word 'pod' (or 'pods', 'po') and its name, or pod/NAME "
        "(default: none; give it or -f)",
    )
    parser.add_argument(
        "--namespace",
        "-n",
        default="default",
        metavar="NS",
        help="the pod's namespace (default: %(default)s)",
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        metavar="FILE|-",
        help="explain the objects in this file (or - for stdin) instead of a live pod "
        "(default: none)",
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        help="with -f: nodes, as 'kubectl get nodes -o yaml' prints them (default: none)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the pod's cluster (default: in a pod its service account, else "
        "$KUBECONFIG or ~/.kube/config)",
    )
    add_rules_option(parser)
    add_text_or_json_option(parser)
    add_context_option(parser)
    add_timeout_option(parser)
    add_kubernetes_version_option(parser)
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    return fail("explain", message)


def pod_name(target: list[str]) -> str | None:
    """``pod NAME``, ``pods NAME``, ``po NAME`` or ``pod/NAME`` (as kubectl takes them)."""
    if len(target) == 1 and "/" in target[0]:
        kind, _, name = target[0].partition("/")
        target = [kind, name]
    if len(target) == 2 and target[0].lower() in ("pod", "pods", "po") and target[1]:
        return target[1]
    return None


def run(args: argparse.Namespace) -> int:
    policy = rules_or_fail(COMMAND, args.rules)
    if isinstance(policy, int):
        return policy
    if args.files:
        if args.target or args.kubeconfig:
            return _fail("give either -f FILE --inventory FILE, or pod NAME, not both")
        return _offline(args, policy)
    name = pod_name(args.target)
    if name is None:
        return _fail("say what to explain: 'pod NAME' (a live pod) or -f FILE --inventory FILE")
    if args.inventory:
        return _fail("--inventory goes with -f; a live pod is explained with the cluster's nodes")
    return _live(args, policy, name)


def _offline(args: argparse.Namespace, policy: Policy) -> int:
    if not args.inventory:
        return _fail("-f needs --inventory FILE: the nodes to explain the pod against")
    schema = kubernetes_schema(COMMAND, args.kubernetes_version)
    if isinstance(schema, int):
        return schema
    documents, errors = load_manifests(args.files)
    try:
        # Nodes, DRA objects, RuntimeClasses, pools and quotas, as the server would read
        # them, and the files' own claims, templates and classes, as check reads them.
        view = files_view(args.inventory, [d.obj for d in documents])
    except InventoryFileError as exc:
        return _fail(f"the inventory is not usable: {exc}")
    inventory = view.snapshot
    assert inventory is not None  # a file without nodes is refused
    for error in errors:
        say(f"error: {for_terminal(str(error))}")
    explanations = []
    for doc in documents:
        # As check: an object kubectl would refuse is unusable, not explained.
        refused = refusal(doc, policy, schema)
        if refused is not None:
            say(f"error: {for_terminal(refused.where)}: {for_terminal(refused.problem)}")
            errors.append(ManifestError(doc.source, refused.problem, refused.line))
            continue
        try:
            explanations.append(
                explain(doc.obj, policy=policy, inventory=view, nodes=inventory.nodes)
            )
        except ENGINE_ERRORS as exc:
            # As check and the server: the engine could not read it; one line, exit 2.
            shown = f"{type(exc).__name__}: {str(exc)[:100]}"
            where, what = for_terminal(doc.where), for_terminal(shown)
            say(f"error: {where}: not usable: the webhook cannot evaluate it ({what})")
            errors.append(ManifestError(doc.source, shown, doc.line))
    if not explanations and not errors:
        return _fail(f"{', '.join(args.files)}: {NO_OBJECTS}")
    _print(args.output, explanations)
    if errors:
        return 2
    return _code(explanations)


def _live(args: argparse.Namespace, policy: Policy, name: str) -> int:
    try:
        cluster = ClusterObjects(
            api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context),
            request_timeout_seconds=args.timeout,
        )
    except KubeconfigError as exc:
        return _fail(f"no usable cluster configuration: {exc}")
    with cluster:
        live = live_rules(COMMAND, args.rules, cluster.client)
        if isinstance(live, int):
            return live
        policy = live
        try:
            pod = cluster.pod(args.namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return _fail(f'pod "{name}" not found in namespace "{args.namespace}"')
            return _fail(f"cannot read pod {args.namespace}/{name}: {exc}")
        try:
            notices: list[str] = []
            view = cluster.view(notices)
            inventory = view.snapshot
            labels = _namespace_labels(cluster, args.namespace) if policy.rules else None
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            events = cluster.scheduling_events(args.namespace, name, uid)
        except ApiError as exc:
            return _fail(f"cannot read the cluster: {exc}")
    for notice in notices:
        say(f"notice: {notice}")
    status = pod.get("status")
    phase = str(status.get("phase") or "") if isinstance(status, Mapping) else ""
    spec = pod.get("spec")
    bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
    explanation = explain(
        _as_created(pod),
        policy=policy,
        inventory=view,
        nodes=inventory.nodes if inventory is not None else (),
        namespace_labels=labels,
        phase=phase,
        event=_last(events),
        bound_to=bound if isinstance(bound, str) else "",
        status=status if isinstance(status, Mapping) else None,
    )
    _print(args.output, [explanation])
    return _code([explanation])


def _as_created(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as a CREATE would carry it: no status, and not bound to a node yet (a
    scheduled pod's ``nodeName`` would make every other node "not the requested one")."""
    spec = pod.get("spec")
    spec = {k: v for k, v in spec.items() if k != "nodeName"} if isinstance(spec, Mapping) else {}
    return {**{k: v for k, v in pod.items() if k != "status"}, "spec": spec}


def _namespace_labels(cluster: ClusterObjects, namespace: str) -> Mapping[str, str] | None:
    try:
        body = cluster.client.get(f"/api/v1/namespaces/{quote(namespace, safe='')}")
    except ApiError as exc:
        if exc.code in (403, 404):
            return None  # rules that match on namespace labels then do not apply
        raise
    labels = (body.get("metadata") or {}).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _last(events: list[Mapping[str, Any]]) -> SchedulerEvent | None:
    if not events:
        return None
    event = events[-1]
    series = event.get("series")
    count = event.get("count") or (series.get("count") if isinstance(series, Mapping) else 1)
    return SchedulerEvent(
        message=str(event.get("message") or "").strip(),
        time=event_time(event),
        count=int(count) if isinstance(count, int) else 1,
    )


def _print(output: str, explanations: list[Explanation]) -> None:
    if output == "json":
        json.dump([e.to_json() for e in explanations], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    sys.stdout.write("\n".join(render_text(e) for e in explanations))


def _code(explanations: list[Explanation]) -> int:
    for e in explanations:
        if not e.allowed:
            return 1
        for template in e.templates:
            if template.demand and not any(c.fits for c in template.classes):
                return 1
    return 0
