"""Outcomes as values: findings, and the one function that turns them into a decision."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["deny", "warn", "audit"]
MAX_WARNING = 119  # the API server shows warnings under 120 characters best
# status.message goes back to the user whole (kubectl prints it, controllers put it in
# events): 20,000 bad containers made a 3.5 MB message. Reasons are given while they fit,
# each clipped, then how many were left out.
MAX_MESSAGE = 8192
MAX_REASON = 1024
_AUDIT_KEY = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True, slots=True)
class Finding:
    """A check that failed (or could not be evaluated) for one object.

    ``rule`` is ``builtin`` or the GPUPolicy's name; ``check`` names the check; ``message``
    says what is wrong and what to change; ``summary`` is its short form for warnings.
    """

    rule: str
    check: str
    action: Action
    message: str
    summary: str
    path: str = ""

    @property
    def id(self) -> str:
        return f"{self.rule}/{self.check}"

    @property
    def warning(self) -> str:
        return shorten(f"{self.id}: {self.summary}")

    @property
    def audit_key(self) -> str:
        key = _AUDIT_KEY.sub("-", f"{self.rule}.{self.check}".lower()).strip("-.")
        return key[:63].rstrip("-.")


def action_of(setting: str) -> Action:
    """The finding action for a check's configured action; ``repair`` (and anything
    unexpected) is judged as ``deny`` once a repair could not apply."""
    return setting if setting in ("warn", "audit") else "deny"  # type: ignore[return-value]


def shorten(text: str, limit: int = MAX_WARNING) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Decision:
    allowed: bool
    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()
    audit: Mapping[str, str] = field(default_factory=dict)
    patch: Sequence[Mapping[str, Any]] = ()
    # For people reading ``gpu-webhook check`` output; not sent to the API server.
    notices: tuple[str, ...] = ()
    mutated: Mapping[str, Any] | None = None
    # Whether the kind holds pod templates this engine understands.
    understood: bool = True
    # "<rule>/mutate" for each rule whose mutations added operations to ``patch``.
    mutated_by: tuple[str, ...] = ()

    @property
    def denials(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.action == "deny")

    @property
    def message(self) -> str:
        """The denial message for ``status.message``: every reason, each with its fix, as
        many as fit in ``MAX_MESSAGE`` characters."""
        return denial_message(self.denials)


def denial_message(denials: Sequence[Finding], *, limit: int = MAX_MESSAGE) -> str:
    """``[rule/check] message`` for each denial, joined, in at most ``limit`` characters:
    each reason clipped to ``MAX_REASON``, and when not all fit, the last part says how many
    were left out and where to see them all."""
    reasons = (f"[{finding.id}] {finding.message}" for finding in denials)
    return clipped_reasons(reasons, len(denials), limit=limit)


_SEE_THEM_ALL = "run gpu-webhook check on the manifest to see them all"


def clipped_reasons(
    reasons: Iterable[str], count: int, *, limit: int = MAX_MESSAGE, see: str = _SEE_THEM_ALL
) -> str:
    """``count`` reasons joined by ``; `` in at most ``limit`` characters, each clipped to
    ``MAX_REASON``; when not all fit, the last part says how many were left out and ``see``
    says where to see them. The one clipper of every ``status.message`` (a pod's denials, a
    rule object's lint problems); ``reasons`` is read only as far as the message goes."""
    parts: list[str] = []
    used = -2  # no separator before the first part
    for reason in reasons:
        part = shorten(reason, MAX_REASON)
        if used + 2 + len(part) > limit:
            break
        parts.append(part)
        used += 2 + len(part)
    if len(parts) == count:
        return "; ".join(parts)
    marker = _left_out(count - len(parts), see)
    while parts and used + 2 + len(marker) > limit:
        used -= 2 + len(parts.pop())
        marker = _left_out(count - len(parts), see)
    return "; ".join([*parts, marker])


def _left_out(count: int, see: str) -> str:
    reasons = "reason" if count == 1 else "reasons"
    return f"... and {count:,} more {reasons} left out of this message: {see}"


def decide(
    findings: Sequence[Finding],
    *,
    patch: Sequence[Mapping[str, Any]],
    mutated: Mapping[str, Any] | None,
    notices: Sequence[str] = (),
    extra_warnings: Sequence[str] = (),
    mutated_by: Sequence[str] = (),
) -> Decision:
    if not findings and not extra_warnings:
        return Decision(
            allowed=True,
            patch=tuple(patch),
            notices=tuple(notices),
            mutated=mutated,
            mutated_by=tuple(mutated_by),
        )
    unique = tuple(dict.fromkeys(findings))
    warnings = [f.warning for f in unique if f.action == "warn"]
    warnings.extend(shorten(w) for w in extra_warnings)
    audit = {f.audit_key: shorten(f.message, 1000) for f in unique if f.action == "audit"}
    return Decision(
        allowed=not any(f.action == "deny" for f in unique),
        findings=unique,
        warnings=tuple(dict.fromkeys(warnings)),
        audit=audit,
        patch=tuple(patch),
        notices=tuple(notices),
        mutated=mutated,
        mutated_by=tuple(mutated_by),
    )
