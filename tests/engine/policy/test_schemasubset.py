"""The quick validity test never calls valid a rule document that jsonschema refuses, on
every rule document of the repository and on variants of each with one field replaced,
removed or added; and it is sure of the shipped rules, or check would import jsonschema."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.builders import ROOT
from webhook.engine.policy.schema import DOCUMENT_KINDS
from webhook.engine.policy.schemasubset import valid

REPLACEMENTS: list[Any] = [None, True, False, 0, -1, 2, 1.5, 1.0, "", "x", "1", [], ["x"], [1], {}]
REPLACEMENTS += [{"x": 1}, {"name": "x"}]


def rule_documents() -> list[Any]:
    found = []
    for path in sorted(ROOT.glob("**/*.yaml")):
        if ".venv" in path.parts or "node_modules" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if "gpu-webhook.io/" not in text:
            continue
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError:
            continue
        for index, doc in enumerate(docs):
            if isinstance(doc, dict) and doc.get("kind") in DOCUMENT_KINDS:
                found.append(pytest.param(doc, id=f"{path.relative_to(ROOT)}#{index}"))
    return found


def variants(doc: Any) -> Iterator[Any]:
    """The document with each field in turn replaced by values of every JSON type,
    removed, or joined by an unknown field."""
    for path in _paths(doc):
        for value in REPLACEMENTS:
            yield _set(doc, path, value)
        yield _set(doc, path, _REMOVE)
        yield _set(doc, path, _ADD)


_REMOVE, _ADD = object(), object()


def _paths(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if at:
        yield at
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*at, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*at, index))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    if value is _REMOVE:
        del parent[path[-1]]
    elif value is _ADD:
        target = parent[path[-1]]
        if isinstance(target, dict):
            target["unknownField"] = "x"
        elif isinstance(target, list):
            target.append(copy.deepcopy(target[0]) if target else "x")
    else:
        parent[path[-1]] = value
    return out


VALIDATORS = {kind: Draft202012Validator(schema) for kind, schema in DOCUMENT_KINDS.items()}


@pytest.mark.parametrize("doc", rule_documents())
def test_a_document_called_valid_is_one_jsonschema_accepts(doc: Any) -> None:
    schema, validator = DOCUMENT_KINDS[doc["kind"]], VALIDATORS[doc["kind"]]
    wrong = [
        variant
        for variant in [doc, *variants(doc)]
        if valid(schema, variant) is True and list(validator.iter_errors(variant))
    ]
    assert wrong == []


@pytest.mark.parametrize("path", sorted((ROOT / "rules").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_rules_are_known_valid_without_jsonschema(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert [valid(DOCUMENT_KINDS[d["kind"]], d) for d in docs] == [True] * len(docs)


@pytest.mark.parametrize(
    ("schema", "instance", "verdict"),
    [
        pytest.param({"type": "integer"}, True, False, id="a bool is not an integer"),
        pytest.param({"type": "integer"}, 2.0, True, id="2.0 is an integer"),
        pytest.param({"type": "number"}, False, False, id="a bool is not a number"),
        pytest.param({"enum": [1, 2]}, True, None, id="True against 1 is left to jsonschema"),
        pytest.param({"enum": ["a", False]}, "a", True, id="a string equals only a string"),
        pytest.param({"allOf": [{}]}, 1, None, id="an unknown keyword is left to jsonschema"),
        pytest.param({"uniqueItems": True}, [1, True], None, id="unique numbers and bools"),
        pytest.param({"oneOf": [{"type": "string"}, {"minLength": 1}]}, "x", False, id="oneOf"),
    ],
)
def test_what_it_is_sure_of(schema: Any, instance: Any, verdict: bool | None) -> None:
    assert valid(schema, instance) is verdict
