"""``<resource>/scale``: a replica count set through a workload's scale subresource, judged
as the UPDATE of the workload it makes.

``kubectl scale`` and every HorizontalPodAutoscaler (the training operator's for an elastic
PyTorchJob among them) change replicas there, not by updating the workload: the API server
sends the webhook an UPDATE whose ``resource`` is the parent's (``deployments``), whose
``subResource`` is ``scale`` and whose ``object`` and ``oldObject`` are ``autoscaling/v1``
Scales: metadata (name, namespace, uid, resourceVersion, creationTimestamp), ``spec.replicas``
and ``status`` (kubernetes pkg/registry/apps/deployment/storage/storage.go
``scaleFromDeployment``; for a custom resource, apiextensions-apiserver
pkg/registry/customresource/etcd.go ``scaleFromCustomResource``, from the CRD's
``specReplicasPath``). A Scale holds no pod template: the shell reads the parent within the
review's lookup budget (webhook.admission.lookups), and the engine judges the parent with
the new count at its kind's ``specReplicasPath``, as the API server will store it
(``ScaleREST.Update`` moves ``spec.replicas`` there and nothing else), against the parent
as stored. So a scale gets the same answer as an UPDATE that changes the same
field: only totals it raises are judged (``maxGPUsPerWorkload``, the cluster's capacity).
A parent that cannot be read (no API access, RBAC, a timeout) is never a denial: the scale
is allowed with a warning that names what could not be read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.engine.evaluation.request import Request
from webhook.engine.kube.workloads import KindTable, PodTemplate, WorkloadKind
from webhook.engine.policy.decision import Decision

SCALE = "scale"


def scaled_kind(request: Request, kinds: KindTable) -> WorkloadKind | None:
    """The workload kind a ``scale`` request changes, when the engine knows its layout and
    where its scale subresource keeps the count; None for any other request."""
    resource = request.resource
    if request.sub_resource != SCALE or resource is None:
        return None
    kind = kinds.by_resource(resource.group, resource.resource)
    return kind if kind is not None and kind.scale else None


def parent_update(request: Request, kinds: KindTable) -> Request | Decision:
    """The UPDATE of the parent that this scale makes, or the answer when it cannot be
    judged: not a kind the engine knows (passed through), or a parent it could not read
    (allowed, with a warning)."""
    kind = scaled_kind(request, kinds)
    if kind is None:
        return Decision(allowed=True, mutated=request.object, understood=False)
    target = _target(request, kind)
    new = _count(request.object)
    if new is None:
        return _unjudged(target, "the Scale's spec.replicas is not a count", request)
    parent = request.parent
    if parent is None:
        return _unjudged(target, request.parent_unread or "it was not read", request)
    mismatch = _mismatch(parent, request.object, kind)
    if mismatch:
        return _unjudged(target, mismatch, request)
    # The parent as stored is the old object: the old Scale says 0 where the field is unset
    # (``scaleFromCustomResource``), where the workload's own default (1) made its pods.
    return Request(
        _with_count(parent, kind.scale, new),
        namespace=request.namespace,
        operation="UPDATE",
        old_object=parent,
        namespace_labels=request.namespace_labels,
    )


def scale_decision(decision: Decision, request: Request, kinds: KindTable) -> Decision:
    """The parent's judgement as the scale's answer: each finding says which count it
    judged (the scale's, at the kind's ``specReplicasPath``), and nothing is patched (a
    patch of the parent cannot apply to a Scale)."""
    kind = scaled_kind(request, kinds)
    new = _count(request.object)
    if kind is None or new is None:
        return decision
    said = f"{_target(request, kind)} scaled to {new} replicas ({'.'.join(kind.scale)}): "
    findings = tuple(dataclasses.replace(f, message=said + f.message) for f in decision.findings)
    return dataclasses.replace(
        decision, findings=findings, patch=(), mutated=request.object, mutated_by=()
    )


def most_words(counted: Sequence[tuple[PodTemplate, int]]) -> str:
    """Which count each template was judged with where it was not its replica count:
    "Worker at 16 replicas (elasticPolicy.maxReplicas) x 8 GPUs", joined."""
    words = [
        f"{_member(t)} at {t.counted} replicas ({t.most_from}) x {gpus} GPUs"
        for t, gpus in counted
        if t.counted != t.replicas and gpus
    ]
    return ", ".join(words)


def _member(template: PodTemplate) -> str:
    named = [str(p) for p in template.path if p not in ("template", "spec")]
    return named[-1] if named else "pod"


def _target(request: Request, kind: WorkloadKind) -> str:
    resource = request.resource
    name = resource.name if resource is not None and resource.name else _name(request.object)
    return f"{kind.kind} {request.effective_namespace}/{name}"


def _unjudged(target: str, why: str, request: Request) -> Decision:
    new = _count(request.object)
    count = f"to {new} replicas " if new is not None else ""
    warning = (
        f"gpu-webhook did not judge this scale of {target} {count}against the GPU limits "
        f"(maxGPUsPerWorkload, cluster capacity): {why}."
    )
    return Decision(allowed=True, warnings=(warning,), mutated=request.object)


def _mismatch(parent: Mapping[str, Any], scale: Mapping[str, Any], kind: WorkloadKind) -> str:
    """Why the object read is not the one scaled: another kind, or another object of the
    same name (deleted and made again since the Scale was read)."""
    if parent.get("kind") != kind.kind:
        return f"the object read is a {parent.get('kind')!s:.60}, not a {kind.kind}"
    mine, theirs = _uid(parent), _uid(scale)
    if mine and theirs and mine != theirs:
        return f"the {kind.kind} read has uid {mine:.40}, the Scale names uid {theirs:.40}"
    return ""


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _count(scale: Mapping[str, Any] | None) -> int | None:
    """A Scale's ``spec.replicas`` (the API server validates it: ``ValidateScale``, >= 0).
    A scale to zero carries none: k8s.io/api autoscaling/v1 ``ScaleSpec.Replicas`` is
    ``json:"replicas,omitempty"``."""
    spec = scale.get("spec") if scale is not None else None
    if not isinstance(spec, Mapping):
        return None
    return _int(spec.get("replicas", 0))


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _with_count(obj: Mapping[str, Any], path: tuple[str, ...], count: int) -> dict[str, Any]:
    """``obj`` with ``count`` at ``path``, maps made where missing (as the API server's
    ``unstructured.SetNestedField`` does), copied along the path only."""
    out = dict(obj)
    node = out
    for part in path[:-1]:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, Mapping) else {}
        node = node[part]
    node[path[-1]] = count
    return out
