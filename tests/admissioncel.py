"""Admission policies evaluated as the API server evaluates them, with cel-python.

The validating side is the harness of tests/deploy/test_admission_policies.py (variables in
order, then each validation, its ``messageExpression`` where it fails) with what the
generated policies read beyond it: ``namespaceObject``, Kubernetes' ``sum()`` and
``indexOf()`` on lists (``k8s.io/apiserver/pkg/cel/library/lists.go``) and ``join()``
(cel-go's strings extension, which the API server's environment loads), and, for a
MutatingAdmissionPolicy, the ``JSONPatch`` and ``Object.spec.tolerations`` types its
JSONPatch mutations build, applied one mutation after the other to the object as it goes
(the dispatcher of ``k8s.io/apiserver/pkg/admission/plugin/policy/mutating``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from typing import Any

import celpy
import jsonpatch
from celpy import celtypes

from tests.deploy.test_admission_policies import FUNCTIONS


class JSONPatch(celtypes.MessageType):
    """``JSONPatch{op, path, value}``."""


class Typed(celtypes.MessageType):
    """``Object.spec.tolerations{...}``: a map of its fields once written as JSON."""


def _sum(items: Any) -> Any:
    return celtypes.IntType(sum(int(i) for i in items))


# The list elements ``indexOf`` has compared so far: work one node of the expression hides,
# which the tests' cost estimate counts (cel-go charges it by the list's size too).
SCANNED = [0]


def _index_of(items: Any, wanted: Any) -> Any:
    for i, item in enumerate(items):
        if item == wanted:
            SCANNED[0] += i + 1
            return celtypes.IntType(i)
    SCANNED[0] += len(items)
    return celtypes.IntType(-1)


def _join(items: Any, separator: Any) -> Any:
    return celtypes.StringType(str(separator).join(str(i) for i in items))


@cache
def program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(
        env.compile(expression),
        functions={**FUNCTIONS, "sum": _sum, "join": _join, "indexOf": _index_of},
    )


def _as_json(value: Any) -> Any:
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    return value


def decoded(value: Any) -> Any:
    """The object as the API server hands it to CEL: decoded into its type, where a null
    field is an absent one."""
    if isinstance(value, dict):
        return {k: decoded(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [decoded(v) for v in value]
    return value


def _activation(
    obj: Mapping[str, Any], namespace: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    ns = {
        "metadata": {
            "name": namespace,
            "labels": {"kubernetes.io/metadata.name": namespace, **labels},
        }
    }
    return {
        "object": celpy.json_to_cel(decoded(obj)),
        "oldObject": celpy.json_to_cel(None),
        "request": celpy.json_to_cel({"operation": "CREATE", "namespace": namespace}),
        "namespaceObject": celpy.json_to_cel(ns),
        "JSONPatch": JSONPatch,
        "Object": celtypes.MapType(
            {
                celtypes.StringType("spec"): celtypes.MapType(
                    {celtypes.StringType("tolerations"): Typed}
                )
            }
        ),
    }


def _with_variables(policy: Mapping[str, Any], activation: dict[str, Any]) -> dict[str, Any]:
    variables: dict[Any, Any] = {}
    for variable in policy["spec"].get("variables") or []:
        activation["variables"] = celtypes.MapType(variables)
        value = program(variable["expression"]).evaluate(activation)
        if isinstance(value, celpy.CELEvalError):
            raise value
        variables[celtypes.StringType(variable["name"])] = value
    activation["variables"] = celtypes.MapType(variables)
    return activation


def selects(
    binding: Mapping[str, Any], namespace: str, labels: Mapping[str, str] | None = None
) -> bool:
    """Whether the binding's ``namespaceSelector`` takes ``namespace``, as the API server
    matches it: on the namespace's labels, ``kubernetes.io/metadata.name`` among them."""
    labels = {**(labels or {}), "kubernetes.io/metadata.name": namespace}
    selector = binding["spec"].get("matchResources", {}).get("namespaceSelector") or {}
    for term in selector.get("matchExpressions") or []:
        value, values = labels.get(term["key"]), term.get("values") or []
        held = {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[term["operator"]]
        if not held:
            return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def refusals(
    policy: Mapping[str, Any],
    obj: Mapping[str, Any],
    *,
    namespace: str,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """The messages of the validations that fail (none: admitted). An evaluation error
    raises: with ``failurePolicy: Ignore`` it would be a bypass, which no test may hide."""
    activation = _with_variables(policy, _activation(obj, namespace, labels or {}))
    failed = []
    for validation in policy["spec"]["validations"]:
        verdict = program(validation["expression"]).evaluate(activation)
        if isinstance(verdict, celpy.CELEvalError):
            raise verdict
        if not verdict:
            if "messageExpression" in validation:
                failed.append(str(program(validation["messageExpression"]).evaluate(activation)))
            else:
                failed.append(validation["message"])
    return failed


def mutated(
    policy: Mapping[str, Any],
    obj: Mapping[str, Any],
    *,
    namespace: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The object after every JSONPatch mutation of the policy, in order."""
    current = copy.deepcopy(dict(obj))
    for mutation in policy["spec"]["mutations"]:
        assert mutation["patchType"] == "JSONPatch"
        activation = _with_variables(policy, _activation(current, namespace, labels or {}))
        patches = program(mutation["jsonPatch"]["expression"]).evaluate(activation)
        if isinstance(patches, celpy.CELEvalError):
            raise patches
        current = jsonpatch.apply_patch(current, [_as_json(p) for p in patches])
    return current
