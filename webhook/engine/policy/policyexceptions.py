"""GPUPolicyException: named checks waived for named workloads of one namespace, until an
expiry (issue 44; after Kyverno's PolicyException, ``kyverno.io/v2``).

An exception applies only in a namespace that ``GPUSettings.exceptionNamespaces`` names
(none by default): anywhere else it is refused when compiled and never applies. Whether it
has expired is judged against the review's time, which the shell passes as plain data
(``Request.now``): the engine reads no clock. Every use is written in the decision
(``Decision.waivers``), for the audit annotation, the PolicyReports and the metric.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.kube.selectors import label_selector_matches
from webhook.engine.policy.decision import Finding, Waiver


@dataclass(frozen=True, slots=True)
class PolicyException:
    namespace: str
    name: str
    checks: tuple[str, ...]  # finding ids (rule/check), globs
    names: tuple[str, ...] = ()  # workload names, globs
    selector: Mapping[str, Any] | None = None
    expires: dt.datetime | None = None

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def expired(self, now: dt.datetime | None) -> bool:
        """Past its expiry; with no time known, an expiring exception counts as expired
        (it waives nothing rather than too much)."""
        return self.expires is not None and (now is None or now >= self.expires)

    def waives(self, finding: Finding) -> bool:
        return any(fnmatch.fnmatchcase(finding.id, c) for c in self.checks)

    def selects(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        if self.names:
            own = [str(meta.get(k) or "") for k in ("name", "generateName")]
            if not any(n and fnmatch.fnmatchcase(n, p) for n in own for p in self.names):
                return False
        if self.selector is not None:
            return any(label_selector_matches(self.selector, labels) for labels in _labels(obj))
        return True


def _labels(obj: Mapping[str, Any]) -> list[Mapping[str, str]]:
    """The object's labels, and its pod template's (a Deployment's pods carry those)."""
    found: list[Mapping[str, str]] = []
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("labels"), Mapping):
        found.append(meta["labels"])
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    tmeta = template.get("metadata") if isinstance(template, Mapping) else None
    if isinstance(tmeta, Mapping) and isinstance(tmeta.get("labels"), Mapping):
        found.append(tmeta["labels"])
    return found or [{}]


_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def parse_time(text: object) -> dt.datetime | None:
    """An RFC 3339 time (as Kubernetes writes them), or None."""
    if not isinstance(text, str) or not _TIME.match(text):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def compile_exception(
    namespace: str, name: str, spec: Mapping[str, Any]
) -> tuple[PolicyException, list[tuple[str, str]]]:
    """The exception and its problems, as (field path, why)."""
    problems: list[tuple[str, str]] = []
    expires = None
    if "expires" in spec:
        expires = parse_time(spec["expires"])
        if expires is None:
            problems.append(("spec.expires", f"{spec['expires']!r} is not an RFC 3339 time"))
    workloads = spec.get("workloads") or {}
    return (
        PolicyException(
            namespace=namespace,
            name=name,
            checks=tuple(str(c) for c in spec.get("checks") or ()),
            names=tuple(str(n) for n in workloads.get("names") or ()),
            selector=workloads.get("selector"),
            expires=expires,
        ),
        problems,
    )


def waive(
    findings: Sequence[Finding],
    exceptions: Sequence[PolicyException],
    *,
    namespace: str,
    obj: Mapping[str, Any],
    now: dt.datetime | None,
) -> tuple[list[Finding], list[Waiver]]:
    """The findings that stand, and those waived (by the first exception, by name, that
    waives each)."""
    usable = sorted(
        (
            e
            for e in exceptions
            if e.namespace == namespace and not e.expired(now) and e.selects(obj)
        ),
        key=lambda e: e.name,
    )
    if not usable:
        return list(findings), []
    kept: list[Finding] = []
    waived: list[Waiver] = []
    for finding in findings:
        by = next((e for e in usable if e.waives(finding)), None)
        if by is None:
            kept.append(finding)
        else:
            waived.append(Waiver(by.id, finding))
    return kept, waived
