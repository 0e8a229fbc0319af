"""What a GPUNamespacePolicy may say: only more than the cluster's policies (issue 44).

A namespace's admins write one for their own namespace. It compiles into an ordinary rule
scoped to that namespace, so the evaluation knows nothing of it; the cluster's rules run
beside it and so always win where the two disagree. What could loosen the cluster's word is
refused when the policy is compiled, with one line saying why: ``exempt``, a match beyond
its namespace, tolerations, a runtime class, a check whose value is looser than the same
check of a cluster policy that reaches the namespace, or a weaker action. Mutations that
disagree with a cluster policy's are refused by the conflict check (``ruleset``), which
blames the namespace policy because its rules come after the cluster's.

Plain functions over compiled rules as they look from here (``ruleset`` imports this
module, so it names their shape rather than their class).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol


class RuleCheck(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> Any: ...
    @property
    def action(self) -> str: ...


class Match(Protocol):
    @property
    def namespaces(self) -> Callable[[str], bool] | None: ...
    @property
    def exclude_namespaces(self) -> Callable[[str], bool] | None: ...


class Rule(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def match(self) -> Match: ...
    @property
    def checks(self) -> Sequence[RuleCheck]: ...


# Each refusal: (field path, why). The same words as the CRD's CEL rules (``crds``).
FORBIDDEN_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("exempt",), "a GPUNamespacePolicy cannot exempt checks: ask for a GPUPolicyException"),
    (
        ("match", "namespaces"),
        "a GPUNamespacePolicy matches its own namespace only: remove it",
    ),
    (
        ("match", "excludeNamespaces"),
        "a GPUNamespacePolicy matches its own namespace only: remove it",
    ),
    (
        ("match", "namespaceSelector"),
        "a GPUNamespacePolicy matches its own namespace only: remove it",
    ),
    (
        ("mutate", "tolerations"),
        "a GPUNamespacePolicy cannot add tolerations: they open nodes the cluster keeps pods off",
    ),
    (
        ("mutate", "runtimeClassName"),
        "a GPUNamespacePolicy cannot set the runtime class: the cluster's GPUPolicy does",
    ),
)
_STRENGTH = {"audit": 0, "warn": 1, "deny": 2}
_LOWER = ("maxGPUsPerPod", "maxGPUsPerContainer", "maxGPUsPerWorkload", "maxSharedGPUs")
_SUBSET = ("allowedGPUCounts", "allowedProducts", "allowedPriorityClasses")
_SUPERSET = ("requiredLabels", "forbiddenResources", "requireProbes")


def forbidden_fields(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fields a namespace policy may not have, each with why."""
    found = []
    for path, why in FORBIDDEN_FIELDS:
        node: Any = spec
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            found.append(("spec." + ".".join(path), why))
    return found


def reaches(rule: Rule, namespace: str) -> bool:
    """Whether a cluster rule may apply to pods of ``namespace`` (its label selectors may
    too: they are not known here, so they count)."""
    match = rule.match
    if match.namespaces is not None and not match.namespaces(namespace):
        return False
    return match.exclude_namespaces is None or not match.exclude_namespaces(namespace)


def looser(rule: Rule, namespace: str, cluster: Sequence[Rule]) -> list[tuple[int, str, str]]:
    """Each check of a namespace rule that says less than the same check of a cluster rule
    reaching its namespace: (check index, field, why)."""
    found: list[tuple[int, str, str]] = []
    theirs = [(r, c) for r in cluster if reaches(r, namespace) for c in r.checks]
    for index, mine in enumerate(rule.checks):
        for other, check in theirs:
            if check.kind != mine.kind:
                continue
            why = _looser_value(mine, check)
            named = f"{check.kind} of GPUPolicy {other.name}"
            if why:
                found.append((index, mine.kind, f"{why} than {named}: {_ONLY}"))
            elif _STRENGTH[mine.action] < _STRENGTH[check.action]:
                found.append(
                    (
                        index,
                        "action",
                        f"{mine.action} is weaker than {check.action}, the action of {named}: "
                        f"{_ONLY}",
                    )
                )
    return found


_ONLY = "a namespace policy can only add restrictions"


def _looser_value(mine: RuleCheck, theirs: RuleCheck) -> str:
    ours, other = mine.value, theirs.value
    if mine.kind in _LOWER and ours > other:
        return f"{ours} is more"
    if mine.kind == "minGPUMemory" and ours < other:
        return f"{ours} bytes is less"
    if mine.kind == "wholeGPUsOnly" and other and not ours:
        return "false is less"
    if mine.kind in _SUBSET and not _within(ours, other):
        return f"{_listed(ours)} allows more"
    if mine.kind in _SUPERSET and not set(other) <= set(ours):
        return f"{_listed(ours)} asks less"
    return ""


def _within(ours: Iterable[Any], theirs: Iterable[Any]) -> bool:
    """Every value (or glob) of ours is one of theirs, or matched by one of their globs."""
    allowed = [str(t) for t in theirs]
    return all(any(fnmatch.fnmatchcase(str(v), t) for t in allowed) for v in ours)


def _listed(values: Iterable[Any]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"
