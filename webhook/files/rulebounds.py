"""How much of a rule source the webhook reads and lints, judged before the work (issue 41).

The lint (``rulefiles.schema_problems``) runs on every rule file at start and on each hot
reload, on every rule object the watcher merges and on every GPUPolicy posted to
``/validate``. Its work grows with the document: jsonschema tries each ``validate`` entry
against every check (``oneOf``) and kept every failed try, so a 62 KiB GPUPolicy of 3,000
misspelt checks took 6.8 s and 220 MiB of a worker, and a 100 KB generated rule file
killed each new worker while it was linted at boot. So a rule source is measured first, in
one pass that stops at the first bound it passes, and a source past a bound is refused in
one line without the lint; the lint itself stops after ``MAX_PROBLEMS`` problems.

Each bound is far above what a hand-written or generated rule set needs (the shipped rules
are 10 KB; their longest list or map has 17 entries).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.files.jsonvalues import MAX_DEPTH, TOO_DEEP

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
