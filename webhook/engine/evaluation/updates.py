"""What an UPDATE can change, read from the old and the new object.

An UPDATE is judged on what it changes, as Kubernetes ratchets its own validation of
updates (KEP-4008): a finding the old object already had is not the update's doing, and
an unrelated edit of an object admitted under older rules must not be refused now.

What a Pod UPDATE may change (kubernetes pkg/apis/core/validation/validation.go
``ValidatePodUpdate``): labels and annotations, container and init container images,
``activeDeadlineSeconds`` (lowered), ``terminationGracePeriodSeconds``, tolerations (only
added), scheduling gates (only removed), and on a pod that still has scheduling gates its
``nodeSelector`` (only added) and node affinity. Resources change only through the
``resize`` subresource, cpu and memory only (``ValidatePodResize``: "only cpu and memory
resources are mutable"), so GPU requests never change after creation. Ephemeral
containers are only added, through the ``ephemeralcontainers`` subresource, and never
changed or removed (``ValidatePodEphemeralContainersUpdate``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.policy.decision import Finding

# Pod spec fields that say where a pod may land (what ``Placement`` reads).
PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def judged_fields_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether a Pod UPDATE changes anything the engine reads: the spec, labels or
    annotations (field references of env read both). Most pod updates are a controller's
    finalizers, owner references or managed fields."""
    if new.get("spec") != old.get("spec"):
        return True
    meta, before = _map(new.get("metadata")), _map(old.get("metadata"))
    return meta.get("labels") != before.get("labels") or meta.get("annotations") != before.get(
        "annotations"
    )


_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def env_reads_metadata(spec: Mapping[str, Any]) -> bool:
    """Whether some container takes a variable from the pod's own labels or annotations
    (``fieldRef: metadata.labels['x']``): then a label edit can change what it reaches."""
    for section in _CONTAINER_LISTS:
        items = spec.get(section)
        for body in items if isinstance(items, list) else ():
            env = body.get("env") if isinstance(body, dict) else None
            for entry in env if isinstance(env, list) else ():
                ref = _map(_map(entry).get("valueFrom")).get("fieldRef")
                path = str(_map(ref).get("fieldPath", ""))
                if path.startswith(("metadata.labels", "metadata.annotations")):
                    return True
    return False


def placed_as_before(new: Mapping[str, Any], old: Mapping[str, Any]) -> Mapping[str, Any]:
    """``new`` with the old pod's placement when the old pod is bound to a node: a bound
    pod stays where it runs, so a toleration added now changes nothing about its node
    (``spec.nodeName`` never changes on update)."""
    old_spec, spec = _map(old.get("spec")), _map(new.get("spec"))
    if not old_spec.get("nodeName") or not spec:
        return new
    placed = {key: value for key, value in spec.items() if key not in PLACEMENT_FIELDS}
    placed.update({key: old_spec[key] for key in PLACEMENT_FIELDS if key in old_spec})
    return {**new, "spec": placed}


def added_ephemeral_containers(
    new: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[tuple[int, Mapping[str, Any]]]:
    """The ephemeral containers of ``new`` (with their index) that ``old`` lacks, by name:
    the API server matches them by name, since a patch may reorder them."""
    before = _map(old.get("spec")).get("ephemeralContainers") if old else None
    names = (
        {c.get("name") for c in before if isinstance(c, dict)}
        if isinstance(before, list)
        else set()
    )
    items = _map(new.get("spec")).get("ephemeralContainers")
    return [
        (index, body)
        for index, body in enumerate(items if isinstance(items, list) else ())
        if isinstance(body, dict) and body.get("name") not in names
    ]


def fresh_findings(before: Iterable[Finding], after: Sequence[Finding]) -> list[Finding]:
    """The findings of the new object that the old one did not have, word for word: a
    value that changes (another label, more GPUs) makes another finding, judged anew."""
    seen = set(before)
    return [finding for finding in after if finding not in seen]
