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

Rule sources are also bounded in size before the lint (below): the same concern, what a
document may hold before the work it causes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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


# --- rule sources: how much of one the webhook reads and lints (issue 41) ------------------
#
# How much of a rule source the webhook reads and lints, judged before the work (issue 41).
#
# The lint (``rulefiles.schema_problems``) runs on every rule file at start and on each hot
# reload, on every rule object the watcher merges and on every GPUPolicy posted to
# ``/validate``. Its work grows with the document: jsonschema tries each ``validate`` entry
# against every check (``oneOf``) and kept every failed try, so a 62 KiB GPUPolicy of 3,000
# misspelt checks took 6.8 s and 220 MiB of a worker, and a 100 KB generated rule file
# killed each new worker while it was linted at boot. So a rule source is measured first, in
# one pass that stops at the first bound it passes, and a source past a bound is refused in
# one line without the lint; the lint itself stops after ``MAX_PROBLEMS`` problems.
#
# Each bound is far above what a hand-written or generated rule set needs (the shipped rules
# are 10 KB; their longest list or map has 17 entries).

# A rule file, and all rule files of a directory together: what a ConfigMap may hold
# (``ValidateConfigMap`` refuses data over ``core.MaxSecretSize``, 1 MiB,
# kubernetes pkg/apis/core/validation/validation.go), and rules are mounted from one.
MAX_RULE_BYTES = 1024 * 1024
# Entries of one list or map in one rule document (a ``validate`` list, ``namespaces``):
# each ``validate`` entry costs the lint about half a millisecond, and every review pays
# for each check in force.
MAX_ENTRIES = 256
# Values (list items and map entries, at any depth) in one rule document.
MAX_VALUES = 4096
# Characters of keys and strings in one rule document: what the decision memo keeps of an
# object (64 KiB of JSON, webhook/admission/memo.py); a GPUPolicy of a few checks is 1 KB.
MAX_TEXT = 64 * 1024
# Not counted as text: the lint reads no annotation's value, the API server holds them to
# 256 KiB (``TotalAnnotationSizeLimitB``, apimachinery pkg/api/validation/objectmeta.go),
# and ``kubectl apply`` copies the whole object into one
# (``kubectl.kubernetes.io/last-applied-configuration``).
_ANNOTATIONS = ("metadata", "annotations")
# Problems the lint reports of one document, and of one rule set; it stops there.
MAX_PROBLEMS = 20
MAX_SET_PROBLEMS = 100
MORE_PROBLEMS = (
    f"... and maybe more: the lint stops after {MAX_PROBLEMS} problems in a document "
    f"and {MAX_SET_PROBLEMS} in a rule set; fix these and lint again"
)


def _path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def oversized(document: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(field, why)`` for the first bound ``document`` passes, or None: one pass that
    stops there, so the measuring costs at most ``MAX_VALUES`` steps whatever the size."""
    values = 0
    text = 0
    stack: list[tuple[object, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str) and path[:2] != _ANNOTATIONS:
            text += len(value)
        if text > MAX_TEXT:  # of the whole document: no field to name
            return "", (
                f"the document holds more than {MAX_TEXT:,} characters of text, more than "
                "a rule document may: shorten it or split it into several documents"
            )
        if not isinstance(value, (Mapping, list)):
            continue
        if len(path) >= MAX_DEPTH:
            return _path(path), TOO_DEEP
        if len(value) > MAX_ENTRIES:
            return _path(path), (
                f"{len(value):,} entries, more than the {MAX_ENTRIES} a rule document may "
                "hold in one list or map: split it into several documents"
            )
        values += len(value)
        if values > MAX_VALUES:
            return "", (
                f"the document holds more than {MAX_VALUES:,} values, more than a rule "
                "document may: split it into several documents"
            )
        if isinstance(value, list):
            stack.extend(((item, (*path, i)) for i, item in enumerate(value)))
            continue
        for key, item in value.items():
            text += len(key) if isinstance(key, str) else 0
            stack.append((item, (*path, str(key))))
    return None
