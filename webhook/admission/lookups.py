"""Reading from the API server, within a budget, what the server's view has not seen yet.

The cluster view is a watch: a claim created a moment before its pod (one ``kubectl apply``
of both) may not be in it when the pod's review arrives, and the engine would warn that it
could not check the claim while the claim exists (issue 31). The engine names what it
lacks (``webhook.engine.evaluation.references``); this shell reads those objects directly,
and, for a new ResourceClaim, the pods that already name it (issue 35), then the engine
judges again with them. Everything read here is bounded by one budget per review, well
inside the API server's webhook timeout (``timeoutSeconds: 5`` in deploy/base/webhooks.yaml;
the API server gives up and applies ``failurePolicy`` past it): a slow API server costs a
review at most ``LOOKUP_BUDGET_SECONDS`` more, and then the warning is said as before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from webhook.engine.evaluation.evaluate import POD_TOTAL_CHECKS
from webhook.engine.evaluation.references import MAX_REFERENCES, Reference, unseen_references
from webhook.engine.evaluation.request import InventoryView, Request, Resource
from webhook.engine.evaluation.scale import scaled_kind
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import Policy
from webhook.files.context import applied_together

# Seconds per review for every read together; a fifth of the webhook's 5 s timeout.
LOOKUP_BUDGET_SECONDS = 1.0
# Reads per review: the objects a pod names, then the classes those name.
ROUNDS = 2


class ClusterReader(Protocol):
    """What the shell may ask the API server, each call bounded by ``timeout`` seconds."""

    def read(self, ref: Reference, *, timeout: float) -> Mapping[str, Any] | None:
        """The object, or None when it does not exist or could not be read in time."""

    def pods_naming(
        self, namespace: str, claim: str, *, timeout: float
    ) -> tuple[list[Mapping[str, Any]], bool]:
        """The namespace's pods whose ``spec.resourceClaims`` name ``claim``
        (``resourceClaimName``), and whether every pod was read in time."""

    def workload(
        self, target: Resource, namespace: str, *, timeout: float
    ) -> tuple[Mapping[str, Any] | None, str]:
        """The object ``target`` names (the parent of a ``scale`` request), or None and,
        in a few words, why it could not be read."""


def may_read(body: bytes) -> bool:
    """Whether a review's body, unparsed, could lead to a read here: it names a claim or a
    claim template (which name device classes), or it is a scale. The serving worker
    answers a review on its main loop only when not, since a read may take the whole
    budget. Of JSON's escapes only ``\\u`` spells a letter (``\\"`` is common: kubectl's
    last-applied annotation), so a body with one counts as naming either."""
    return b"esourceClaim" in body or b"scale" in body or b"\\u" in body


# Findings that say the view lacks an object the review names.
MISSES = frozenset({"missingClaim", "unknownDeviceClass"})


def worth_a_read(request: Request, decision: Decision, *, policy: Policy) -> bool:
    """Whether the review should read from the API server: the engine missed an object it
    names, or a new ResourceClaim may take a pod that names it over a pod-total limit. A
    claim the scheduler makes from a pod's template (owned by that pod) is not one: the
    pod was judged with the template. Every other review costs nothing here."""
    if request.operation != "CREATE":
        return False
    if any(f.check in MISSES for f in decision.findings):
        return True
    obj = request.object
    if obj.get("kind") != "ResourceClaim" or not str(obj.get("apiVersion", "")).startswith(
        "resource.k8s.io/"
    ):
        return False
    owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
    if any(isinstance(o, Mapping) and o.get("kind") == "Pod" for o in owners):
        return False
    return any(c.kind in POD_TOTAL_CHECKS for rule in policy.rules for c in rule.checks)


# Why a scale's parent was not read when the server reads no API server at all.
NO_READER = (
    "the webhook reads no API server (it runs with an inventory file or none); "
    "serve with --kubeconfig or in the cluster to judge scales"
)


def with_parent(
    request: Request,
    *,
    policy: Policy,
    reader: ClusterReader | None,
    budget: float = LOOKUP_BUDGET_SECONDS,
) -> Request:
    """A ``scale`` request with its parent read within the review's budget (or why it was
    not: the engine then allows the scale with a warning); every other request as it is."""
    target = request.resource
    if target is None or scaled_kind(request, policy.kinds) is None:
        return request
    if reader is None:
        return dataclasses.replace(request, parent_unread=NO_READER)
    parent, why = reader.workload(target, request.effective_namespace, timeout=budget)
    return dataclasses.replace(request, parent=parent, parent_unread=why)


def looked_up(
    request: Request,
    view: InventoryView,
    *,
    policy: Policy,
    reader: ClusterReader,
    clock: Callable[[], float] = time.monotonic,
    budget: float = LOOKUP_BUDGET_SECONDS,
) -> tuple[Request, InventoryView] | None:
    """The request and view with what was read, or None when nothing was missing (or
    nothing missing could be read): the caller then judges as before, memo and all."""
    if request.operation != "CREATE" or view.devices is None or view.problem:
        return None
    deadline = clock() + budget
    changed = False
    obj = request.object
    if obj.get("kind") == "ResourceClaim" and str(obj.get("apiVersion", "")).startswith(
        "resource.k8s.io/"
    ):
        name = str((obj.get("metadata") or {}).get("name") or "")
        pods, complete = reader.pods_naming(
            request.effective_namespace, name, timeout=max(deadline - clock(), 0.0)
        )
        request = dataclasses.replace(
            request, referencing_pods=tuple(pods), referencing_complete=complete
        )
        changed = True
    meta = obj.get("metadata") or {}
    # The object under review is not there yet, and a ref read once is not read again.
    tried = {Reference(str(obj.get("kind")), request.effective_namespace, str(meta.get("name")))}
    for _ in range(ROUNDS):
        missing = [r for r in _unseen(request, policy=policy, view=view) if r not in tried]
        tried.update(missing)
        found = _read_all(missing, reader, deadline=deadline, clock=clock)
        if not found:
            break
        view = applied_together(view, found)
        changed = True
    return (request, view) if changed else None


def _unseen(request: Request, *, policy: Policy, view: InventoryView) -> list[Reference]:
    """What the object names, and the pods that name it (their other claims count in their
    GPU total), that the view lacks: at most ``MAX_REFERENCES`` in all."""
    found = dict.fromkeys(unseen_references(request, policy=policy, devices=view.devices))
    for pod in request.referencing_pods or ():
        as_pod = Request(pod, namespace=request.effective_namespace)
        found.update(dict.fromkeys(unseen_references(as_pod, policy=policy, devices=view.devices)))
    return list(found)[:MAX_REFERENCES]


def _read_all(
    refs: Sequence[Reference],
    reader: ClusterReader,
    *,
    deadline: float,
    clock: Callable[[], float],
) -> list[Mapping[str, Any]]:
    found = []
    for ref in refs:
        left = deadline - clock()
        if left <= 0:
            break
        obj = reader.read(ref, timeout=left)
        if obj is not None:
            found.append(obj)
    return found
