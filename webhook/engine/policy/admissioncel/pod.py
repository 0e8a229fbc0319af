"""CEL over a pod: the small pieces every generated admission policy is made of.

The API server evaluates these (cel-go, with the Kubernetes libraries); the tests evaluate
them with cel-python. Both read the same subset: ``has()``, ``in``, ``matches`` (RE2: no
look-around, no back-references), ``exists``/``all``/``filter``/``map`` and ``sum()``
(Kubernetes' list library, ``k8s.io/apiserver/pkg/cel/library/lists.go``). Quantities are
read through ``string()``: a Pod's are strings, a custom resource without a schema may
hold numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.policy.ruleset import Policy

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


def holds_claims(c: str) -> str:
    """Container ``c`` names DRA claims (``resources.claims``): whether they give a GPU is
    the inventory's (their classes, the drivers' ResourceSlices)."""
    return f"(has({c}.resources) && has({c}.resources.claims) && size({c}.resources.claims) > 0)"


def section(container: str, name: str) -> str:
    """``requests`` or ``limits`` of a container, guarded: ``has(c.resources) &&
    has(c.resources.NAME)``."""
    return f"(has({container}.resources) && has({container}.resources.{name}))"


# --- the pod's GPUs ----------------------------------------------------------------------


class PodCEL:
    """The expressions about one pod's containers, with the policy's GPU resource names."""

    def __init__(self, policy: Policy) -> None:
        names = [name for name, _ in policy.settings.gpu_resources.entries]
        self.gpu_names_ok = name_in("r", names) is not None
        self._gpu = name_in("r", names) or "false"

    def gpu(self) -> str:
        """Whether the resource name ``r`` is a GPU (``GPUSettings.gpuResources``)."""
        return self._gpu

    @staticmethod
    def value(c: str, part: str, key: str = "r") -> str:
        return f"string({c}.resources.{part}[{key}])"

    def count(self, c: str) -> str:
        """The GPUs container ``c`` asks for where each is a whole count written plainly
        (a request equal to its limit, or one of them): never more than the webhook counts
        (``gpus.pod_gpus``: the request, else the limit, rounded up)."""
        lim, req = self.value(c, "limits"), self.value(c, "requests")
        same = f"(!has({c}.resources.requests) || !(r in {c}.resources.requests) || {req} == {lim})"
        from_limits = (
            f"({section(c, 'limits')} ? {c}.resources.limits.filter(r, {self.gpu()} && "
            f"{lim}.matches('{WHOLE}') && {same}).map(r, int({lim})).sum() : 0)"
        )
        only_requests = (
            f"({section(c, 'requests')} ? {c}.resources.requests.filter(r, {self.gpu()} && "
            f"!(has({c}.resources.limits) && r in {c}.resources.limits) && "
            f"{req}.matches('{WHOLE}')).map(r, int({req})).sum() : 0)"
        )
        return f"{from_limits} + {only_requests}"

    def bad_count(self, c: str, allowed: str) -> str:
        """Some GPU resource of ``c`` has a plain whole count above zero not in ``allowed``."""
        lim, req = self.value(c, "limits"), self.value(c, "requests")
        same = f"(!has({c}.resources.requests) || !(r in {c}.resources.requests) || {req} == {lim})"
        return (
            f"({section(c, 'limits')} && {c}.resources.limits.exists(r, {self.gpu()} && "
            f"{lim}.matches('{POSITIVE}') && {same} && !(int({lim}) in {allowed}))) || "
            f"({section(c, 'requests')} && {c}.resources.requests.exists(r, {self.gpu()} && "
            f"!(has({c}.resources.limits) && r in {c}.resources.limits) && "
            f"{req}.matches('{POSITIVE}') && !(int({req}) in {allowed})))"
        )

    def exact(self, c: str) -> str:
        """Container ``c``'s count is the webhook's: every GPU quantity plain and whole, no
        other extended resource (a DRA class may serve it as a GPU, KEP-5004)."""
        lim, req = self.value(c, "limits"), self.value(c, "requests")
        return (
            f"(!{section(c, 'limits')} || {c}.resources.limits.all(r, !r.contains('/') || "
            f"({self.gpu()} && {lim}.matches('{WHOLE}')))) && "
            f"(!{section(c, 'requests')} || {c}.resources.requests.all(r, !r.contains('/') || "
            f"({self.gpu()} && {req}.matches('{WHOLE}') && (!has({c}.resources.limits) || "
            f"!(r in {c}.resources.limits) || {req} == {lim}))))"
        )

    def holds(self, c: str, patterns: Sequence[str]) -> str | None:
        """``c`` asks for more than zero of a GPU resource that matches ``patterns``."""
        matches = name_in("r", patterns)
        if matches is None:
            return None
        lim, req = self.value(c, "limits"), self.value(c, "requests")
        return (
            f"({section(c, 'requests')} && {c}.resources.requests.exists(r, {self.gpu()} && "
            f"{matches} && {req}.matches('{POSITIVE}'))) || "
            f"({section(c, 'limits')} && {c}.resources.limits.exists(r, {self.gpu()} && "
            f"{matches} && {lim}.matches('{POSITIVE}') && (!has({c}.resources.requests) || "
            f"!(r in {c}.resources.requests))))"
        )


# The pod's containers: app and init (sidecars among them), and those whose requests add
# up (app containers and sidecars: the pod's effective request is at least their sum).
# Guarded: the mutating policies run before the API server's validation, on a pod that
# may name no container yet, and an expression that errors changes nothing.
APP = "(has(object.spec.containers) ? object.spec.containers : [])"
CONTAINERS = f"{APP} + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
COUNTED = (
    f"{APP} + (has(object.spec.initContainers) ? "
    "object.spec.initContainers.filter(c, has(c.restartPolicy) && c.restartPolicy == 'Always') "
    ": [])"
)
# No init container but sidecars asks for a GPU: then the pod's request is the sum above
# (``resources.fit.effective``).
NO_INIT_GPUS = (
    "!has(object.spec.initContainers) || object.spec.initContainers.all(c, "
    "(has(c.restartPolicy) && c.restartPolicy == 'Always') || !has(c.resources) || "
    "((!has(c.resources.limits) || c.resources.limits.all(r, !r.contains('/'))) && "
    "(!has(c.resources.requests) || c.resources.requests.all(r, !r.contains('/')))))"
)


def pod_variables(pod: PodCEL, *, exact: bool) -> list[dict[str, str]]:
    found = [
        {"name": "containers", "expression": CONTAINERS},
        {"name": "counted", "expression": COUNTED},
        {"name": "gpus", "expression": f"variables.counted.map(c, {pod.count('c')}).sum()"},
    ]
    if exact:
        found.append(
            {
                "name": "exact",
                "expression": f"({NO_INIT_GPUS}) && variables.containers.all(c, {pod.exact('c')})",
            }
        )
    return found
