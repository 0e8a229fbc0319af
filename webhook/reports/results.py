"""Results of ``check`` and ``audit`` in the formats CI systems read: JUnit XML, SARIF 2.1.0
(GitHub code scanning) and GitHub Actions workflow commands.

Both commands hand over the same records, one per object judged and one per file or object
that could not be judged, each with the file and line a reviewer should open.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import quote

from webhook import __version__
from webhook.engine.policy.decision import Finding
from webhook.reports.escape import for_github_data, for_github_property, for_xml

Status = Literal["allowed", "denied", "unusable"]
CI_FORMATS = ("junit", "sarif", "github")
UNUSABLE_RULE = "gpu-webhook/unusable"
INFORMATION_URI = "https://github.com/gpu-admission-webhook/gpu-admission-webhook"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# SARIF's levels for our actions: a denial is an error, a warning a warning, an audit a note.
_LEVELS = {"deny": "error", "warn": "warning", "audit": "note"}
_COMMANDS = {"deny": "error", "warn": "warning", "audit": "notice"}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One object judged, or one file or object that could not be (``problem`` says why)."""

    file: str
    line: int
    status: Status
    kind: str = ""
    namespace: str = ""
    name: str = ""
    findings: tuple[Finding, ...] = ()
    # Warnings that are not a finding's own (a finding's warning is the finding).
    warnings: tuple[str, ...] = ()
    problem: str = ""
    # Per finding, the line of the field it names (``Finding.path``); empty: ``line``.
    finding_lines: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def line_of(self, index: int) -> int:
        """Where finding ``index`` points: its field's line, else the document's."""
        if index < len(self.finding_lines) and self.line:
            return self.finding_lines[index]
        return self.line

    def where_of(self, index: int) -> str:
        line = self.line_of(index)
        return f"{self.file}:{line}" if line else self.file

    @property
    def label(self) -> str:
        if not self.kind:
            return self.where or "input"
        ident = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {ident or '(no name)'}"

    @property
    def warned(self) -> bool:
        return bool(self.warnings) or any(f.action == "warn" for f in self.findings)


def exit_code(outcomes: Iterable[Outcome], *, warn_exit_code: int | None) -> int:
    """2 when anything is unusable, 1 when anything is denied, ``warn_exit_code`` (when
    given) when something warns, else 0."""
    statuses = [(o.status, o.warned) for o in outcomes]
    if any(s == "unusable" for s, _ in statuses):
        return 2
    if any(s == "denied" for s, _ in statuses):
        return 1
    if warn_exit_code is not None and any(w for _, w in statuses):
        return warn_exit_code
    return 0


def junit(outcomes: Sequence[Outcome], *, suite: str, warnings_fail: bool) -> str:
    """A test case per object; a ``failure`` per denial (and per warning when warnings
    fail), an ``error`` for what could not be judged; other warnings as ``system-out``.
    Every name and message goes through ``for_xml``, each said on one line: one control
    character in a name would make the report unreadable, and CI would drop it whole."""
    # Only for --output junit: ElementTree and expat cost check of one pod a fiftieth of
    # its start (bench/startup.py).
    import xml.etree.ElementTree as ET

    failures = errors = 0
    root = ET.Element("testsuites", name=for_xml(suite, one_line=True))
    tests = ET.SubElement(root, "testsuite", name=for_xml(suite, one_line=True))
    for outcome in outcomes:
        case = ET.SubElement(
            tests,
            "testcase",
            name=for_xml(
                f"{outcome.label} ({outcome.where})" if outcome.kind else outcome.where,
                one_line=True,
            ),
            classname=for_xml(outcome.file, one_line=True),
            time="0",
        )
        if outcome.status == "unusable":
            errors += 1
            problem = ET.SubElement(
                case,
                "error",
                type=UNUSABLE_RULE,
                message=for_xml(outcome.problem, one_line=True),
            )
            problem.text = for_xml(f"{outcome.where}: {outcome.problem}", one_line=True)
            continue
        failed = False
        out: list[str] = []
        for index, finding in enumerate(outcome.findings):
            said = f"{outcome.where_of(index)}: {finding.action} {finding.id}: {finding.message}"
            if finding.action == "deny" or (finding.action == "warn" and warnings_fail):
                failed = True
                failure = ET.SubElement(
                    case,
                    "failure",
                    type=for_xml(finding.id, one_line=True),
                    message=for_xml(finding.message, one_line=True),
                )
                failure.text = for_xml(said, one_line=True)
            else:
                out.append(said)
        for warning in outcome.warnings:
            if warnings_fail:
                failed = True
                failure = ET.SubElement(
                    case, "failure", type="warning", message=for_xml(warning, one_line=True)
                )
                failure.text = for_xml(f"{outcome.where}: warning: {warning}", one_line=True)
            else:
                out.append(f"warning: {warning}")
        if out:
            lines = (for_xml(line, one_line=True) for line in out)
            ET.SubElement(case, "system-out").text = "\n".join(lines)
        failures += failed
    for element in (root, tests):
        element.set("tests", str(len(outcomes)))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    tests.set("skipped", "0")
    tests.set("time", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def sarif(outcomes: Sequence[Outcome], *, command: str) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: a rule per check that fired, a result per finding
    and per unusable file, each at its file and line, as GitHub code scanning reads them
    (``artifactLocation.uri`` relative to the repository root, ``region.startLine``)."""
    rules: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for outcome in outcomes:
        locations = _locations(outcome, outcome.line)
        if outcome.status == "unusable":
            rules.setdefault(UNUSABLE_RULE, _rule(UNUSABLE_RULE, "unusable input", ""))
            results.append(
                {
                    "ruleId": UNUSABLE_RULE,
                    "level": "error",
                    "message": {"text": f"{outcome.label}: {outcome.problem}"},
                    "locations": locations,
                }
            )
            continue
        for index, finding in enumerate(outcome.findings):
            rules.setdefault(finding.id, _rule(finding.id, finding.summary, finding.message))
            results.append(
                {
                    "ruleId": finding.id,
                    "level": _LEVELS.get(finding.action, "note"),
                    "message": {"text": f"{outcome.label}: {finding.message}"},
                    "locations": _locations(outcome, outcome.line_of(index)),
                    "properties": {"action": finding.action, "path": finding.path},
                }
            )
    ids = list(rules)
    for result in results:
        result["ruleIndex"] = ids.index(result["ruleId"])
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpu-webhook",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": list(rules.values()),
                    }
                },
                "automationDetails": {"id": f"gpu-webhook/{command}/"},
                "results": results,
            }
        ],
    }


def _rule(rule_id: str, summary: str, fix: str) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "id": rule_id,
        "name": rule_id.replace("/", "."),
        "shortDescription": {"text": summary or rule_id},
    }
    if fix:
        rule["help"] = {"text": fix}
    return rule


def _locations(outcome: Outcome, line: int) -> list[dict[str, Any]]:
    """Where to look; none for what no file holds (a kind the cluster would not list)."""
    if not outcome.file:
        return []
    physical: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(outcome.file)}}
    if line:
        physical["region"] = {"startLine": line}
    return [{"physicalLocation": physical}]


def artifact_uri(file: str) -> str:
    """A file as a relative URI where it can be (code scanning resolves it against the
    checkout); ``-`` (stdin) as ``stdin``."""
    if file == "-":
        return "stdin"
    path = Path(file)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_uri()
    # Percent-encoded as a URI reference (RFC 3986): a space, a control character or a
    # ``#`` in a file's name stays part of the path. A name that was not UTF-8 on disk
    # (decoded with surrogateescape) gets its own bytes back.
    relative = str(PurePosixPath(*path.parts))
    try:
        return quote(relative, safe="/", errors="surrogateescape")
    except UnicodeEncodeError:
        return quote(relative, safe="/", errors="backslashreplace")


def sarif_text(outcomes: Sequence[Outcome], *, command: str) -> str:
    return json.dumps(sarif(outcomes, command=command), indent=2) + "\n"


def github(outcomes: Sequence[Outcome], *, warnings_fail: bool) -> str:
    """GitHub Actions workflow commands: an annotation per finding and per unusable file,
    at its file and line, then a summary line.
    https://docs.github.com/actions/reference/workflow-commands-for-github-actions"""
    lines: list[str] = []
    for outcome in outcomes:
        if outcome.status == "unusable":
            lines.append(
                _annotation("error", outcome, UNUSABLE_RULE, outcome.problem, line=outcome.line)
            )
            continue
        for index, finding in enumerate(outcome.findings):
            level = _COMMANDS.get(finding.action, "notice")
            if level == "warning" and warnings_fail:
                level = "error"
            line = outcome.line_of(index)
            lines.append(_annotation(level, outcome, finding.id, finding.message, line=line))
        for warning in outcome.warnings:
            level = "error" if warnings_fail else "warning"
            lines.append(_annotation(level, outcome, "warning", warning, line=outcome.line))
    lines.append(summary_line(outcomes))
    return "\n".join(lines) + "\n"


def _annotation(level: str, outcome: Outcome, title: str, message: str, *, line: int) -> str:
    props = [f"file={for_github_property(outcome.file)}"] if outcome.file else []
    if outcome.file and line:
        props.append(f"line={line}")
    props.append(f"title={for_github_property(f'{title}: {outcome.label}')}")
    return f"::{level} {','.join(props)}::{for_github_data(message)}"


def summary_line(outcomes: Sequence[Outcome]) -> str:
    """``5 objects: 3 allowed, 1 denied, 1 unusable, 0 with warnings``, without colour."""
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("allowed", "denied")}
    unusable = sum(1 for o in outcomes if o.status == "unusable")
    warned = sum(1 for o in outcomes if o.status != "unusable" and o.warned)
    noun = "object" if len(outcomes) == 1 else "objects"
    return (
        f"{len(outcomes)} {noun}: {counts['allowed']} allowed, {counts['denied']} denied, "
        f"{unusable} unusable, {warned} with warnings"
    )
