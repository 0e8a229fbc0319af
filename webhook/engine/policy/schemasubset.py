"""Whether a rule document is valid to its schema, told without jsonschema where that is
certain: most documents are, and importing jsonschema (with referencing and attrs) cost
``check`` of one pod about a quarter of its run (bench/startup.py).

Only the keywords the rule schemas use are known here, each only where its meaning in
JSON Schema 2020-12 is plain (jsonschema's ``_keywords``): anything else (an unknown
keyword, an ``enum`` or ``const`` against anything but a string, ``uniqueItems`` over
anything but strings) makes the answer ``None``, "not sure", and the caller asks
jsonschema, which also words the errors. ``valid`` never says True of a document jsonschema refuses
(tests/files/test_schemasubset.py compares the two on every rule document of the
repository and on variants of them with each field replaced).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Keywords that say nothing of validity (jsonschema ignores them as well).
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_ANNOTATIONS |= {"x-kubernetes-validations", "x-kubernetes-preserve-unknown-fields"}
_JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # bool is an int to Python, never a number to JSON Schema; 1.0 is an integer.
    "integer": lambda v: (
        not isinstance(v, bool)
        and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    ),
    "number": lambda v: not isinstance(v, bool) and isinstance(v, int | float),
}
_PATTERNS: dict[str, re.Pattern[str]] = {}


def valid(schema: Any, instance: Any) -> bool | None:
    """True or False where certain, None where jsonschema must be asked."""
    if schema is True:
        return True
    if schema is False:
        return False
    if not isinstance(schema, Mapping):
        return None
    verdict: bool | None = True
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        check = _KEYWORDS.get(keyword)
        said = None if check is None else check(value, instance, schema)
        if said is False:
            return False
        if said is None:
            verdict = None
    return verdict


def _type(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    names = value if isinstance(value, list) else [value]
    if not all(isinstance(n, str) and n in _JSON_TYPES for n in names):
        return None
    return any(_JSON_TYPES[n](instance) for n in names)


def _properties(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    if not isinstance(instance, dict):
        return True
    if not isinstance(value, Mapping):
        return None
    return _all(valid(value[k], instance[k]) for k in value if k in instance)


def _additional(value: Any, instance: Any, schema: Mapping[str, Any]) -> bool | None:
    if not isinstance(instance, dict):
        return True
    if "patternProperties" in schema or not isinstance(schema.get("properties", {}), Mapping):
        return None
    known = schema.get("properties", {})
    return _all(valid(value, v) for k, v in instance.items() if k not in known)


def _required(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    if not isinstance(instance, dict):
        return True
    return all(k in instance for k in value) if isinstance(value, list) else None


def _items(value: Any, instance: Any, schema: Mapping[str, Any]) -> bool | None:
    if not isinstance(instance, list):
        return True
    if "prefixItems" in schema:
        return None
    return _all(valid(value, each) for each in instance)


def _enum(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    # A string equals only an equal string, in jsonschema's ``_utils.equal`` as in Python;
    # equality between other JSON types (True against 1, 1 against 1.0) is jsonschema's.
    if not isinstance(value, list) or not isinstance(instance, str):
        return None
    return instance in value


def _const(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    if not isinstance(instance, str):
        return None
    return bool(instance == value)


def _pattern(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    if not isinstance(instance, str):
        return True
    compiled = _PATTERNS.get(value)
    if compiled is None:
        compiled = _PATTERNS[value] = re.compile(value)
    return compiled.search(instance) is not None


def _length(low: bool) -> Any:
    def check(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
        if not isinstance(instance, str):
            return True
        return bool(len(instance) >= value if low else len(instance) <= value)

    return check


def _count(low: bool, kind: type[list[Any]] | type[dict[Any, Any]]) -> Any:
    def check(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
        if not isinstance(instance, kind):
            return True
        return bool(len(instance) >= value if low else len(instance) <= value)

    return check


def _bound(low: bool) -> Any:
    def check(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
        if isinstance(instance, bool) or not isinstance(instance, int | float):
            return True
        return bool(instance >= value if low else instance <= value)

    return check


def _unique(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    if value is not True or not isinstance(instance, list):
        return True if not isinstance(instance, list) else None
    if not all(isinstance(each, str) for each in instance):
        return None
    return len(set(instance)) == len(instance)


def _any_of(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    said = [valid(s, instance) for s in value]
    return True if True in said else (None if None in said else False)


def _one_of(value: Any, instance: Any, _: Mapping[str, Any]) -> bool | None:
    said = [valid(s, instance) for s in value]
    return None if None in said else said.count(True) == 1


def _all(verdicts: Any) -> bool | None:
    out: bool | None = True
    for said in verdicts:
        if said is False:
            return False
        if said is None:
            out = None
    return out


_KEYWORDS = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional,
    "required": _required,
    "items": _items,
    "enum": _enum,
    "const": _const,
    "pattern": _pattern,
    "minLength": _length(True),
    "maxLength": _length(False),
    "minItems": _count(True, list),
    "maxItems": _count(False, list),
    "minProperties": _count(True, dict),
    "minimum": _bound(True),
    "maximum": _bound(False),
    "uniqueItems": _unique,
    "anyOf": _any_of,
    "oneOf": _one_of,
}
