"""What ``gpu-webhook test`` says of each test case: a table for people (as ``kyverno
test`` prints one), JSON for tools, and JUnit XML through the writer ``check`` uses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.engine.policy.decision import Finding
from webhook.reports.colour import Paint
from webhook.reports.escape import for_terminal
from webhook.reports.results import Outcome, junit
from webhook.reports.wording import counted

Status = Literal["pass", "fail", "error"]
# A mismatch's failure type in JUnit (``gpu-webhook/test``), where check puts a finding's id.
MISMATCH = ("gpu-webhook", "test")


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One expectation of one object, or a suite (or object) that could not be judged."""

    suite: str
    source: str
    line: int
    # What the object is, as check names it: kind, namespace and name.
    kind: str = ""
    namespace: str = ""
    name: str = ""
    expected: str = ""
    actual: str = ""
    # Why the case failed (a mismatch each) or could not be judged; empty: it passed.
    problems: tuple[str, ...] = ()
    error: bool = False
    # The decision's findings, as check -o json gives them.
    findings: tuple[dict[str, Any], ...] = ()

    @property
    def status(self) -> Status:
        if self.error:
            return "error"
        return "fail" if self.problems else "pass"

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source

    @property
    def resource(self) -> str:
        if not self.kind and not self.name:
            return ""
        ident = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {ident}"


def exit_code(cases: Sequence[CaseResult]) -> int:
    """2 when a suite or object could not be judged, 1 on a mismatch, else 0."""
    if any(c.status == "error" for c in cases):
        return 2
    return 1 if any(c.status == "fail" for c in cases) else 0


def summary(cases: Sequence[CaseResult], paint: Paint) -> str:
    """``12 tests in 3 suites: 11 passed, 1 failed, 0 errors``."""
    passed, failed, errors = (sum(1 for c in cases if c.status == s) for s in _STATUSES)
    suites = len({(c.source, c.suite) for c in cases})
    return (
        f"{paint('bold', counted(len(cases), 'test'))} in {counted(suites, 'suite')}: "
        f"{paint('green', f'{passed} passed')}, "
        f"{paint('red' if failed else 'green', f'{failed} failed')}, "
        f"{paint('red' if errors else 'green', counted(errors, 'error'))}"
    )


_STATUSES = ("pass", "fail", "error")
_COLOURS = {"pass": "green", "fail": "red", "error": "red"}
_HEADINGS = ("#", "SUITE", "RESOURCE", "EXPECTED", "ACTUAL", "RESULT", "WHERE")


def table(cases: Sequence[CaseResult], paint: Paint) -> str:
    """A row per case, aligned; under each failure or error, why, indented. Names are
    escaped (``for_terminal``) before they are aligned and coloured."""
    rows = [
        tuple(
            map(
                for_terminal,
                (
                    str(index),
                    case.suite,
                    case.resource or "-",
                    case.expected or "-",
                    case.actual or "-",
                    case.status.upper(),
                    case.where,
                ),
            )
        )
        for index, case in enumerate(cases, 1)
    ]
    widths = [max(len(r[i]) for r in [_HEADINGS, *rows]) for i in range(len(_HEADINGS))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(_HEADINGS, widths, strict=True)).rstrip()]
    for case, row in zip(cases, rows, strict=True):
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        cells[5] = paint(_COLOURS[case.status], cells[5])
        lines.append("  ".join(cells).rstrip())
        lines.extend(f"    {for_terminal(problem)}" for problem in case.problems)
    lines.append(summary(cases, paint))
    return "\n".join(lines) + "\n"


def case_json(case: CaseResult) -> dict[str, Any]:
    return {
        "suite": case.suite,
        "file": case.source,
        "line": case.line or None,
        "kind": case.kind,
        "namespace": case.namespace,
        "name": case.name,
        "expected": case.expected,
        "actual": case.actual,
        "status": case.status,
        "problems": list(case.problems),
        "findings": list(case.findings),
    }


def junit_text(cases: Sequence[CaseResult]) -> str:
    """A test case per expectation, named by its object and what is expected of it; a
    ``failure`` per mismatch and an ``error`` for what could not be judged: check's JUnit
    writer, given a record per case."""
    return junit([_outcome(c) for c in cases], suite="gpu-webhook test", warnings_fail=False)


def _outcome(case: CaseResult) -> Outcome:
    named = f"{case.name}: expected {case.expected}" if case.expected else case.name
    if case.status == "error":
        return Outcome(
            file=case.source,
            line=case.line,
            status="unusable",
            kind=case.kind,
            namespace=case.namespace,
            name=named,
            problem="; ".join(case.problems),
        )
    failures = tuple(
        Finding(MISMATCH[0], MISMATCH[1], action="deny", message=p, summary=p)
        for p in case.problems
    )
    return Outcome(
        file=case.source,
        line=case.line,
        status="denied" if failures else "allowed",
        kind=case.kind or "suite",
        namespace=case.namespace,
        name=named or case.suite,
        findings=failures,
    )
