"""Policy tests (``gpu-webhook test``): a suite's expected result per object, and the one
comparison of an expectation with the decision ``check`` gives that object.

A suite is shaped as a ``kyverno test`` manifest (``policies``, ``resources``, ``results:
[{policy, rule, resources, result}]``), in this project's words: ``rules`` for policies,
``result: allowed | denied | warned`` for pass/fail/skip, ``rule`` for the finding id the
engine emits (``builtin/unknownResource``, ``<GPUPolicy name>/<check>``), and the mutated
object as an expected subset (``patch``) or a whole file (``patched``, Kyverno's
``patchedResource``). Each (result, resource) pair is one test case, as each ``case`` of a
``gator verify`` suite is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.engine.policy.decision import Decision
from webhook.engine.policy.schema import API_VERSION

SUITE_KIND = "GPUPolicyTest"
Result = Literal["allowed", "denied", "warned"]
RESULTS: tuple[Result, ...] = ("allowed", "denied", "warned")
# What a suite may hold: a suite is written by hand, and every object it names is judged.
MAX_RESULTS = 1000
MAX_PATHS = 100
_PATH = {"type": "string", "minLength": 1, "maxLength": 4096}
_PATHS = {"type": "array", "items": _PATH, "minItems": 1, "maxItems": MAX_PATHS}
_NAME = {"type": "string", "minLength": 1, "maxLength": 253}

_EXPECTED = {
    "type": "object",
    "additionalProperties": False,
    "required": ["resources", "result"],
    "properties": {
        "resources": {
            "type": "array",
            "items": _NAME,
            "minItems": 1,
            "maxItems": MAX_RESULTS,
            "description": "The objects this result is expected of, by name: NAME, KIND/NAME "
            "or NAMESPACE/KIND/NAME (kind as kubectl takes it, any case); each must name "
            "exactly one object of the suite's resources.",
        },
        "kind": {**_NAME, "description": "Only objects of this kind (default: any)."},
        "namespace": {
            **_NAME,
            "description": "Only objects in this namespace (default: any).",
        },
        "result": {
            "enum": list(RESULTS),
            "description": "allowed: admitted without a warning; warned: admitted with a "
            "warning; denied: refused.",
        },
        "rule": {
            "type": "string",
            "minLength": 3,
            "description": "The finding expected, as check names it (RULE/CHECK: "
            "builtin/unknownResource, or a GPUPolicy's name and its check): a denial "
            "when denied, a warning when warned.",
        },
        "message": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "description": "Text the finding's message (or, without rule, one of the "
            "object's denial or warning messages) contains.",
        },
        "patch": {
            "type": "object",
            "description": "Key fields of the mutated object: each map holds at least these "
            "keys with these values, each list exactly as many items, each matching.",
        },
        "patched": {
            **_PATH,
            "description": "A file holding the whole mutated object, as Kyverno's patchedResource.",
        },
    },
}


def suite_schema() -> dict[str, Any]:
    """The JSON Schema of a ``GPUPolicyTest`` document (``gpu-webhook rules schema
    --suite``)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpu-webhook.io/schemas/policytest.schema.json",
        "title": "gpu-admission-webhook policy test suite (gpu-webhook test)",
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "rules", "resources", "results"],
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": SUITE_KIND},
            "metadata": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": _NAME,
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "rules": {
                **_PATHS,
                "description": "Rule directories or files, merged as one rule set (relative "
                "to this file, as every path here).",
            },
            "ruleObjects": {
                **_PATHS,
                "description": "Files of rule objects as the API server serves them (kubectl "
                "get gpupolicies -o yaml): merged into the rules as the server merges them.",
            },
            "inventory": {
                **_PATH,
                "description": "The cluster: nodes, DRA objects, RuntimeClasses, node pools "
                "and ResourceQuotas, as check --inventory takes them (default: none, so no "
                "capacity checks).",
            },
            "namespace": {
                **_NAME,
                "description": "Namespace of objects that name none, as check -n (default: "
                "default).",
            },
            "namespaces": {
                "type": "array",
                "maxItems": MAX_RESULTS,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "labels"],
                    "properties": {
                        "name": _NAME,
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                },
                "description": "Namespaces' labels, for rules that match a namespaceSelector "
                "(as Kyverno's values namespaceSelector), as the server reads them from the "
                "cluster (default: none; a rule with a namespaceSelector then sees no labels, "
                "as check of files).",
            },
            "resources": {**_PATHS, "description": "Manifest files or directories to judge."},
            "results": {
                "type": "array",
                "items": _EXPECTED,
                "minItems": 1,
                "maxItems": MAX_RESULTS,
            },
        },
    }


def entry_problems(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What the schema cannot say of a schema-valid result: (field, what to do)."""
    problems = []
    for index, ref in enumerate(entry["resources"]):
        if not 1 <= len(ref.split("/")) <= 3 or "" in ref.split("/"):
            problems.append(
                (f"resources[{index}]", f'"{ref}": give NAME, KIND/NAME or NAMESPACE/KIND/NAME')
            )
    rule = entry.get("rule")
    if rule is not None and (len(rule.split("/")) != 2 or "" in rule.split("/")):
        problems.append(
            (
                "rule",
                f'"{rule}": give a finding id as check prints it, RULE/CHECK '
                "(builtin/unknownResource, or a GPUPolicy's name and its check)",
            )
        )
    if entry["result"] == "allowed":
        problems.extend(
            (
                field,
                "goes with denied or warned: an object allowed without a warning has no "
                "finding to name",
            )
            for field in ("rule", "message")
            if field in entry
        )
    return problems


@dataclass(frozen=True, slots=True)
class Expected:
    """One result of a suite, for one object."""

    result: Result
    rule: str = ""
    message: str = ""
    patch: Mapping[str, Any] | None = None
    # The whole mutated object (``patched``), read by the caller.
    patched: Mapping[str, Any] | None = None

    @property
    def said(self) -> str:
        """``denied by builtin/capacity``, as the table and JUnit name the case."""
        return f"{self.result} by {self.rule}" if self.rule else self.result


def actual_result(decision: Decision) -> Result:
    if not decision.allowed:
        return "denied"
    return "warned" if decision.warnings else "allowed"


def actual_said(decision: Decision) -> str:
    """The decision in the words of an expectation: ``denied by a/b, c/d``."""
    result = actual_result(decision)
    action = {"denied": "deny", "warned": "warn"}.get(result)
    ids = list(dict.fromkeys(f.id for f in decision.findings if f.action == action))
    return f"{result} by {', '.join(ids)}" if ids else result


def mismatches(expected: Expected, decision: Decision, original: Mapping[str, Any]) -> list[str]:
    """What differs between ``expected`` and the decision on ``original``: empty when the
    case passes. Each is one line, for the table and the JUnit failure."""
    result = actual_result(decision)
    if result != expected.result:
        return [f"expected {expected.said}, got {actual_said(decision)}"]
    found: list[str] = []
    action = {"denied": "deny", "warned": "warn"}.get(result)
    findings = [f for f in decision.findings if f.action == action]
    if expected.rule:
        findings = [f for f in findings if f.id == expected.rule]
        if not findings:
            found.append(f"expected {expected.said}, got {actual_said(decision)}")
    if expected.message:
        messages = [f.message for f in findings]
        if not expected.rule and result == "warned":
            messages.extend(decision.warnings)
        if not any(expected.message in m for m in messages):
            found.append(f'no {action} message contains "{expected.message}"')
    mutated = decision.mutated if decision.mutated is not None else original
    if expected.patch is not None:
        found.extend(f"patch: {d}" for d in differences(expected.patch, mutated, at=""))
    if expected.patched is not None:
        found.extend(
            f"patched: {d}" for d in differences(expected.patched, mutated, at="", whole=True)
        )
    return found


def differences(
    want: object, have: object, *, at: str, whole: bool = False, limit: int = 5
) -> list[str]:
    """Where ``have`` is not ``want``: a map needs ``want``'s keys (all of them and no
    more when ``whole``), a list as many items, each matching in order; anything else
    equal. The first ``limit``, each with its field path."""
    found: list[str] = []
    _compare(want, have, at=at, whole=whole, found=found, limit=limit)
    return found[:limit]


def _compare(
    want: object, have: object, *, at: str, whole: bool, found: list[str], limit: int
) -> None:
    if len(found) >= limit:
        return
    where = at or "the object"
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            found.append(f"{where}: expected a map, got {_shown(have)}")
            return
        for key, value in want.items():
            path = f"{at}.{key}" if at else str(key)
            if key not in have:
                found.append(f"{path}: missing (expected {_shown(value)})")
            else:
                _compare(value, have[key], at=path, whole=whole, found=found, limit=limit)
        if whole:
            extra = [str(k) for k in have if k not in want]
            if extra:
                found.append(f"{where}: unexpected {', '.join(extra[:5])}")
        return
    if isinstance(want, Sequence) and not isinstance(want, str):
        if not isinstance(have, Sequence) or isinstance(have, str):
            found.append(f"{where}: expected a list, got {_shown(have)}")
            return
        if len(want) != len(have):
            found.append(f"{where}: expected {len(want)} items, got {len(have)}")
            return
        for index, (item, got) in enumerate(zip(want, have, strict=True)):
            _compare(item, got, at=f"{at}[{index}]", whole=whole, found=found, limit=limit)
        return
    if want != have or type(want) is not type(have):
        found.append(f"{where}: expected {_shown(want)}, got {_shown(have)}")


def _shown(value: object) -> str:
    """A value as YAML shows it, short: a map or list by its size, a scalar as JSON."""
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return f"a list of {len(value)}"
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:79] + "…"


def identity(obj: Mapping[str, Any], *, default_namespace: str) -> tuple[str, str, str]:
    """(kind, namespace, name) of an object as check names it: its own namespace, else the
    one it is judged in (``-n``, a suite's ``namespace``), as kubectl does."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    own = meta.get("namespace")
    name = meta.get("name") or meta.get("generateName") or ""
    namespace = own if isinstance(own, str) and own else default_namespace
    return str(obj.get("kind") or ""), namespace, str(name)


def matching(
    ref: str, identities: Sequence[tuple[str, str, str]], *, kind: str = "", namespace: str = ""
) -> list[int]:
    """The indexes of the objects ``ref`` names: ``NAME``, ``KIND/NAME`` or
    ``NAMESPACE/KIND/NAME`` (kinds in any case, as kubectl takes ``pod/train``), within the
    result's own ``kind`` and ``namespace`` when it gives them."""
    parts = ref.split("/")
    name = parts[-1]
    wanted_kind = parts[-2] if len(parts) >= 2 else kind
    wanted_namespace = parts[-3] if len(parts) >= 3 else namespace
    return [
        index
        for index, (k, ns, n) in enumerate(identities)
        if n == name
        and (not wanted_kind or k.lower() == wanted_kind.lower())
        and (not kind or k.lower() == kind.lower())
        and (not wanted_namespace or ns == wanted_namespace)
        and (not namespace or ns == namespace)
    ]
