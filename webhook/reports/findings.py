"""How a decision reads outside the engine, in the forms every command shares: a finding
(and a waived one) as JSON and a line, and a mutation as a diff.

Kept apart from ``audit`` and ``explain`` so that ``check`` of one file, which shows
both, imports neither report and the engine parts they alone need (bench/startup.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import yaml

from webhook.engine.policy.decision import Finding, Waiver


def finding_json(finding: Finding) -> dict[str, str]:
    """A finding as ``check -o json``, ``audit -o json`` and ``explain -o json`` show it."""
    return {
        "rule": finding.rule,
        "check": finding.check,
        "action": finding.action,
        "message": finding.message,
        "path": finding.path,
    }


def waiver_json(waiver: Waiver) -> dict[str, Any]:
    """Who waived what (issue 44): the exception, and the finding it waived."""
    return {"exception": waiver.exception, **finding_json(waiver.finding)}


def waiver_line(waiver: Waiver) -> str:
    finding = waiver.finding
    return f"{finding.id} ({finding.action}) by GPUPolicyException {waiver.exception}"


def object_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """A unified diff of two objects as YAML: how people read a patch."""
    old = yaml.safe_dump(dict(before), sort_keys=False).splitlines()
    new = yaml.safe_dump(dict(after), sort_keys=False).splitlines()
    return list(difflib.unified_diff(old, new, "original", "mutated", n=2, lineterm=""))
