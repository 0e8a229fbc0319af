"""Hostile files (issue 35): every reader takes a value as Kubernetes would or refuses it in
one line. Fuzzed over manifests, rule files and inventories: whatever a file holds, the
readers return documents or errors, never raise, and what they return is JSON Kubernetes
could hold: text keys, finite numbers, bounded depth."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.policy.ruleset import PolicyError
from webhook.files.inventoryfile import InventoryFileError, inventory_from_text
from webhook.files.jsonvalues import MAX_DEPTH, unusable
from webhook.files.manifests import parse_text
from webhook.files.rulefiles import load_policy

keys = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=30,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def as_yaml(value: Any) -> str:
    return yaml.safe_dump(value)


def _kubernetes_json(value: Any, depth: int = 0) -> None:
    assert depth <= MAX_DEPTH
    if isinstance(value, float):
        assert math.isfinite(value)
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str)
            _kubernetes_json(item, depth + 1)
    if isinstance(value, list):
        for item in value:
            _kubernetes_json(item, depth + 1)


def refusal(read: Callable[[], object]) -> str | None:
    """What a reader says when it refuses a file; any other exception fails the test."""
    try:
        read()
    except (PolicyError, InventoryFileError) as exc:
        return str(exc)
    return None


def pod_with(value: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": value},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": value}}]},
    }


@settings(max_examples=300, deadline=None)
@given(value=values, as_json=st.booleans())
def test_a_manifest_holding_anything_is_read_or_refused_in_one_line(value, as_json):
    obj = pod_with(value)
    try:
        text = json.dumps(obj) if as_json else as_yaml(obj)
    except (ValueError, TypeError):
        return  # not writable as such a file
    docs, errors = parse_text(text, "fuzz.yaml")
    for doc in docs:
        _kubernetes_json(doc.obj)
    for error in errors:
        assert "\n" not in str(error)
        assert str(error).startswith("fuzz.yaml")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("[" * 100_000 + "]" * 100_000, "nested more than", id="JSON 100k deep"),
        pytest.param(
            json.dumps(nested(MAX_DEPTH + 5)), "nested more than", id="JSON past the bound"
        ),
        pytest.param(as_yaml(nested(MAX_DEPTH + 5)), "nested more than", id="YAML past the bound"),
        pytest.param("a: {b: .inf}\n", "a.b: inf is not a number", id="infinity"),
        pytest.param("a: [1, .nan]\n", "a[1]: nan is not a number", id="not a number"),
        pytest.param("a: {[1]: x}\n", "not a string, number or boolean", id="a list as a key"),
    ],
)
def test_hostile_values_are_refused_with_the_field_and_what_to_do(text, problem):
    docs, errors = parse_text(text, "hostile.yaml")

    assert docs == []
    (error,) = errors
    assert problem in str(error)


def test_keys_that_are_numbers_or_booleans_become_their_text_as_kubectl_writes_them():
    (doc,), _ = parse_text("limits: {1: 2, true: x, 1.5: y, 2.0: z}\n", "keys.yaml")

    assert doc.obj == {"limits": {"1": 2, "true": "x", "1.5": "y", "2": "z"}}


def test_depth_within_the_bound_is_fine():
    assert unusable(nested(MAX_DEPTH - 1)) == ""


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=values)
def test_a_rule_file_holding_anything_is_a_policy_or_a_policy_error(tmp_path: Path, value):
    document = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": "fuzz"},
        "spec": {"order": 40, "match": value, "mutate": value},
    }
    try:
        text = as_yaml(document)
    except (ValueError, TypeError):
        return
    (tmp_path / "rules.yaml").write_text(text)
    problem = refusal(lambda: load_policy(str(tmp_path)))
    assert problem is None or problem.strip()


@settings(max_examples=150, deadline=None)
@given(value=values)
def test_an_inventory_holding_anything_is_read_or_refused(value):
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": value},
        "status": {"allocatable": value, "capacity": value},
    }
    try:
        text = as_yaml({"apiVersion": "v1", "kind": "List", "items": [node]})
    except (ValueError, TypeError):
        return
    problem = refusal(lambda: inventory_from_text(text, "nodes.yaml"))
    assert problem is None or problem.startswith("nodes.yaml")
