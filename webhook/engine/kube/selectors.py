"""Kubernetes selector semantics: label selectors, node selector terms, tolerations.

Written against the API's documented behaviour (``k8s.io/component-helpers`` for node
affinity and tolerations, ``k8s.io/apimachinery/pkg/labels`` for label selectors), on raw
JSON values so that anything a user may write is handled without building models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Labels = Mapping[str, str]


def dig(value: object, *keys: str) -> object:
    """``value[k1][k2]...``, or ``None`` where a level is missing or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _clean_requirements(raw: object) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        return []
    return [
        {**e, "values": [v for v in e.get("values") or [] if isinstance(v, (str, int))]}
        if isinstance(e.get("values"), list)
        else {k: v for k, v in e.items() if k != "values"}
        for e in raw
        if isinstance(e, dict) and isinstance(e.get("key"), str)
    ]


def clean_terms(required: object) -> list[dict[str, Any]] | None:
    """The ``nodeSelectorTerms`` of a required node affinity, with ill-typed parts dropped;
    ``None`` when there is no requirement at all."""
    terms = dig(required, "nodeSelectorTerms")
    if not isinstance(terms, list):
        return None
    return [
        {
            "matchExpressions": _clean_requirements(t.get("matchExpressions")),
            "matchFields": _clean_requirements(t.get("matchFields")),
        }
        for t in terms
        if isinstance(t, dict)
    ]


def _values(expr: Mapping[str, Any]) -> list[str]:
    raw = expr.get("values") or []
    return [str(v) for v in raw] if isinstance(raw, list) else []


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def requirement_matches(expr: Mapping[str, Any], labels: Labels) -> bool:
    """One ``matchExpressions`` entry of a node selector term or a label selector."""
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    present = key in labels
    if op == "In":
        return present and labels[key] in _values(expr)
    if op == "NotIn":
        return not present or labels[key] not in _values(expr)
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        values = _values(expr)
        if not present or len(values) != 1:
            return False
        have, want = _int_or_none(labels[key]), _int_or_none(values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def field_matches(expr: Mapping[str, Any], name: str) -> bool:
    """``matchFields``: Kubernetes supports only ``metadata.name`` with In and NotIn."""
    if expr.get("key") != "metadata.name":
        return False
    op = expr.get("operator")
    if op == "In":
        return name in _values(expr)
    if op == "NotIn":
        return name not in _values(expr)
    return False


def term_matches(term: Mapping[str, Any], labels: Labels, name: str) -> bool:
    """A node selector term: every expression holds. An empty term matches no node."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(requirement_matches(e, labels) for e in exprs if isinstance(e, dict)) and all(
        field_matches(f, name) for f in fields if isinstance(f, dict)
    )


def terms_match(terms: Sequence[Any], labels: Labels, name: str) -> bool:
    """``requiredDuringSchedulingIgnoredDuringExecution``: the terms are ORed."""
    return any(isinstance(t, dict) and term_matches(t, labels, name) for t in terms)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Labels) -> bool:
    """A ``metav1.LabelSelector``; an empty selector matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    return all(
        requirement_matches(e, labels)
        for e in selector.get("matchExpressions") or []
        if isinstance(e, dict)
    )


def tolerates(toleration: Mapping[str, Any], *, key: str, value: str, effect: str) -> bool:
    """Whether one toleration tolerates one taint (``v1.Toleration.ToleratesTaint``)."""
    t_effect = toleration.get("effect") or ""
    if t_effect and t_effect != effect:
        return False
    t_key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if t_key != key and not (t_key == "" and operator == "Exists"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == value


def toleration_covers(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether ``existing`` tolerates every taint that ``wanted`` tolerates.

    This is what keeps injected tolerations from duplicating what the user wrote in any
    form: a blanket ``operator: Exists``, an empty effect, or the same key and value.
    """
    e_effect = existing.get("effect") or ""
    w_effect = wanted.get("effect") or ""
    if e_effect and e_effect != w_effect:
        return False
    e_key = existing.get("key") or ""
    e_op = existing.get("operator") or "Equal"
    w_key = wanted.get("key") or ""
    w_op = wanted.get("operator") or "Equal"
    if e_op == "Exists":
        return e_key in ("", w_key)
    if w_op == "Exists" or e_key != w_key:
        return False
    return str(existing.get("value") or "") == str(wanted.get("value") or "")
