"""``hideGPUsFromNonGPUContainers`` in CEL: the containers the webhook surely hides, and the
JSONPatch that hides them exactly as ``mutators.hide_gpus`` does, for ``policies``.

The webhook hides GPUs from each container that asks for none (``gpuaccess.asks_for_gpu``:
no GPU resource above zero, no quantity problem, no DRA claim) and sets no
``NVIDIA_VISIBLE_DEVICES`` itself, in every pod that asks for a GPU (both scopes), and in
the ``gpuNodes`` scope also in pods that ask for none but can land on a GPU node. Where a
pod can land is the inventory's word (which nodes exist, their taints and labels), and so is
whether a claim gives a GPU: here only the pods that surely ask for a GPU by a resource are
covered, and in them only the containers that surely ask for none (no GPU resource but a
plain zero, no claim). Whatever this hides, the webhook would hide with the same values.

Why JSONPatch and not an ApplyConfiguration, though ``containers`` and ``env`` are
``listType=map`` lists keyed by name, which an ApplyConfiguration may merge into: it is
applied by structured-merge-diff to the live object converted to a typed value
(kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch/
smd.go``, ``ApplyStructuredMergeDiff``: ``typeConverter.ObjectToTyped`` then ``Merge``),
which fails on a list that holds a key twice, and a container's ``env`` may name a variable
twice (the API server only warns). The mutation would then fail and, with
``failurePolicy: Ignore``, hide nothing. A JSONPatch (``patch/json_patch.go``) is applied to
the object's JSON as it is, and its ``add .../env/-`` appends exactly where the webhook's
patch appends, so the object is the webhook's to the byte.

A JSONPatch path needs the container's index: ``indexOf`` of its name (Kubernetes' list
library, ``k8s.io/apiserver/pkg/cel/library/lists.go``). Names are unique in a valid pod
(``validateContainers``); in one whose names repeat, the API server refuses the pod after
the mutating phase whatever a patch did.
"""

from __future__ import annotations

from webhook.engine.policy.admissioncel.pod import POSITIVE, holds_claims, quote, section

VISIBLE = "NVIDIA_VISIBLE_DEVICES"
CUDA = "CUDA_VISIBLE_DEVICES"
# ``mutators.HIDE_GPUS``, in its order (a test holds the two equal).
HIDE_GPUS = ((VISIBLE, "void"), (CUDA, ""))
ZERO = "^0+$"
# The pod's two container lists a pod CREATE may carry (ephemeral containers come later,
# through a subresource the webhook alone judges), by their JSON Pointer.
SECTIONS = (("containers", "app"), ("initContainers", "init"))


def surely_asks(c: str, gpu: str) -> str:
    """Container ``c`` asks for a GPU as the webhook reads it: a GPU resource (``gpu``:
    whether the name ``r`` is one) with a plain count above zero, as a request or a limit
    (an unequal or lone request is a quantity problem, which asks too)."""
    return " || ".join(
        f"({section(c, part)} && {c}.resources.{part}.exists(r, ({gpu}) && "
        f"string({c}.resources.{part}[r]).matches('{POSITIVE}')))"
        for part in ("limits", "requests")
    )


def surely_asks_for_none(c: str, gpu: str) -> str:
    """Container ``c`` asks for no GPU whatever the inventory says: no DRA claim (the
    inventory tells whether a claim gives one), and a GPU resource only as a plain zero
    limit, its request (if any) written the same."""
    lim = f"string({c}.resources.limits[r])"
    req = f"string({c}.resources.requests[r])"
    return (
        f"!{holds_claims(c)} && (!{section(c, 'limits')} || "
        f"{c}.resources.limits.all(r, !({gpu}) || {lim}.matches('{ZERO}'))) && "
        f"(!{section(c, 'requests')} || "
        f"{c}.resources.requests.all(r, !({gpu}) || ({section(c, 'limits')} && "
        f"r in {c}.resources.limits && {req} == {lim})))"
    )


def _names(c: str, name: str) -> str:
    return f"({c}.env.exists(e, has(e.name) && e.name == {quote(name)}))"


def _has_env(c: str) -> str:
    return f"(has({c}.env) && size({c}.env) > 0)"


def sets_visible(c: str) -> str:
    """``c`` sets ``NVIDIA_VISIBLE_DEVICES`` itself, in any form: left alone."""
    return f"({_has_env(c)} && {_names(c, VISIBLE)})"


def hiding_variables(hides: str, gpu: str) -> list[dict[str, str]]:
    """Whether the pod is one a hiding rule surely covers (``hides``), then per section
    the containers' names (for their indexes) and those to hide."""
    found = [{"name": "hides", "expression": hides}]
    for key, short in SECTIONS:
        items = f"object.spec.{key}"
        found.append(
            {
                "name": f"{short}Names",
                "expression": f"has({items}) ? {items}.map(c, has(c.name) ? c.name : '') : []",
            }
        )
        found.append(
            {
                "name": f"{short}Hidden",
                "expression": f"variables.hides && has({items}) ? {items}.filter(c, "
                f"({surely_asks_for_none('c', gpu)}) && !{sets_visible('c')}) : []",
            }
        )
    return found


def _entry(name: str, value: str) -> str:
    return f"{{'name': {quote(name)}, 'value': {quote(value)}}}"


def hiding_patch() -> str:
    """The JSONPatch of ``mutators.hide_gpus`` for every container to hide: a container
    without ``env`` gets both variables in one ``add``; one with ``env`` gets
    ``NVIDIA_VISIBLE_DEVICES=void`` appended, then ``CUDA_VISIBLE_DEVICES=""`` unless it
    sets that one (kept: it hides nothing from the runtime). All first appends come before
    all second ones, which leaves each container's ``env`` in the webhook's order."""
    both = "[" + ", ".join(_entry(n, v) for n, v in HIDE_GPUS) + "]"
    visible, cuda = (_entry(n, v) for n, v in HIDE_GPUS)
    firsts, seconds = [], []
    for key, short in SECTIONS:
        path = f"'/spec/{key}/' + string(variables.{short}Names.indexOf(has(c.name) ? c.name : ''))"
        firsts.append(
            f"variables.{short}Hidden.map(c, {_has_env('c')} ? JSONPatch{{op: 'add', "
            f"path: {path} + '/env/-', value: {visible}}} : JSONPatch{{op: 'add', "
            f"path: {path} + '/env', value: {both}}})"
        )
        seconds.append(
            f"variables.{short}Hidden.filter(c, {_has_env('c')} && !{_names('c', CUDA)})"
            f".map(c, JSONPatch{{op: 'add', path: {path} + '/env/-', value: {cuda}}})"
        )
    return " + ".join(firsts + seconds)
