"""``gpu-webhook rules lint [PATH]``, ``rules schema``, ``rules export [PATH]`` and
``rules admission-policies [PATH]``."""

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
    live_rules,
    rules_directory,
    say,
)
from webhook.engine.policy.crds import resource_of
from webhook.engine.policy.exemptions import exemption_warnings
from webhook.engine.policy.ruleset import PolicyError
from webhook.engine.policy.schema import DOCUMENT_KINDS, rules_schema
from webhook.engine.resources.inventory import Node
from webhook.engine.scheduling.schedulability import memory_warnings
from webhook.files.manifests import load_manifests
from webhook.files.rulefiles import (
    RULE_SUFFIXES,
    compile_rule_files,
    compile_rules,
    load_policy,
    read_documents,
    read_rule_files,
)
from webhook.files.ruleobjects import RuleObject
from webhook.reports.wording import counted

if TYPE_CHECKING:
    from webhook.engine.evaluation.request import InventoryView


def register(sub: Any) -> None:
    parser = sub.add_parser("rules", help=SUMMARIES["rules"])
    rules = parser.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    lint = rules.add_parser(
        "lint",
        help="report every problem in a rule directory or file",
        description="Validate every rule file in PATH against the schema and the semantic "
        "checks (conflicting rules, bad quantities); report all problems, and warn about "
        "rules that would leave pods unschedulable, rule values no node, pool or device of "
        "the cluster has (with --inventory or --kubeconfig), and exemptions by namespace name "
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
        help="nodes as 'kubectl get nodes -o yaml' prints them, to check memory limits and "
        "the rules' values (products, labels, GPU memory, ...) against (default: none, only "
        "the rules' declared node pools)",
    )
    lint.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="this cluster (read once): the rules' values checked against its live nodes, "
        "pools, DRA devices, RuntimeClasses and namespaces (with --inventory, its namespaces "
        "only), and exempted namespaces that do not exist warned of (default: not checked)",
    )
    add_context_option(lint)
    lint.set_defaults(handler=_lint)
    _register_match_conditions(rules)
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
    policies = rules.add_parser(
        "admission-policies",
        help="print the rules that need no cluster state as admission policies",
        description="Lint PATH, then print the ValidatingAdmissionPolicies and the "
        "MutatingAdmissionPolicies (each with its binding) that hold those of its rules that "
        "need no cluster state while the webhook is down: GPU access without a GPU request "
        "(env, hostPath, the device list), the rules' GPU tolerations, hiding GPUs from a "
        "GPU pod's other containers and per-pod GPU counts (docs/rules.md, 'Rules the API "
        "server holds'). What stays in the webhook "
        "is listed on stderr. Exit 0: printed; 1: problems found; 2: PATH unusable.",
    )
    policies.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help=f"rule directory or one rule file (default: ${RULES_ENV}, else ./{DEFAULT_RULES})",
    )
    policies.add_argument(
        "--objects",
        action="append",
        metavar="FILE",
        help="rule objects as the API server serves them (kubectl get gpupolicies,gpusettings "
        "-o yaml), merged into PATH's rules as the server merges the cluster's; one not in "
        "force is said on stderr (repeatable; default: none, the files only)",
    )
    policies.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="one YAML stream (default), or a JSON List",
    )
    policies.add_argument(
        "--output-dir",
        metavar="DIR",
        help="write one file per policy and its binding under DIR (core-NAME.yaml), the "
        "layout of deploy/base/admission-policies (default: stdout)",
    )
    policies.set_defaults(handler=_admission_policies)


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
    view, namespaces = _lint_view(args)
    if isinstance(view, int):
        return view
    snapshot = view.snapshot if view is not None else None
    nodes: tuple[Node, ...] = snapshot.nodes if snapshot is not None else ()
    try:
        policy = load_policy(path)
    except PolicyError as exc:
        for problem in exc.problems:
            say(str(problem))
        print(f"{counted(len(exc.problems), 'problem')} found", file=sys.stderr)
        return 1
    if namespaces is None and (args.kubeconfig or args.context):  # with --inventory
        found = _cluster_namespaces(args)
        if isinstance(found, int):
            return found
        namespaces = found
    warnings = memory_warnings(policy, nodes)
    if view is not None and snapshot is not None:  # no nodes: label_warnings finds nothing
        from webhook.engine.scheduling.policyvalues.labelkeys import label_warnings

        warnings += label_warnings(policy, snapshot, view.devices)
    warnings += exemption_warnings(policy, namespaces)
    notices: list[str] = []
    if view is not None and nodes:
        # The evaluation only with a cluster: lint of files alone starts in a CI loop.
        from webhook.engine.evaluation.evaluate import cluster_values_of
        from webhook.engine.scheduling.policyvalues.policyreach import not_checked, unmet_values

        values = cluster_values_of(policy, view, namespaces=namespaces)
        warnings += [unmet.problem for unmet in unmet_values(policy, values)]
        notices = not_checked(policy, values)
    for warning in warnings:
        say(f"warning: {warning}")
    for notice in notices:
        say(f"notice: {notice}")
    print(
        f"{path}: {counted(len(policy.rules), 'rule')}, "
        f"{counted(len(policy.node_pools), 'node pool')}, no problems"
        + (f", {counted(len(warnings), 'warning')}" if warnings else "")
    )
    return 0


def _lint_view(
    args: argparse.Namespace,
) -> tuple[InventoryView | int | None, set[str] | None]:
    """The cluster the rules are checked against: an inventory file, a live cluster (with
    its namespaces, which no file holds), or none; an exit code when it is unusable."""
    if args.inventory:
        # Only with an inventory: the inventory file's parser and the device model are a
        # third of what lint of rules alone would import (bench/startup.py).
        from webhook.files.inventoryfile import InventoryFileError, load_inventory_file

        try:
            return load_inventory_file(args.inventory).view(), None
        except InventoryFileError as exc:
            return _fail(f"the inventory is not usable: {exc}"), None
    if not (args.kubeconfig or args.context):
        return None, None  # lint of rules alone: nothing of the engine's inventory is imported
    # The cluster client only for a cluster: lint of files starts in a CI loop.
    from webhook.cluster.apiclient import ApiError, KubeconfigError, api_endpoint_from_kubeconfig
    from webhook.cluster.clusterobjects import ClusterObjects

    try:
        endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
        with ClusterObjects(endpoint) as cluster:
            notices: list[str] = []
            view = cluster.view(notices)
            namespaces = set(cluster.namespace_labels())
    except KubeconfigError as exc:
        return _fail(f"no usable cluster configuration: {exc}"), None
    except ApiError as exc:
        return _fail(f"cannot read the cluster's nodes and namespaces: {exc}"), None
    for notice in notices:
        say(f"notice: {notice}")
    return view, namespaces


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
            say(str(problem))
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


def _admission_policies(args: argparse.Namespace) -> int:
    from webhook.engine.policy.admissioncel.policies import admission_policies

    path, _ = rules_directory(args.path)
    if not Path(path).exists():
        return fail("rules admission-policies", f"{path}: no such directory or file")
    objects = _objects(args.objects or [])
    if isinstance(objects, str):
        return fail("rules admission-policies", objects)
    try:
        merged = compile_rules(read_rule_files(path), directory=path, objects=objects)
        policy = merged.policy
    except PolicyError as exc:
        for problem in exc.problems:
            say(str(problem))
        print(f"{counted(len(exc.problems), 'problem')} found; nothing printed", file=sys.stderr)
        return 1
    for key, verdict in merged.verdicts.items():
        if not verdict.ready:
            say(f"not in force: {'/'.join(key)}: {'; '.join(verdict.problems)}")
    generated = admission_policies(policy)
    for skipped in generated.skipped:
        say(f"skipped: {skipped}")
    if args.output_dir is not None:
        target = Path(args.output_dir)
        target.mkdir(parents=True, exist_ok=True)
        for stem, made in generated.files:
            (target / f"{stem}.yaml").write_text(policy_file(made))
        print(f"{counted(len(generated.files), 'policy file')} written under {target}")
    elif args.output == "json":
        listed = {"apiVersion": "v1", "kind": "List", "items": generated.objects}
        json.dump(listed, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        yaml.safe_dump_all(generated.objects, sys.stdout, sort_keys=False, width=100)
    return 0


def _objects(paths: list[str]) -> list[RuleObject] | str:
    """The rule objects of ``paths``, or the first reason they are not."""
    if not paths:
        return []
    documents, errors = load_manifests(paths)
    if errors:
        return str(errors[0])
    found = []
    for doc in documents:
        if doc.obj.get("kind") not in DOCUMENT_KINDS:
            return f"{doc.source}: {doc.obj.get('kind')!s} is not a rule object"
        found.append(RuleObject.of(doc.obj))
    return found


# What scripts/gen-admission-policies writes above each file of deploy/base/admission-policies.
GENERATED_HEADER = (
    "# Generated by scripts/gen-admission-policies (gpu-webhook rules admission-policies) from\n"
    "# rules/: do not edit. docs/rules.md, 'Rules the API server holds'.\n"
)


def policy_file(objects: Any) -> str:
    """One policy and its binding, as written under deploy/base/admission-policies."""
    return GENERATED_HEADER + yaml.safe_dump_all(list(objects), sort_keys=False, width=100)


def _schema(args: argparse.Namespace) -> int:
    from webhook.engine.policy.policytest import suite_schema

    json.dump(suite_schema() if args.suite else rules_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


# --- rules match-conditions (issue 43) ---------------------------------------------------

MATCH_CONDITIONS = "rules match-conditions"


def _register_match_conditions(rules: Any) -> None:
    parser = rules.add_parser(
        "match-conditions",
        help="print the webhooks' matchConditions derived from the rules",
        description="Derive from the rules (files, and with --kubeconfig the cluster's rule "
        "objects, merged as the server merges them) a CEL condition per webhook that is true "
        "for every request the webhook could deny, warn about or mutate, and print them as a "
        "strategic-merge patch of the two webhook configurations (kustomize), or with --patch "
        "FILE print FILE with the conditions set. Without --tainted-gpu-nodes every pod "
        "template is called (where a pod can land decides whether GPUs are hidden from it). "
        "Exit 0: printed; 2: rules, FILE or the cluster unusable.",
    )
    parser.add_argument("--rules", metavar="DIR", help="rule directory (default: as `check`)")
    parser.add_argument(
        "--tainted-gpu-nodes",
        action="store_true",
        help="every GPU node carries a NoSchedule or NoExecute taint outside "
        "node.kubernetes.io/: pods that tolerate none are then skipped unless they touch GPUs "
        "(default: not promised, every pod template is called)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=["yaml", "json"],
        default="yaml",
        help="how to print them (default: yaml)",
    )
    parser.add_argument(
        "--patch",
        metavar="FILE",
        help="a webhook configuration file (deploy/base/webhooks.yaml) to print with the "
        "conditions set on the webhooks they are for (default: none, a patch is printed)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="merge the cluster's rule objects (GPUPolicy, ...) with the files (default: "
        "the files alone)",
    )
    add_context_option(parser)
    parser.set_defaults(handler=_match_conditions)


def _match_conditions(args: argparse.Namespace) -> int:
    from webhook.engine.evaluation.matchconditions import match_conditions
    from webhook.engine.policy.ruleset import Policy, PolicyError
    from webhook.files.rulefiles import load_policy
    from webhook.reports.matchconditions import HEADER, documents, patched

    policy: Policy | int
    if args.kubeconfig or args.context:
        policy = _live(args)
    else:
        directory, _ = rules_directory(args.rules)
        if not Path(directory).exists():
            return fail(MATCH_CONDITIONS, f"{directory}: no such directory or file")
        try:
            policy = load_policy(directory)
        except PolicyError as exc:
            return fail(MATCH_CONDITIONS, f"the rules in {directory} are not usable:\n{exc}")
    if isinstance(policy, int):
        return policy
    found = match_conditions(policy, tainted_gpu_nodes=args.tainted_gpu_nodes)
    conditions = {name: [c.as_dict() for c in listed] for name, listed in found.items()}
    if args.patch:
        try:
            docs = list(yaml.safe_load_all(Path(args.patch).read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            return fail(MATCH_CONDITIONS, f"{args.patch}: not a readable YAML file ({exc})")
        out = patched(docs, conditions)
    else:
        out = documents(conditions)
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        flags = " --tainted-gpu-nodes" if args.tainted_gpu_nodes else ""
        sys.stdout.write(HEADER.format(flags=flags, rules=args.rules or "the rules"))
        yaml.safe_dump_all(out, sys.stdout, sort_keys=False, width=100)
    return 0


def _live(args: argparse.Namespace) -> Any:
    from webhook.cluster.apiclient import KubeconfigError, api_endpoint_from_kubeconfig
    from webhook.cluster.clusterobjects import ClusterObjects

    try:
        endpoint = api_endpoint_from_kubeconfig(args.kubeconfig, context=args.context)
    except KubeconfigError as exc:
        return fail(MATCH_CONDITIONS, f"no usable cluster configuration: {exc}")
    with ClusterObjects(endpoint) as cluster:
        return live_rules(MATCH_CONDITIONS, args.rules, cluster.client)
