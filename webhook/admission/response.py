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
# The API server's warning recorder (k8s.io/apiserver/pkg/endpoints/filters/warning.go,
# truncateAtTotalRunes = 4 * 1024, truncateItemRunes = 256) passes warnings on while their
# runes add up to 4096 or less; past that it clips every warning to 256 runes and drops
# those that come once the total is reached again. So ours stay inside 4096 characters in
# all (a str's len counts code points, as runes do) and under 120 each (``MAX_WARNING``).
MAX_WARNINGS_TOTAL = 4096
# The API server takes request bodies up to 3 MiB, twice etcd's recommended 1.5 MB request
# (MaxRequestBodyBytes, k8s.io/apiserver/pkg/server/config.go), and applies a webhook's patch
# whatever its size (mutating/dispatcher.go). Our patches add what they say: the object grows
# by about 90% of the patch's bytes (the GPU-hiding env, measured), so a pod that needs more
# than 3 MiB of patch would be over 2.7 MiB larger, which etcd's default limit refuses; the
# answer (base64) stays under about 4.2 MB.
MAX_PATCH_BYTES = 3 * 1024 * 1024


class PatchTooLarge(ValueError):
    """The patch is over ``MAX_PATCH_BYTES``: the object is denied with this message."""

    def __init__(self, size: int, operations: int) -> None:
        super().__init__(
            f"gpu-webhook would patch this object with {size:,} bytes of JSON patch "
            f"({operations:,} operations), over its limit of {MAX_PATCH_BYTES:,}: the API "
            "server takes objects up to 3 MiB and etcd 1.5 MiB, so the patched object could "
            "not be stored. Split it into smaller objects (fewer containers)."
        )


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
        # The API server passes a denial's message on as it is, after "admission webhook
        # ... denied the request: " (ToStatusErr, k8s.io/apiserver/pkg/admission/plugin/
        # webhook/errors/statuserror.go), where a warning with a control character is
        # dropped: kubectl prints it, so a name's ESC or CR would reach the terminal.
        shown = message if message.isprintable() else message.translate(_CONTROLS)
        response["status"] = {"code": DENIED_CODE, "reason": "Forbidden", "message": shown}
    if patch:
        encoded = orjson.dumps(list(patch), default=_plain)
        if len(encoded) > MAX_PATCH_BYTES:
            raise PatchTooLarge(len(encoded), len(patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encoded).decode()
    kept = clipped_warnings(warnings)
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
    # GPUPolicyExceptions (namespace/name) that waived a finding of this review.
    exceptions: tuple[str, ...] = ()
    rules_fired: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.findings:
            self.rules_fired = tuple(
                dict.fromkeys([*(f.id for f in self.findings), *self.mutated_by])
            )
        else:
            self.rules_fired = self.mutated_by


def clipped_warnings(warnings: Sequence[str], *, budget: int = MAX_WARNINGS_TOTAL) -> list[str]:
    """The warnings that fit in ``budget`` characters, in order; when not all fit, the last
    one kept says how many were left out. Control characters become spaces: the API server
    drops a warning whose text holds one (``NewWarningHeader`` in
    k8s.io/apimachinery/pkg/util/net/http.go: "must not contain control characters")."""
    kept: list[str] = []
    total = 0
    for warning in warnings:
        text = warning if warning.isprintable() else warning.translate(_CONTROLS)
        if total + len(text) > budget:
            break
        kept.append(text)
        total += len(text)
    else:
        return kept
    marker = _left_out(len(warnings) - len(kept))
    while kept and total + len(marker) > budget:
        total -= len(kept.pop())
        marker = _left_out(len(warnings) - len(kept))
    kept.append(marker)
    return kept


# C0, DEL and C1: what Go's unicode.IsControl is true for.
_CONTROLS = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0)], " ")


def _left_out(count: int) -> str:
    warnings = "warning" if count == 1 else "warnings"
    return f"gpu-webhook: {count:,} more {warnings} left out; gpu-webhook check shows them all"


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")
