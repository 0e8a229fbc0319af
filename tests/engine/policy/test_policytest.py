"""A policy test's expectation against check's decision: the result, the finding it names,
its message, and the mutated object as a subset or whole."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.policy.decision import Decision, Finding, decide
from webhook.engine.policy.policytest import (
    Expected,
    actual_said,
    differences,
    entry_problems,
    identity,
    matching,
    mismatches,
)

POD: dict[str, Any] = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
TOLERATED = {**POD, "spec": {"containers": [], "tolerations": [{"key": "k", "operator": "Exists"}]}}


def finding(rule: str, check: str, action: str, message: str = "m") -> Finding:
    return Finding(rule, check, action, message, "s")  # type: ignore[arg-type]


DENIED = decide(
    [finding("builtin", "capacity", "deny", "has 8 allocatable")], patch=(), mutated=None
)
WARNED = decide([finding("builtin", "unknownResource", "warn")], patch=(), mutated=None)
DENIED_AND_WARNED = decide(
    [finding("builtin", "capacity", "deny"), finding("builtin", "clusterCapacity", "warn")],
    patch=(),
    mutated=None,
)
MUTATED = decide([], patch=[{"op": "add"}], mutated=TOLERATED)
ALLOWED = Decision(allowed=True)


@pytest.mark.parametrize(
    ("expected", "decision", "problems"),
    [
        pytest.param(Expected("allowed"), ALLOWED, [], id="allowed as expected"),
        pytest.param(
            Expected("allowed"),
            WARNED,
            ["expected allowed, got warned by builtin/unknownResource"],
            id="a warning is not allowed without one",
        ),
        pytest.param(Expected("denied", rule="builtin/capacity"), DENIED, [], id="denied by it"),
        pytest.param(
            Expected("denied", rule="builtin/privileged"),
            DENIED,
            ["expected denied by builtin/privileged, got denied by builtin/capacity"],
            id="denied by another rule",
        ),
        pytest.param(
            Expected("denied", rule="builtin/clusterCapacity"),
            DENIED_AND_WARNED,
            ["expected denied by builtin/clusterCapacity, got denied by builtin/capacity"],
            id="the rule of a denial names a denial, not a warning beside it",
        ),
        pytest.param(
            Expected("warned", rule="builtin/unknownResource"), WARNED, [], id="warned by it"
        ),
        pytest.param(
            Expected("denied", message="8 allocatable"), DENIED, [], id="a part of the message"
        ),
        pytest.param(
            Expected("denied", rule="builtin/capacity", message="16"),
            DENIED,
            ['no deny message contains "16"'],
            id="a message it does not say",
        ),
        pytest.param(
            Expected("denied"),
            ALLOWED,
            ["expected denied, got allowed"],
            id="allowed where a denial was expected",
        ),
    ],
)
def test_an_expectation_holds_or_says_what_differs(
    expected: Expected, decision: Decision, problems: list[str]
) -> None:
    assert mismatches(expected, decision, POD) == problems


def test_a_patch_is_compared_with_the_mutated_object_as_a_subset() -> None:
    tolerations = {"spec": {"tolerations": [{"key": "k"}]}}
    assert mismatches(Expected("allowed", patch=tolerations), MUTATED, POD) == []
    wrong = {"spec": {"tolerations": [{"key": "k", "operator": "Equal"}]}}
    assert mismatches(Expected("allowed", patch=wrong), MUTATED, POD) == [
        'patch: spec.tolerations[0].operator: expected "Equal", got "Exists"'
    ]


def test_without_a_mutation_the_patch_is_compared_with_the_object_as_given() -> None:
    assert mismatches(Expected("allowed", patch={"metadata": {"name": "p"}}), ALLOWED, POD) == []


def test_patched_is_the_whole_object_no_key_more() -> None:
    assert mismatches(Expected("allowed", patched=TOLERATED), MUTATED, POD) == []
    assert mismatches(Expected("allowed", patched=POD), MUTATED, POD) == [
        "patched: spec: unexpected tolerations"
    ]


@pytest.mark.parametrize(
    ("want", "have", "found"),
    [
        pytest.param({"a": 1}, {"a": 1, "b": 2}, [], id="a map needs only the keys given"),
        pytest.param({"a": 1}, {}, ["a: missing (expected 1)"], id="a missing key"),
        pytest.param([1, 2], [1], ["the object: expected 2 items, got 1"], id="list length"),
        pytest.param([{"a": 1}], [{"a": 1, "b": 2}], [], id="list items as subsets, in order"),
        pytest.param({"a": True}, {"a": 1}, ["a: expected true, got 1"], id="true is not 1"),
        pytest.param({"a": {"b": 1}}, {"a": "x"}, ['a: expected a map, got "x"'], id="kind"),
    ],
)
def test_differences_name_each_field(want: object, have: object, found: list[str]) -> None:
    assert differences(want, have, at="") == found


def test_differences_stop_at_the_limit() -> None:
    want = {str(n): n for n in range(20)}
    assert len(differences(want, {}, at="")) == 5


IDENTITIES = [
    identity({"kind": "Pod", "metadata": {"name": "a", "namespace": "x"}}, default_namespace="d"),
    identity({"kind": "Deployment", "metadata": {"name": "a"}}, default_namespace="d"),
    identity({"kind": "Pod", "metadata": {"generateName": "g-"}}, default_namespace="d"),
]


@pytest.mark.parametrize(
    ("ref", "given", "found"),
    [
        pytest.param("a", {}, [0, 1], id="a name alone names every kind"),
        pytest.param("pod/a", {}, [0], id="kind as kubectl takes it"),
        pytest.param("a", {"kind": "Deployment"}, [1], id="the result's kind"),
        pytest.param("d/deployment/a", {}, [1], id="the default namespace"),
        pytest.param("a", {"namespace": "x"}, [0], id="the result's namespace"),
        pytest.param("g-", {}, [2], id="generateName"),
        pytest.param("b", {}, [], id="none"),
    ],
)
def test_a_resource_is_named_as_kyverno_names_it(
    ref: str, given: dict[str, str], found: list[int]
) -> None:
    assert matching(ref, IDENTITIES, **given) == found


@pytest.mark.parametrize(
    ("entry", "fields"),
    [
        pytest.param({"resources": ["a"], "result": "allowed"}, [], id="fine"),
        pytest.param(
            {"resources": ["a/b/c/d", "a//b"], "result": "denied"},
            ["resources[0]", "resources[1]"],
            id="more than namespace, kind and name",
        ),
        pytest.param(
            {"resources": ["a"], "result": "denied", "rule": "capacity"},
            ["rule"],
            id="a rule without its source",
        ),
        pytest.param(
            {"resources": ["a"], "result": "allowed", "rule": "builtin/x", "message": "m"},
            ["rule", "message"],
            id="nothing to name when allowed",
        ),
    ],
)
def test_what_the_schema_cannot_say_is_said_per_field(
    entry: dict[str, Any], fields: list[str]
) -> None:
    assert [field for field, _ in entry_problems(entry)] == fields


def test_the_actual_result_names_the_findings_of_its_kind() -> None:
    assert actual_said(DENIED_AND_WARNED) == "denied by builtin/capacity"
    assert actual_said(WARNED) == "warned by builtin/unknownResource"
    assert actual_said(ALLOWED) == "allowed"
