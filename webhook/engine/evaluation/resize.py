"""``pods/resize``: an in-place resize (KEP-1287, GA in 1.35) judged against the policy's
memory rules.

The API server sends an UPDATE of ``pods/resize`` with the whole Pod, old and new; only
containers' cpu and memory requests and limits may differ (pkg/apis/core/validation
``ValidatePodResize``; pod-level ``spec.resources`` too where
InPlacePodLevelResourcesVerticalScaling is on). A memory limit that a ``memoryLimit`` rule
sets at creation could otherwise be raised or removed by the pod's owner afterwards. The
rule's limit for a container is what the rule would set on the resized pod were the
container's memory unset (``stripped``: the same mutation, run again), so every mode
(``fixed``, ``perGPU``, ``inventoryShare``, pod-level bounds) is judged as at creation.

What the rule sets it holds to: raising a limit that is the rule's own (the old limit
equals what the rule sets) beyond the rule, or removing a memory limit (the pod would then
be one the rule gives a limit at creation), is denied. A limit the owner chose is theirs
to resize, as the rule leaves such limits alone at creation, and a pod created without a
limit (before the rule) is not this resize's doing (KEP-4008 ratcheting).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from webhook.engine.kube.quantity import QuantityError, format_bytes, parse_quantity
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import Rule

RESIZE = "resize"
# What a resize may change: the containers of these lists (sidecars are init containers).
_RESIZABLE = ("initContainers", "containers")


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    spec = _map(pod.get("spec"))
    for section in _RESIZABLE:
        items = spec.get(section)
        for index, body in enumerate(items if isinstance(items, list) else ()):
            if isinstance(body, dict):
                yield section, index, body


def memory_limit(body: Mapping[str, Any]) -> int | None:
    """A container's memory limit in bytes; ``None`` when unset or unreadable."""
    raw = _map(_map(body.get("resources")).get("limits")).get("memory")
    if raw is None:
        return None
    try:
        return int(parse_quantity(raw))
    except QuantityError:
        return None


def stripped(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod with every container's memory request and limit removed: what the memory
    rules would set on it is their limit for each container."""
    out = copy.deepcopy(dict(pod))
    for _section, _index, body in _containers(out):
        resources = body.get("resources")
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            amounts = resources.get(part)
            if isinstance(amounts, dict):
                amounts.pop("memory", None)
    return out


def resize_findings(
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    ruled: Mapping[str, Any],
    rules: Sequence[Rule],
) -> list[Finding]:
    """``memoryLimit`` denials of a resize: ``ruled`` is ``stripped(new)`` as the memory
    rules mutate it, ``rules`` those that set its memory limits (named in the message)."""
    before = {(s, _map(b).get("name")): b for s, _i, b in _containers(old)}
    limits = {(s, i): memory_limit(b) for s, i, b in _containers(ruled)}
    names = ", ".join(r.name for r in rules) or "memoryLimit"
    found = []
    for section, index, body in _containers(new):
        rule_limit = limits.get((section, index))
        old_body = before.get((section, body.get("name")))
        if rule_limit is None or old_body is None:
            continue  # the rules set no limit here, or a container the old pod lacks
        was, now = memory_limit(old_body), memory_limit(body)
        if was is None:
            continue  # created without a limit: not this resize's doing
        if now is not None and (was != rule_limit or now <= rule_limit):
            continue  # the owner's own limit (the rule leaves those alone), or within the rule
        name = f'container "{body.get("name")}"'
        what = (
            "removes its memory limit"
            if now is None
            else (f"raises its memory limit to {format_bytes(now)}")
        )
        found.append(
            Finding(
                rules[0].name if rules else "builtin",
                "memoryLimit",
                "deny",
                (
                    f"the resize of {name} {what} (was {format_bytes(was)}), beyond the "
                    f"{format_bytes(rule_limit)} that rule {names} sets on a GPU container: "
                    "the limit bounds what the container takes of its node's memory. Resize "
                    f"its memory limit within {format_bytes(rule_limit)}."
                ),
                f"{name}: resized memory limit beyond the rule's",
                f"spec.{section}[{index}].resources.limits.memory",
            )
        )
    return found
