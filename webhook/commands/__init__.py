"""One module per ``gpu-webhook`` command, found by ``webhook.cli`` at start-up.

``webhook.cli`` imports only the module of the command being run (importing them all was
most of every command's start-up), so this package's own imports stay light: what the
helpers below need from the engine and the files is imported when they are called.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.cluster.apiclient import ApiClient
    from webhook.engine.kube.strict import KubeSchema
    from webhook.engine.policy.ruleset import Policy
    from webhook.files.manifests import Document, ManifestError
    from webhook.reports.results import Outcome

USAGE_ERROR = 2
DEFAULT_RULES = "rules"
RULES_ENV = "GPU_WEBHOOK_RULES"
# Each command's line in ``gpu-webhook --help``, read there without importing the command.
SUMMARIES = {
    "audit": "judge the objects that already exist (a cluster, or files) by the current rules",
    "certs": "make, check and install TLS certificates",
    "check": "evaluate manifests offline, as the webhook would on create",
    "explain": "why a pod can or cannot run on this cluster's GPUs (a live pod, or a file)",
    "inventory": "print the GPU node classes the webhook sees, from a cluster or a file",
    "rules": "work with rule files",
    "serve": "serve /mutate and /validate over TLS (gunicorn)",
    "test": "run policy test suites: the result expected of each object, for CI",
}
# What check, audit -f and explain -f say of input without a single object, alike.
NO_OBJECTS = "no objects: the input is empty (or only comments)"
# The errors the server catches around the engine (webhook/admission/service.py review): an
# object the engine trips on is unusable, in one line, in every command.
ENGINE_ERRORS = (RecursionError, ValueError, TypeError, AttributeError, KeyError, IndexError)


def fail(command: str, message: str) -> int:
    """Report unusable input the same way for every command: one line, exit code 2."""
    say(f"gpu-webhook {command}: {message}")
    return USAGE_ERROR


def say(text: str) -> None:
    """A line (or the lines of a list of problems) on stderr, names in it escaped: CI
    logs read stderr for workflow commands as they read stdout (webhook.reports.escape)."""
    from webhook.reports.escape import for_terminal_lines

    print(for_terminal_lines(text), file=sys.stderr)


def rules_directory(given: str | None) -> tuple[str, str]:
    """The rule directory to read, and why that one, for a message when it is missing."""
    if given:
        return given, "--rules"
    if os.environ.get(RULES_ENV):
        return os.environ[RULES_ENV], f"${RULES_ENV}"
    return DEFAULT_RULES, "default"


def add_rules_option(parser: Any) -> None:
    parser.add_argument(
        "--rules",
        default=None,
        metavar="DIR",
        help=f"rule file directory (default: ${RULES_ENV}, else ./{DEFAULT_RULES}, else the "
        "shipped default rules)",
    )


def add_text_or_json_option(parser: Any) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=["text", "json"],
        default="text",
        help="text for people, json for tools (default: text)",
    )


def add_context_option(parser: Any) -> None:
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="kubeconfig context to use, as with kubectl (default: its current-context)",
    )


def add_ci_options(parser: Any) -> None:
    """``--warn-exit-code`` and ``--no-color``: what a pipeline needs beside a format."""
    parser.add_argument(
        "--warn-exit-code",
        type=int,
        metavar="N",
        help="exit N when nothing is denied or unusable but something warns, in every output "
        "format; warnings are then failures in -o junit and errors in -o github, and keep "
        "their level in -o sarif (default: warnings exit 0)",
    )
    add_no_color_option(parser)


def add_no_color_option(parser: Any) -> None:
    parser.add_argument(
        "--no-color",
        action="store_true",
        help="no colour even on a terminal, as NO_COLOR=1 does (default: colour on a terminal)",
    )


def add_timeout_option(parser: Any) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="read timeout for each API request (default: 30)",
    )


def rules_or_fail(command: str, given: str | None) -> Policy | int:
    """The policy of ``--rules`` (or its default), or the exit code after saying, in one
    line when the default directory is missing, why it is unusable."""
    from webhook.engine.policy.ruleset import PolicyError
    from webhook.files.rulefiles import load_policy

    found = _rules_location(command, given)
    if isinstance(found, int):
        return found
    directory, origin = found
    try:
        return load_policy(directory)
    except PolicyError as exc:
        return fail(command, f"the rules in {directory} ({origin}) are not usable:\n{exc}")


def _rules_location(command: str, given: str | None) -> tuple[str, str] | int:
    """The rule directory and where it came from: ``--rules``, the environment, ./rules,
    or the rules shipped with the command (said once) when none of those exists."""
    from webhook.files.rulefiles import shipped_rules

    directory, origin = rules_directory(given)
    if origin == "default" and not Path(directory).is_dir() and shipped_rules().is_dir():
        directory, origin = str(shipped_rules()), "shipped"
        say(
            f"gpu-webhook {command}: no ./{DEFAULT_RULES} in {Path.cwd()}: using the shipped "
            f"default rules ({directory}); pass --rules DIR or set {RULES_ENV} for your own"
        )
    if origin == "default" and not Path(directory).is_dir():
        return fail(
            command,
            f"no rules: looked for the default ./{DEFAULT_RULES} in {Path.cwd()}; pass "
            f"--rules DIR or set {RULES_ENV} (the repository's rules/ is the shipped policy)",
        )
    return directory, origin


def live_rules(command: str, given: str | None, client: ApiClient) -> Policy | int:
    """The policy of ``--rules`` merged with the rule objects the cluster serves (issue
    33), as the server merges them; an object that is not in force is a notice."""
    from webhook.cluster.apiclient import ApiError
    from webhook.cluster.sources.rulesource import list_rule_objects
    from webhook.engine.policy.ruleset import PolicyError
    from webhook.files.rulefiles import compile_rules, read_rule_files

    found = _rules_location(command, given)
    if isinstance(found, int):
        return found
    directory, origin = found
    try:
        objects = list_rule_objects(client)
    except ApiError as exc:
        return fail(command, f"cannot read the cluster's rule objects (gpu-webhook.io): {exc}")
    try:
        merged = compile_rules(read_rule_files(directory), directory=directory, objects=objects)
    except PolicyError as exc:
        return fail(command, f"the rules in {directory} ({origin}) are not usable:\n{exc}")
    for (kind, name), verdict in merged.verdicts.items():
        if not verdict.ready:
            say(f"notice: {kind} {name} (cluster object): {verdict.message}")
    return merged.policy


def unreadable(errors: list[ManifestError], *, paths: list[str], read: bool) -> list[Outcome]:
    """The files that gave no object to judge, as results of their own (``check`` and
    ``audit -f`` alike): each error at its line, or the whole input when it was empty."""
    from webhook.reports.results import Outcome

    unusable = [
        Outcome(file=e.source, line=e.line or 0, status="unusable", problem=e.message)
        for e in errors
    ]
    if not read and not errors:
        unusable.append(
            Outcome(file=", ".join(paths), line=0, status="unusable", problem=NO_OBJECTS)
        )
    return unusable


def add_kubernetes_version_option(parser: Any) -> None:
    parser.add_argument(
        "--kubernetes-version",
        default=None,
        metavar="X.Y",
        help="judge built-in kinds by this Kubernetes version's API, as kubectl apply's strict "
        "field validation does: unknown fields, wrong types, invalid resource names "
        "(default: the newest this gpu-webhook knows)",
    )


def kubernetes_schema(command: str, version: str | None) -> KubeSchema | int:
    """The schema ``--kubernetes-version`` names, or the exit code of a one-line error."""
    from webhook.files.shipped import UnknownVersion, kube_schema

    try:
        return kube_schema(version)
    except UnknownVersion as exc:
        return fail(command, str(exc))


def refusal(doc: Document, policy: Policy, schema: KubeSchema) -> Outcome | None:
    """The object as ``kubectl apply`` would refuse it, placed on the line of the first
    field at fault; ``None`` when it would be sent (``check``, ``audit -f``, ``explain -f``
    alike). Decodability first (what the policy reads), then strict field validation."""
    from webhook.engine.kube.shape import shape_problems
    from webhook.engine.kube.strict import strict_problems
    from webhook.files.manifests import located

    problems = shape_problems(doc.obj, policy.kinds)
    if problems:
        return refused_outcome(doc, problems)
    found, more = strict_problems(doc.obj, schema)
    if not found:
        return None
    doc = located(doc)
    lines = [doc.line_of(r.dotted) for r in found]
    words = [f"{r} (line {line})" for r, line in zip(found, lines, strict=True)]
    if more:
        words.append(f"and {more} more")
    said = f"Kubernetes {schema.version} refuses it as written (kubectl apply): " + "; ".join(words)
    return refused_outcome(doc, [said], line=lines[0])


def refused_outcome(doc: Document, problems: list[str], *, line: int = 0) -> Outcome:
    """An object ``kubectl`` would refuse: named, placed, and not judged (``check`` and
    ``audit -f`` alike)."""
    from webhook.reports.results import Outcome

    meta = doc.obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    kind = doc.obj.get("kind")
    own = meta.get("namespace")
    return Outcome(
        file=doc.source,
        line=line or doc.line,
        status="unusable",
        kind=kind if isinstance(kind, str) and kind else "object",
        namespace=own if isinstance(own, str) else "",
        name=str(meta.get("name") or meta.get("generateName") or ""),
        problem="; ".join(problems),
    )
