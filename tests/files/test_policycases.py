"""Golden cases of policy objects (tests/policycases/<name>/rules/): what a
GPUNamespacePolicy or GPUPolicyException may say beside the cluster's policy.

Each case is read twice, and both must give the lines in its ``expected.yaml``:
- as rule files (``rules lint``, and the server's reload);
- as ``/validate`` judges an object at apply: the last document is the object applied, the
  others are in force (``ruleobjects.judge_object``).
An empty list: the documents are in force together. ``GOLDEN_UPDATE=1`` rewrites the files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engine.policy.ruleset import PolicyError, PolicyProblem
from webhook.files.rulefiles import compile_rules, read_rule_files, schema_problems
from webhook.files.ruleobjects import RuleObject, judge_object

CASES = Path(__file__).resolve().parents[1] / "policycases"
UPDATE = os.environ.get("GOLDEN_UPDATE") == "1"


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


# Where another document is named, its place: a file and document number, or "cluster object".
_PLACE = re.compile(r" \((?:[^()]*: doc \d+ )?\(([^()]*)\)\)| \(cluster object\)")


def _line(problem: PolicyProblem) -> str:
    ref = problem.document
    named = f"{ref.kind} {ref.name}: " if ref is not None else ""
    said = f"{problem.path}: {problem.message}" if problem.path else problem.message
    return named + _unplaced(said)


def _unplaced(line: str) -> str:
    return _PLACE.sub(lambda m: f" ({m[1]})" if m[1] else "", line)


def as_files(case: Path) -> list[str]:
    try:
        compile_rules(read_rule_files(str(case / "rules")), directory=str(case / "rules"))
    except PolicyError as exc:
        return [_line(p) for p in exc.problems]
    return []


def at_apply(case: Path) -> list[str]:
    """The last document applied as an object beside the others, also objects, in force:
    as /validate judges it."""
    *in_force, applied = [
        RuleObject.of(raw)
        for raw in yaml.safe_load_all((case / "rules" / "policies.yaml").read_text())
    ]
    said = judge_object([], in_force, applied, lint=schema_problems)
    return [f"{applied.kind} {applied.name}: {_unplaced(line)}" for line in said]


def expected(case: Path) -> list[str]:
    path = case / "expected.yaml"
    if UPDATE:
        path.write_text(yaml.safe_dump({"problems": as_files(case)}, sort_keys=False, width=100))
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return list(data["problems"] or [])


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_the_rule_files_give_the_expected_lines(case: Path) -> None:
    assert as_files(case) == expected(case)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_apply_refuses_the_object_with_the_same_lines(case: Path) -> None:
    assert at_apply(case) == expected(case)


def test_every_widening_is_refused_and_says_why_in_one_line() -> None:
    for case in case_dirs():
        if case.name.startswith(("widening-", "disagreeing-", "exception-d", "exception-n")):
            lines = expected(case)
            assert lines, case.name
            assert all("\n" not in line for line in lines)
