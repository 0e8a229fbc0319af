"""``gpu-webhook test PATH...``: run policy test suites (``kind: GPUPolicyTest``) in CI.

As ``kyverno test`` and ``gator verify`` do: each suite names rules, an inventory and
objects, and the result expected of each object; every object is judged by ``check``'s own
function (``webhook.commands.check.judge``), so a suite holds the very answer ``check``,
``audit``, ``explain`` and the server give.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.commands import SUMMARIES, add_no_color_option, fail, say
from webhook.reports.escape import for_terminal

if TYPE_CHECKING:
    from webhook.commands.check import Checked
    from webhook.engine.evaluation.request import InventoryView
    from webhook.engine.policy.policytest import Expected
    from webhook.engine.policy.ruleset import Policy
    from webhook.files.manifests import Document
    from webhook.files.policysuites import Suite
    from webhook.reports.policytests import CaseResult
    from webhook.reports.results import Outcome

COMMAND = "test"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        COMMAND,
        help=SUMMARIES[COMMAND],
        description="Find every GPUPolicyTest suite under each PATH (files that declare the "
        "kind; the manifests beside them are not suites), judge each suite's objects as "
        "check does with the suite's rules and inventory, and compare each with its "
        "expected result. The suite's schema: gpu-webhook rules schema --suite. Exit 0: "
        "every test passed; 1: a result differs from its expectation; 2: a suite or an "
        "object is not usable (the other suites still run).",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="suite files, or directories searched for them recursively (required)",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=["text", "json", "junit"],
        default="text",
        help="text: a table for people; json: a result per test; junit: JUnit XML for CI "
        "(default: text)",
    )
    parser.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the results as JUnit XML to FILE, beside the table (default: none)",
    )
    add_no_color_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from webhook.files.policysuites import find_suites
    from webhook.reports.policytests import CaseResult, exit_code

    suites, errors = find_suites(args.paths)
    if not suites and not errors:
        return fail(
            COMMAND,
            f"no GPUPolicyTest suite in {', '.join(args.paths)}: a suite is a YAML file with "
            "kind: GPUPolicyTest (gpu-webhook rules schema --suite prints its schema)",
        )
    cases = [
        CaseResult(suite="", source=e.source, line=e.line or 0, problems=(e.message,), error=True)
        for e in errors
    ]
    budget = _Budget()
    for suite in suites:
        cases.extend(_run_suite(suite, budget))
    _print(args, cases)
    return exit_code(cases)


class _Budget:
    """The objects left to judge and the cases left to compare in this run, over all
    suites (``MAX_OBJECTS``, ``MAX_CASES``)."""

    def __init__(self) -> None:
        from webhook.files.policysuites import MAX_CASES, MAX_OBJECTS

        self.left = MAX_OBJECTS
        self.cases = MAX_CASES


def _run_suite(suite: Suite, budget: _Budget) -> list[CaseResult]:
    """The cases of one suite, or the one error that makes it unusable."""
    from webhook.engine.policy.ruleset import PolicyError
    from webhook.files.context import files_view
    from webhook.files.inventoryfile import InventoryFileError
    from webhook.files.manifests import load_manifests
    from webhook.files.policysuites import MAX_OBJECTS, SuiteObjectsError, suite_rules

    try:
        merged = suite_rules(suite)
    except PolicyError as exc:
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        first = str(exc.problems[0]) if exc.problems else str(exc)
        return [
            _error(
                suite,
                "rules",
                f"the rules are not usable: {first}{more}; run gpu-webhook rules lint on them",
            )
        ]
    except SuiteObjectsError as exc:
        return [_error(suite, "ruleObjects", str(exc.errors[0]))]
    for (kind, name), verdict in merged.verdicts.items():
        if not verdict.ready:
            say(f"notice: {suite.source}: {kind} {name} (rule object): {verdict.message}")
    documents, unreadable = load_manifests(list(suite.resources))
    if unreadable:
        return [_error(suite, "resources", str(unreadable[0]))]
    budget.left -= len(documents)
    if budget.left < 0:
        return [
            _error(
                suite,
                "resources",
                f"more than {MAX_OBJECTS:,} objects in this run: split "
                "the suites over several runs",
            )
        ]
    try:
        inventory = files_view(suite.inventory, [d.obj for d in documents])
    except InventoryFileError as exc:
        return [_error(suite, "inventory", f"not usable: {exc}")]
    return _compare(suite, documents, merged.policy, inventory, budget)


def _compare(
    suite: Suite,
    documents: list[Document],
    policy: Policy,
    inventory: InventoryView,
    budget: _Budget,
) -> list[CaseResult]:
    """Each (result, resource) of the suite against check's answer for that object."""
    from webhook.commands.check import judge
    from webhook.engine.policy.policytest import identity, matching
    from webhook.files.policysuites import MAX_CASES

    answers: list[Checked | Outcome] = []
    for doc in documents:  # one at a time: each answer is its object's, whatever its line
        judged, unusable = judge(
            [doc],
            policy=policy,
            inventory=inventory,
            namespace=suite.namespace,
            labels=suite.labels,
        )
        answers.extend([*judged, *unusable])
    identities = [
        identity(d.obj, default_namespace=suite.namespace or "default") for d in documents
    ]
    cases = []
    for index, entry in enumerate(suite.results):
        expected = _expected(suite, entry)
        if isinstance(expected, str):
            cases.append(_error(suite, f"results[{index}].patched", expected))
            continue
        for position, ref in enumerate(entry["resources"]):
            field = f"results[{index}].resources[{position}]"
            budget.cases -= 1
            if budget.cases < 0:
                said = f"more than {MAX_CASES:,} tests in this run: split the suites over runs"
                return [*cases, _error(suite, field, said)]
            found = matching(
                ref, identities, kind=entry.get("kind", ""), namespace=entry.get("namespace", "")
            )
            if len(found) != 1:
                cases.append(_error(suite, field, _not_one(ref, found, identities)))
                continue
            cases.append(_case(suite, field, identities[found[0]], expected, answers[found[0]]))
    return cases


def _case(
    suite: Suite,
    field: str,
    ident: tuple[str, str, str],
    expected: Expected,
    answer: Checked | Outcome,
) -> CaseResult:
    from webhook.engine.policy.policytest import actual_said, mismatches
    from webhook.reports.findings import finding_json
    from webhook.reports.policytests import CaseResult
    from webhook.reports.results import Outcome

    kind, namespace, name = ident
    case = CaseResult(
        suite=suite.name,
        source=suite.source,
        line=suite.line_of(field),
        kind=kind,
        namespace=namespace,
        name=name,
        expected=expected.said,
    )
    if isinstance(answer, Outcome):  # kubectl would refuse it, or the engine cannot read it
        return replace(case, actual="unusable", problems=(answer.problem,), error=True)
    decision = answer.decision
    return replace(
        case,
        actual=actual_said(decision),
        problems=tuple(mismatches(expected, decision, answer.doc.obj)),
        findings=tuple(finding_json(f) for f in decision.findings),
    )


def _expected(suite: Suite, entry: Mapping[str, Any]) -> Expected | str:
    """The entry as an ``Expected``, its ``patched`` file read; or why that file is not
    usable."""
    from webhook.engine.policy.policytest import Expected
    from webhook.files.manifests import load_manifests

    patched = None
    if "patched" in entry:
        path = str(Path(suite.source).parent / entry["patched"])
        objects, errors = load_manifests([path])
        if errors:
            return str(errors[0])
        if len(objects) != 1:
            return f"{path} holds {len(objects)} objects: give the one mutated object"
        patched = objects[0].obj
    return Expected(
        result=entry["result"],
        rule=entry.get("rule", ""),
        message=entry.get("message", ""),
        patch=entry.get("patch"),
        patched=patched,
    )


def _not_one(ref: str, found: list[int], identities: list[tuple[str, str, str]]) -> str:
    if found:
        return (
            f'"{ref}" names {len(found)} objects: give KIND/NAME or NAMESPACE/KIND/NAME, or '
            "the result's kind or namespace"
        )
    shown = ", ".join(f"{k}/{n}" if not ns else f"{ns}/{k}/{n}" for k, ns, n in identities[:10])
    more = f" and {len(identities) - 10} more" if len(identities) > 10 else ""
    return f'no object "{ref}" in the suite\'s resources (they hold {shown or "none"}{more})'


def _error(suite: Suite, field: str, message: str) -> CaseResult:
    from webhook.reports.policytests import CaseResult

    return CaseResult(
        suite=suite.name,
        source=suite.source,
        line=suite.line_of(field),
        problems=(f"{field}: {message}",),
        error=True,
    )


def _print(args: argparse.Namespace, cases: list[CaseResult]) -> None:
    import json

    from webhook.reports.colour import Paint
    from webhook.reports.policytests import CaseResult, case_json, junit_text, table

    for case in cases if args.output != "text" else ():  # the table shows them
        if case.status == "error":
            say(f"error: {for_terminal(case.where)}: {for_terminal('; '.join(case.problems))}")
    if args.junit:
        try:
            Path(args.junit).write_text(junit_text(cases))
        except OSError as exc:
            say(f"error: --junit {args.junit}: cannot be written: {exc.strerror}")
            cases.append(
                CaseResult(
                    suite="",
                    source=args.junit,
                    line=0,
                    problems=(f"cannot be written: {exc.strerror}",),
                    error=True,
                )
            )
    if args.output == "json":
        json.dump([case_json(c) for c in cases], sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.output == "junit":
        sys.stdout.write(junit_text(cases))
    else:
        sys.stdout.write(table(cases, Paint.for_stream(sys.stdout, no_color=args.no_color)))
