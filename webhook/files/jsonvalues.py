"""What a value read from a file must be before anything reads it: a JSON value as
Kubernetes would take it.

kubectl turns YAML into JSON before the API server sees it (sigs.k8s.io/yaml
``yamlToJSON``): a key that is a number or a boolean becomes its text (``1: 2`` is
``"1": 2``), and a value JSON cannot hold stops it there (``.inf``, ``.nan``: "json:
unsupported value: +Inf"). The readers of manifests, rule files and inventories all call
``unusable`` on each document, so a hostile file is one line of error (which file, which
field, what to do) in every command, in ``serve`` and in hot reload, never a traceback deep
in the engine.

Depth is bounded too: the engine, the JSON encoders it uses (orjson refuses more than 255
levels) and Python's own recursion all have limits, and no Kubernetes object needs more
than a few dozen levels.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 100
TOO_DEEP = (
    f"not usable: nested more than {MAX_DEPTH} levels deep (Kubernetes objects need a few "
    "dozen at most): flatten it"
)


def key_text(key: object) -> str | None:
    """A key as sigs.k8s.io/yaml writes it into JSON; ``None`` for one it refuses."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float) and math.isfinite(key):
        return repr(key).removesuffix(".0") if key.is_integer() else repr(key)
    return None


def _field(path: list[str]) -> str:
    return "".join(path).lstrip(".") or "the document"


def _string_keys(value: dict[Any, Any], path: list[str]) -> str:
    """Rewrite ``value``'s keys as text in place (order kept), or say why they cannot be."""
    items = list(value.items())
    texts = [key_text(k) for k, _ in items]
    bad = next((k for (k, _), t in zip(items, texts, strict=True) if t is None), None)
    if bad is not None or None in texts:
        return f"{_field(path)}: the key {bad!r} is not a string, number or boolean: quote it"
    if len(set(texts)) != len(texts):
        return f"{_field(path)}: two keys are the same once written as text: rename one"
    value.clear()
    value.update(zip(texts, (v for _, v in items), strict=True))
    return ""


def unusable(document: object) -> str:
    """Why ``document`` cannot be taken as Kubernetes would take it (``field: what to do``),
    or ``""``. Keys that are numbers or booleans are rewritten as their text, in place, as
    kubectl does. Iterative: a deep document is refused, not a recursion. One pass over the
    containers alone (an inventory file holds millions of values); the field is named by a
    second pass, only once something is wrong."""
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return TOO_DEEP
        if type(value) is dict:
            if not all(type(k) is str for k in value):
                return _named(document)
            children: Any = value.values()
        else:
            children = value
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is float and not math.isfinite(child):
                return _named(document)
    return ""


def _named(document: object) -> str:
    """The slow pass: keys rewritten, or the first problem with its field."""
    stack: list[tuple[object, list[str]]] = [(document, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return (
                f"{_field(path)}: {value} is not a number JSON, and so Kubernetes, can hold: "
                "write a finite number"
            )
        if not isinstance(value, (dict, list)):
            continue
        if isinstance(value, list):
            stack.extend((item, [*path, f"[{i}]"]) for i, item in enumerate(value))
            continue
        if any(not isinstance(k, str) for k in value):
            problem = _string_keys(value, path)
            if problem:
                return problem
        stack.extend((item, [*path, f".{key}"]) for key, item in value.items())
    return unusable(document)  # keys rewritten: judge the rest
