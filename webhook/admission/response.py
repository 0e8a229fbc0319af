"""Building the ``AdmissionReview`` answer: uid echo, verdict, patch, warnings, audit."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from webhook.admission.review import API_VERSION
from webhook.engine.policy.decision import Finding

Verdict = Literal["allowed", "denied", "skipped", "error"]

DENIED_CODE = 403
# The API server drops warnings past 4096 characters in total; keep ours inside that.
MAX_WARNINGS_TOTAL = 4096


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Reply:
    """An answer encoded once, without its uid.

    The replicas of a workload get the same answer but for the uid, so the service keeps
    a ``Reply`` next to a remembered decision and each replica costs one concatenation,
    where building and encoding the answer (base64 patch included) cost more than
    looking the decision up.
    """

    head: bytes
    tail: bytes

    def encode(self, uid: str) -> bytes:
        return self.head + orjson.dumps(uid) + self.tail

    def body(self, uid: str) -> dict[str, Any]:
        """The answer as the API server reads it."""
        body: dict[str, Any] = orjson.loads(self.encode(uid))
        return body


_UID_MARK = "\x00uid\x00"


def reply(
    *,
    allowed: bool,
    message: str = "",
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
    audit: Mapping[str, str] | None = None,
) -> Reply:
    """The answer to send back, for any uid. A denial is an HTTP 200 answer with
    ``allowed: false`` and ``status.code`` 403: the API server shows the message to the
    user as it is."""
    response: dict[str, Any] = {"uid": _UID_MARK, "allowed": allowed}
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
    body = {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    # The uid is the first string after the fixed apiVersion and kind, so the first match
    # is the uid, whatever a message or warning says.
    head, tail = orjson.dumps(body, default=_plain).split(orjson.dumps(_UID_MARK), 1)
    return Reply(head, tail)


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Answer:
    """All of a review's answer but its uid, with what the log line and the metrics say
    about it: the replicas of a pod share one (``DecisionMemo`` keeps it)."""

    reply: Reply
    verdict: Verdict
    skipped_because: str = ""
    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()
    patch_ops: int = 0
    rules_generation: int = 0
    # Rules whose mutations are in the patch sent ("<rule>/mutate").
    mutated_by: tuple[str, ...] = ()
    rules_fired: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.findings:
            self.rules_fired = tuple(
                dict.fromkeys([*(f.id for f in self.findings), *self.mutated_by])
            )
        else:
            self.rules_fired = self.mutated_by


def _within_budget(warnings: Sequence[str]) -> list[str]:
    kept: list[str] = []
    total = 0
    for warning in warnings:
        total += len(warning)
        if total > MAX_WARNINGS_TOTAL:
            break
        kept.append(warning)
    return kept


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")
