"""CEL over a pod: the small pieces every generated admission policy is made of.

The API server evaluates these (cel-go, with the Kubernetes libraries); the tests evaluate
them with cel-python. Both read the same subset: ``has()``, ``in``, ``matches`` (RE2: no
look-around, no back-references), ``exists``/``all``/``filter``/``map`` and ``sum()``
(Kubernetes' list library, ``k8s.io/apiserver/pkg/cel/library/lists.go``). Quantities are
read through ``string()``: a Pod's are strings, a custom resource without a schema may
hold numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# A whole count as the API server sends it; nine digits keep ``int()`` far from overflow.
WHOLE = "^[0-9]{1,9}$"
POSITIVE = "^0*[1-9][0-9]{0,8}$"


def quote(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quoted_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(quote(i) for i in items) + "]"


_META = frozenset(".+()|{}^$\\")


def _escape(ch: str) -> str:
    """RE2 and Python's ``re`` read a backslash before these alike."""
    return "\\" + ch if ch in _META else ch


def glob_regex(pattern: str) -> str | None:
    """An anchored RE2 expression for a rule glob (``*``, ``?``), as ``fnmatch`` reads it
    (``*`` crosses ``/``); ``None`` for a character class, which is left to the webhook."""
    if "[" in pattern:
        return None
    parts = [".*" if ch == "*" else "." if ch == "?" else _escape(ch) for ch in pattern]
    return "^" + "".join(parts) + "$"


def name_in(variable: str, patterns: Iterable[str]) -> str | None:
    """Whether ``variable`` (a CEL string) matches one of the globs; ``None`` when one of
    them cannot be said in RE2. Exact names are one ``in`` list, globs one regex."""
    patterns = list(patterns)
    exact = [p for p in patterns if not any(c in p for c in "*?[")]
    regexes = [glob_regex(p) for p in patterns if p not in exact]
    if any(r is None for r in regexes):
        return None
    terms = []
    if exact:
        terms.append(f"{variable} == {quote(exact[0])}" if len(exact) == 1 else
                     f"{variable} in {quoted_list(exact)}")  # fmt: skip
    if regexes:
        joined = "|".join(f"(?:{r})" for r in regexes if r) if len(regexes) > 1 else regexes[0]
        terms.append(f"{variable}.matches({quote(str(joined))})")
    if not terms:
        return "false"
    return terms[0] if len(terms) == 1 else "(" + " || ".join(terms) + ")"


def label_selector(metadata: str, selector: Mapping[str, Any]) -> str | None:
    """A ``metav1.LabelSelector`` over ``metadata.labels`` (``object.metadata`` or
    ``namespaceObject.metadata``), as ``labels.SelectorFromSet`` and
    ``LabelSelectorAsSelector`` read it: every term must hold; an empty selector matches
    everything. ``None`` for an operator it does not know."""
    labels = f"{metadata}.labels"
    terms = []

    def present(key: str) -> str:
        return f"(has({labels}) && {quote(key)} in {labels})"

    for key, value in (selector.get("matchLabels") or {}).items():
        terms.append(f"({present(key)} && {labels}[{quote(key)}] == {quote(str(value))})")
    for expr in selector.get("matchExpressions") or []:
        key, op = str(expr.get("key")), expr.get("operator")
        values = quoted_list(str(v) for v in expr.get("values") or [])
        if op == "In":
            terms.append(f"({present(key)} && {labels}[{quote(key)}] in {values})")
        elif op == "NotIn":
            terms.append(f"(!{present(key)} || !({labels}[{quote(key)}] in {values}))")
        elif op == "Exists":
            terms.append(present(key))
        elif op == "DoesNotExist":
            terms.append(f"!{present(key)}")
        else:
            return None
    return " && ".join(terms) if terms else "true"


def all_of(terms: Iterable[str]) -> str:
    kept = [t for t in terms if t != "true"]
    if not kept:
        return "true"
    return kept[0] if len(kept) == 1 else " && ".join(f"({t})" for t in kept)


def any_of(terms: Iterable[str]) -> str:
    kept = [t for t in terms if t != "false"]
    if "true" in kept:
        return "true"
    if not kept:
        return "false"
    return kept[0] if len(kept) == 1 else " || ".join(f"({t})" for t in kept)


def section(container: str, name: str) -> str:
    """``requests`` or ``limits`` of a container, guarded: ``has(c.resources) &&
    has(c.resources.NAME)``."""
    return f"(has({container}.resources) && has({container}.resources.{name}))"
