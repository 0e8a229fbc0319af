"""What the current rules would say of objects that already exist: ``gpu-webhook audit``.

Admission sees only new objects. An audit judges existing ones as a CREATE would, so a team
can see what a policy would deny before it denies anything. A Deployment's 40 pods are one
question, not 40: objects owned (through ``ownerReferences``, controller first) by another
audited object are folded into it, and only the top owner is reported.

Memory stays bounded by what is reported, not by what is listed: a CPU-only pod that passes
leaves nothing behind but a count, and a pod whose owner is already known is not evaluated
at all. Listing workloads before pods (as the cluster source does) makes that the rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.engine.demand.gpus import pod_gpus
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.decision import Decision, Finding, Waiver
from webhook.engine.policy.ruleset import Policy
from webhook.engine.resources.devices import (
    DeviceInventory,
    claim_spec_from_json,
    is_dra_object,
)
from webhook.engine.scheduling.dra import gpu_names, pod_claims
from webhook.files.context import review_time
from webhook.reports.escape import terminal_text
from webhook.reports.findings import finding_json
from webhook.reports.inventory import table

Verdict = Literal["deny", "warn", "audit", "pass"]
VERDICTS: tuple[Verdict, ...] = ("deny", "warn", "audit", "pass")
# Owner chains are short (Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob); a longer
# one is a loop in hand-written files.
MAX_OWNER_DEPTH = 8
NamespaceLabels = Callable[[str], Mapping[str, str] | None]
# Judged on create as objects of their own (webhook.engine.evaluation.claimobjects).
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An audited object, as a PolicyReport's subject names it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any], *, namespace: str = "") -> ObjectRef:
        meta = _mapping(obj.get("metadata"))
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            namespace=namespace or str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or meta.get("generateName") or ""),
            uid=str(meta.get("uid") or ""),
        )

    def to_json(self) -> dict[str, str]:
        out = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
        }
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(slots=True)
class AuditEntry:
    """One reported object: its decision, and the objects folded into it by kind."""

    ref: ObjectRef
    source: str
    allowed: bool
    gpu: bool
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...]
    notices: tuple[str, ...]
    folded: Counter[str] = field(default_factory=Counter)
    owner: tuple[str, ...] = ()  # index keys of its controlling owner
    # Findings GPUPolicyExceptions waived (issue 44): who waived what.
    waivers: tuple[Waiver, ...] = ()

    @property
    def verdict(self) -> Verdict:
        if not self.allowed:
            return "deny"
        actions = {f.action for f in self.findings}
        if "warn" in actions or self.warnings:
            return "warn"
        return "audit" if "audit" in actions else "pass"

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.id for f in self.findings))

    @property
    def reportable(self) -> bool:
        """Worth a line and a report result: a finding, or a GPU object that passes."""
        return self.gpu or bool(self.findings) or bool(self.warnings)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.ref.to_json(),
            "source": self.source,
            "decision": self.verdict,
            "allowed": self.allowed,
            "gpu": self.gpu,
            "rules": list(self.rules),
            "findings": [finding_json(f) for f in self.findings],
            "warnings": list(self.warnings),
            "notices": list(self.notices),
            "folded": dict(sorted(self.folded.items())),
        }


@dataclass(frozen=True, slots=True)
class AuditSummary:
    objects: int  # every object of an audited kind that was seen
    reported: int  # objects with a line of their own (GPU objects and any with findings)
    folded: int  # objects counted in their owner's line
    verdicts: Mapping[str, int]  # over objects not folded
    errors: tuple[str, ...]
    unusable: int = 0  # files and documents that could not be read as objects
    # Issue 26: objects that would fail after admission, by check (AFTER_ADMISSION).
    after_admission: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "reported": self.reported,
            "folded": self.folded,
            **{v: self.verdicts.get(v, 0) for v in VERDICTS},
            "unusable": self.unusable,
            "errors": list(self.errors),
            "afterAdmission": {c: self.after_admission.get(c, 0) for c in AFTER_ADMISSION},
        }


# What still fails after the webhook says yes, counted per object: jobs whose pods can never
# all run at once, containers whose CUDA no node's driver has, GPU quota that is too small
# (a pod over what is left of its quota is counted by its notice).
AFTER_ADMISSION = {
    "gangFit": "cannot run all their pods at once",
    "cudaDriver": "need a newer CUDA driver than any node has",
    "gpuQuota": "exceed their namespace's GPU quota",
}


def _after_admission(entries: Iterable[AuditEntry]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for entry in entries:
        checks = {f.check for f in entry.findings if f.rule == "builtin"}
        if any(n.startswith("ResourceQuota ") for n in entry.notices):
            checks.add("gpuQuota")
        counts.update(c for c in checks if c in AFTER_ADMISSION)
    return dict(counts)


class Audit:
    """Judges objects one at a time and folds owned objects into their owners."""

    def __init__(
        self,
        *,
        policy: Policy,
        inventory: InventoryView,
        namespace_labels: NamespaceLabels | None = None,
    ) -> None:
        self.policy = policy
        self.inventory = inventory
        self._namespace_labels = namespace_labels
        self._by_key: dict[str, AuditEntry] = {}
        self._entries: list[AuditEntry] = []
        self._seen: Counter[str] = Counter()
        self._passed: Counter[str] = Counter()  # unreported objects that passed, by kind
        self._folded = 0
        self._owners_complete = False
        self.errors: list[str] = []

    def owners_complete(self) -> None:
        """Every possible owner has been added (a cluster audit lists workloads before
        pods): a pod whose owner is unknown now stays unowned, and a CPU-only one that
        passes need not be kept."""
        self._owners_complete = True

    def add(self, obj: Mapping[str, Any], *, source: str = "") -> None:
        """Judge one object as a CREATE, unless an owner already audited speaks for it."""
        kind = self.policy.kinds.lookup(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if kind is None:
            self._add_other(obj, source=source)
            return
        meta = _mapping(obj.get("metadata"))
        namespace = str(meta.get("namespace") or "default")
        self._seen[kind.kind] += 1
        owner = _owner_keys(meta, namespace)
        root = self._root(owner)
        if root is not None:
            # Most pods of a cluster end here, so nothing more is read of them.
            root.folded[kind.kind] += 1
            self._folded += 1
            if kind.kind != "Pod":  # its own children (a ReplicaSet's pods) fold there too
                for key in _own_keys(ObjectRef.of(obj)):
                    self._by_key[key] = root
            return
        ref = ObjectRef.of(obj)
        labels = self._namespace_labels(namespace) if self._namespace_labels else None
        decision = evaluate(
            Request(obj, namespace=namespace, namespace_labels=labels, now=review_time()),
            policy=self.policy,
            inventory=self.inventory,
        )
        # With a finding it is reported anyway; only a clean object is asked about GPUs.
        gpu = bool(decision.findings) or self._asks_for_gpus(obj, namespace)
        entry = _entry(ref, source=source, decision=decision, gpu=gpu, owner=owner)
        if not entry.reportable and kind.kind == "Pod" and (self._owners_complete or not owner):
            # A bare CPU-only pod that passes: nothing owns it and nothing can be folded
            # into it, so a count is all it costs.
            self._passed[kind.kind] += 1
            return
        self._entries.append(entry)
        for key in _own_keys(ref):
            self._by_key[key] = entry

    def _add_other(self, obj: Mapping[str, Any], *, source: str) -> None:
        """An object of no workload kind, counted as ``check`` counts it: a ResourceClaim
        or ResourceClaimTemplate is judged as the server judges it on create; anything
        else has no pod template and passes through."""
        label = str(obj.get("kind") or "object")
        self._seen[label] += 1
        if not (is_dra_object(obj) and label in CLAIM_KINDS):
            self._passed[label] += 1
            return
        namespace = str(_mapping(obj.get("metadata")).get("namespace") or "default")
        labels = self._namespace_labels(namespace) if self._namespace_labels else None
        decision = evaluate(
            Request(obj, namespace=namespace, namespace_labels=labels, now=review_time()),
            policy=self.policy,
            inventory=self.inventory,
        )
        gpu = bool(decision.findings) or self._claims_gpu_class(obj)
        entry = _entry(ObjectRef.of(obj), source=source, decision=decision, gpu=gpu, owner=())
        if not entry.reportable:
            self._passed[label] += 1
            return
        self._entries.append(entry)

    def _claims_gpu_class(self, obj: Mapping[str, Any]) -> bool:
        spec = _mapping(obj.get("spec"))
        if obj.get("kind") == "ResourceClaimTemplate":
            spec = _mapping(spec.get("spec"))
        settings = self.policy.settings
        _, is_gpu_class = gpu_names(
            settings.gpu_resources,
            is_gpu_class=settings.gpu_device_classes,
            devices=self.inventory.usable_devices,
        )
        return any(
            is_gpu_class(a.device_class)
            for r in claim_spec_from_json(spec).requests
            for a in r.alternatives
        )

    def _asks_for_gpus(self, obj: Mapping[str, Any], namespace: str) -> bool:
        settings = self.policy.settings
        # A name a GPU device class serves (KEP-5004) asks for GPUs too, and a class that
        # serves a GPU name is a GPU class: as the engine reads them.
        devices = self.inventory.usable_devices
        gpus, is_gpu_class = gpu_names(
            settings.gpu_resources, is_gpu_class=settings.gpu_device_classes, devices=devices
        )
        return any(
            (p := pod_gpus(t.spec, gpus)).total
            or p.problems
            or _claims_gpus(t.spec, namespace, devices, is_gpu_class)
            for t in self.policy.kinds.templates(obj) or ()
            if t.spec
        )

    def add_all(self, objects: Iterable[tuple[Mapping[str, Any], str]]) -> None:
        for obj, source in objects:
            self.add(obj, source=source)

    def _root(self, owner: tuple[str, ...]) -> AuditEntry | None:
        found: AuditEntry | None = None
        keys = owner
        for _ in range(MAX_OWNER_DEPTH):
            entry = next((self._by_key[k] for k in keys if k in self._by_key), None)
            if entry is None:
                break
            found, keys = entry, entry.owner
        return found

    def entries(self) -> list[AuditEntry]:
        """The reported entries, owners found after their children folded in first."""
        kept: list[AuditEntry] = []
        for entry in self._entries:
            root = self._root(entry.owner)
            if root is None or root is entry:
                kept.append(entry)
                continue
            root.folded[entry.ref.kind] += 1
            root.folded.update(entry.folded)
            entry.folded = Counter()
            self._folded += 1
            for key in _own_keys(entry.ref):
                self._by_key[key] = root
        self._entries = kept
        return sorted(
            (e for e in kept if e.reportable),
            key=lambda e: (e.ref.namespace, e.ref.kind, e.ref.name),
        )

    def summary(self) -> AuditSummary:
        entries = self.entries()
        verdicts: Counter[str] = Counter(e.verdict for e in self._entries)
        verdicts["pass"] += sum(self._passed.values())
        return AuditSummary(
            objects=sum(self._seen.values()),
            reported=len(entries),
            folded=self._folded,
            verdicts=dict(verdicts),
            errors=tuple(self.errors),
            after_admission=_after_admission(self._entries),
        )


def _claims_gpus(
    spec: Mapping[str, Any],
    namespace: str,
    devices: DeviceInventory | None,
    is_gpu_class: Callable[[str], bool],
) -> bool:
    """Whether the template's DRA claims ask for GPUs (as far as the inventory knows them)."""
    if not spec.get("resourceClaims"):
        return False
    claims = pod_claims(spec, namespace=namespace, devices=devices, is_gpu_class=is_gpu_class)
    return bool(claims.gpu_count)


def _entry(
    ref: ObjectRef, *, source: str, decision: Decision, gpu: bool, owner: tuple[str, ...]
) -> AuditEntry:
    return AuditEntry(
        ref=ref,
        source=source,
        allowed=decision.allowed,
        gpu=gpu,
        findings=decision.findings,
        warnings=tuple(
            w for w in decision.warnings if not any(w == f.warning for f in decision.findings)
        ),
        notices=decision.notices,
        owner=owner,
        waivers=decision.waivers,
    )


def _own_keys(ref: ObjectRef) -> tuple[str, ...]:
    by_name = f"{ref.namespace}/{ref.kind}/{ref.name}"
    return (f"uid:{ref.uid}", by_name) if ref.uid else (by_name,)


def _owner_keys(meta: Mapping[str, Any], namespace: str) -> tuple[str, ...]:
    """The controlling owner (or, in hand-written files, the first owner): by uid, and by
    namespace, kind and name for files whose objects carry no uid."""
    refs = [r for r in meta.get("ownerReferences") or [] if _is_map(r)]
    if not refs:
        return ()
    owner = next((r for r in refs if r.get("controller") is True), refs[0])
    keys = []
    if owner.get("uid"):
        keys.append(f"uid:{owner['uid']}")
    keys.append(f"{namespace}/{owner.get('kind', '')}/{owner.get('name', '')}")
    return tuple(keys)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_map(value: object) -> bool:
    return isinstance(value, dict)


def render_text(
    entries: Iterable[AuditEntry], summary: AuditSummary, *, sources: bool = False
) -> str:
    """One line per reported object (with its file and line when audited from files),
    then the totals."""
    head = ("NAMESPACE", "KIND", "NAME", "DECISION", "RULES", "INCLUDES")
    rows = [(*head, "SOURCE") if sources else head]
    for e in entries:
        includes = ", ".join(f"{n} {kind}" for kind, n in sorted(e.folded.items()))
        row = (
            e.ref.namespace,
            e.ref.kind,
            e.ref.name,
            e.verdict,
            ", ".join(e.rules) or "-",
            includes or "-",
        )
        rows.append((*row, e.source or "-") if sources else row)
    lines = table(rows) if len(rows) > 1 else ["  no GPU objects and no findings"]
    v = summary.verdicts
    unusable = f", {summary.unusable:,} unusable" if summary.unusable else ""
    objects = f"{summary.objects:,} {'object' if summary.objects == 1 else 'objects'}"
    lines += [
        "",
        f"{objects} audited, {summary.folded:,} folded into their owners: "
        f"{v.get('deny', 0):,} denied, {v.get('warn', 0):,} warned, "
        f"{v.get('audit', 0):,} audit only, {v.get('pass', 0):,} passed{unusable}",
    ]
    failing = [
        f"{summary.after_admission[c]:,} {text} ({c})"
        for c, text in AFTER_ADMISSION.items()
        if summary.after_admission.get(c)
    ]
    if failing:
        lines.append("would fail after admission: " + "; ".join(failing))
    return terminal_text(lines)
