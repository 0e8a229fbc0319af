"""Building the ``AdmissionReview`` answer: uid echo, verdict, patch, warnings, audit."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from webhook.admission.review import API_VERSION

DENIED_CODE = 403
# The API server drops warnings past 4096 characters in total; keep ours inside that.
MAX_WARNINGS_TOTAL = 4096


def review_response(
    uid: str,
    *,
    allowed: bool,
    message: str = "",
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
    audit: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The body to send back. A denial is an HTTP 200 answer with ``allowed: false`` and
    ``status.code`` 403: the API server shows the message to the user as it is."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": DENIED_CODE, "reason": "Forbidden", "message": message}
    if patch:
        encoded = orjson.dumps(list(patch), default=_plain)
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encoded).decode()
    kept = _within_budget(warnings)
    if kept:
        response["warnings"] = kept
    if audit:
        response["auditAnnotations"] = dict(audit)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _within_budget(warnings: Sequence[str]) -> list[str]:
    kept: list[str] = []
    total = 0
    for warning in warnings:
        total += len(warning)
        if total > MAX_WARNINGS_TOTAL:
            break
        kept.append(warning)
    return kept


def encode(body: Mapping[str, Any]) -> bytes:
    """The answer as JSON bytes (compact; mappings of any type)."""
    return orjson.dumps(body, default=_plain)


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")
