"""The admission service: which requests the engine judges, and the answer it sends.

Short-circuits, in order (each answered ``allowed`` with no patch):
- operations other than CREATE and UPDATE (DELETE, CONNECT);
- subresources (``status``, ``binding``, ``eviction``, ``exec``, ...) but a Pod's
  ``ephemeralcontainers`` and ``resize`` and a workload's ``scale``: ``kubectl debug`` adds
  a container to a running pod there, and a resize changes its cpu and memory
  (``ValidatePodResize``; its memory limits are judged against the memory rules); the API
  server sends the whole Pod for both. ``status`` and ``binding`` change no container. A
  ``scale`` UPDATE (``kubectl scale``, an HPA) carries an ``autoscaling/v1`` Scale, no
  template: the parent is read within the review's lookup budget and judged with the new
  count (``webhook.engine.evaluation.scale``), never memoised (the Scale does not hold what
  is judged);
- kinds without a pod template the engine knows (``Decision.understood`` is False).

A Pod UPDATE is judged on what it changes (``webhook.engine.evaluation.updates``): an added
toleration, a gated pod's node selection, labels and annotations that env reads.

``/mutate`` and ``/validate`` run the same evaluation; ``/mutate`` also returns the patch.
Both return denials: the API server rejects requests-only and fractional GPU pods right
after the mutating phase, so only a denial from ``/mutate`` reaches the user first.
``dryRun`` changes nothing here: the service has no side effects to skip.

An object the engine cannot read (ill-typed fields that only a custom resource can carry at
this point) is denied with a message that says so, and logged with its traceback: an HTTP
500 would tell the user nothing but "failed calling webhook".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.admission.inventory import InventorySource, view_of
from webhook.admission.lookups import ClusterReader, looked_up, with_parent, worth_a_read
from webhook.admission.memo import DecisionMemo, Judgement
from webhook.admission.response import Answer, PatchTooLarge, Verdict, reply
from webhook.admission.review import AdmissionRequest
from webhook.engine.evaluation.evaluate import evaluate, policy_findings
from webhook.engine.evaluation.request import Request, Resource
from webhook.engine.evaluation.scale import SCALE
from webhook.engine.policy.crds import GROUP
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.exemptions import exemption_warnings
from webhook.engine.policy.ruleset import Policy, PolicyError, compile_policy
from webhook.engine.policy.schema import DOCUMENT_KINDS, NAMESPACED_KINDS
from webhook.engine.scheduling.policyvalues.labelkeys import label_warnings
from webhook.engine.scheduling.policyvalues.policyreach import Unmet
from webhook.files.rulefiles import RuleSet, RuleStore
from webhook.files.ruleobjects import RuleObject, rule_object_message

log = logging.getLogger("gpu_webhook.service")
UNREADABLE = (
    "gpu-webhook could not evaluate this object ({error}). Its pod template is probably "
    "malformed (a field of the wrong type); fix it, or report a bug if the object is valid."
)
FailureMode = Literal["allow", "deny"]
_ENGINE_ERRORS = (RecursionError, ValueError, TypeError, AttributeError, KeyError, IndexError)


NOT_SYNCED = "node inventory not synced yet"
OBJECTS_NOT_MERGED = "rule objects (GPUPolicy, ...) not merged yet"


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Outcome:
    """One review's answer: its uid, and the ``Answer`` (shared by the replicas of a pod)."""

    uid: str
    answer: Answer

    def encode(self) -> bytes:
        return self.answer.reply.encode(self.uid)

    @property
    def body(self) -> dict[str, Any]:
        """The answer as the API server reads it."""
        return self.answer.reply.body(self.uid)

    @property
    def verdict(self) -> Verdict:
        return self.answer.verdict


class AdmissionService:
    """Answers reviews with the rules in force and the inventory as it is right now."""

    def __init__(
        self,
        *,
        rules: RuleStore,
        inventory: InventorySource | None = None,
        inventory_failure_mode: FailureMode | None = None,
        memo: DecisionMemo | None = None,
        cluster: ClusterReader | None = None,
    ) -> None:
        self.rules = rules
        # Reads what the live view has not seen yet (webhook.admission.lookups); None for a
        # static inventory, which is all there is.
        self.cluster = cluster
        self.inventory = inventory
        self.inventory_failure_mode = inventory_failure_mode
        self._policy_for: tuple[RuleSet, Policy] | None = None
        self.memo = DecisionMemo() if memo is None else memo
        self._labels_judged: tuple[object, ...] = ()
        self.label_warnings: tuple[str, ...] = ()
        self._exemptions_judged: tuple[object, ...] = ()
        self.exemption_warnings: tuple[str, ...] = ()
        self._values_judged: tuple[object, ...] = ()
        # The rule values nothing in the cluster has (issue 42): logged, and the metric's.
        self.unmet: tuple[Unmet, ...] = ()
        self.warn_unlabelled()
        self.warn_exemptions()
        self.warn_unmet()

    def review(self, request: AdmissionRequest, *, mutate: bool) -> Outcome:
        skip = _skip_reason(request)
        if skip:
            return Outcome(request.uid, _skipped(skip))
        if request.group == GROUP and request.kind in DOCUMENT_KINDS:
            return Outcome(request.uid, self._judge_rule_object(request, mutate=mutate))
        ruleset = self.rules.current
        try:
            judgement = self._judge(request, ruleset)
        except _ENGINE_ERRORS as exc:
            # The engine expects objects the API server has decoded; a custom resource may
            # still carry ill-typed fields at /mutate (its schema is checked afterwards).
            log.exception("engine failed on %s %s", request.kind, request.uid)
            error = f"{type(exc).__name__}: {str(exc)[:100]}"
            unreadable = reply(allowed=False, message=UNREADABLE.format(error=error))
            return Outcome(
                request.uid, Answer(unreadable, "error", rules_generation=ruleset.generation)
            )
        answer = judgement.answers.get(mutate)
        if answer is None:
            answer = _answer(judgement.decision, mutate=mutate, generation=ruleset.generation)
            self.memo.keep_answer(judgement, mutate=mutate, answer=answer)
        return Outcome(request.uid, answer)

    def _judge_rule_object(self, request: AdmissionRequest, *, mutate: bool) -> Answer:
        """A GPUPolicy (or other rule object) is refused for what ``rules lint`` would
        say of it beside the files and the objects in force, so that ``kubectl apply``
        fails with the same lines; the mutating webhook leaves such objects alone."""
        if mutate:
            return _skipped("kind")
        raw = request.object or {}
        meta = raw.get("metadata")
        if (
            request.kind in NAMESPACED_KINDS
            and request.namespace
            and isinstance(meta, dict)
            and not meta.get("namespace")
        ):
            raw = {**raw, "metadata": {**meta, "namespace": request.namespace}}
        generation = self.rules.current.generation
        try:
            candidate = RuleObject.of(raw, kind=request.kind)
            problems = self.rules.judge(candidate)
        except _ENGINE_ERRORS as exc:
            # As for a pod the engine cannot read: a denial that says so, never a 500.
            log.exception("rule object lint failed on %s %s", request.kind, request.uid)
            problems = (f"not usable ({type(exc).__name__}: {str(exc)[:100]})",)
            candidate = RuleObject(request.kind, "", 0, "", {})
        if not problems:
            warnings = [u.core for u in self._unmet_of(candidate)]
            return Answer(
                reply(allowed=True, warnings=warnings), "allowed", rules_generation=generation
            )
        message = rule_object_message(request.kind, candidate.name, problems)
        return Answer(reply(allowed=False, message=message), "denied", rules_generation=generation)

    def _unmet_of(self, candidate: RuleObject) -> list[Unmet]:
        """What ``policy_findings`` says of a GPUPolicy object about to be applied, on the
        cluster this server sees: ``kubectl apply`` prints it as a warning, and the object
        is stored (a value no node has may be a GPU not bought yet)."""
        if candidate.kind != "GPUPolicy":
            return []
        try:
            alone = compile_policy([candidate.document])
        except PolicyError:
            return []  # judged above: not reached for an object with problems
        current = self._policy(self.rules.current)
        policy = dataclasses.replace(current, rules=alone.rules, settings=current.settings)
        namespaces = _namespace_names(self.inventory)
        return policy_findings(policy, view_of(self.inventory), namespaces=namespaces)

    def _judge(self, request: AdmissionRequest, ruleset: RuleSet) -> Judgement:
        engine_request = Request(
            request.object or {},
            namespace=request.namespace,
            operation=request.operation,
            old_object=request.old_object,
            namespace_labels=self._namespace_labels(request.namespace),
            sub_resource=request.sub_resource,
            resource=Resource(
                request.resource_group, request.resource_version, request.resource, request.name
            ),
            now=dt.datetime.now(dt.UTC),  # what a GPUPolicyException's expiry is judged by
        )
        policy, view = self._policy(ruleset), view_of(self.inventory)
        if request.sub_resource == SCALE:
            scaled = with_parent(engine_request, policy=policy, reader=self.cluster)
            return Judgement(evaluate(scaled, policy=policy, inventory=view))
        judgement = self.memo.judge(engine_request, policy=policy, inventory=view)
        if self.cluster is None or not worth_a_read(
            engine_request, judgement.decision, policy=policy
        ):
            return judgement
        read = looked_up(engine_request, view, policy=policy, reader=self.cluster)
        if read is None:
            return judgement
        # Judged with objects read for this review only: not a memo's answer for replicas
        # judged on the view alone.
        return Judgement(evaluate(read[0], policy=policy, inventory=read[1]))

    def kind_label(self, request: AdmissionRequest) -> str:
        """The request's kind as a metric label: one of the kinds the rules know, else
        ``other``. The kind comes from the request, and a label set that any caller can
        grow would grow the metrics files, every scrape and every readiness probe."""
        if self.rules.current.policy.kinds.knows(request.group, request.kind):
            return request.kind
        return "other"

    def warn_unlabelled(self) -> tuple[str, ...]:
        """Log each rule that keys on a node label no GPU node carries (a DRA-only cluster
        has no GPU feature discovery labels: issue 31), once, at start and whenever the
        rules or the cluster view change; called with every readiness check (the reloader
        asks every few seconds)."""
        policy = self.rules.current.policy
        view = view_of(self.inventory)
        judged = (policy, view.snapshot, view.devices)
        # By identity: a reload or a new snapshot is a new object, and equality of two
        # inventories would cost as much as the warnings themselves.
        if self._labels_judged and all(
            a is b for a, b in zip(judged, self._labels_judged, strict=True)
        ):
            return self.label_warnings
        self._labels_judged = judged
        warnings = tuple(str(w) for w in label_warnings(policy, view.snapshot, view.devices))
        for warning in warnings:
            if warning not in self.label_warnings:
                log.warning("rule keys on a node label no GPU node carries: %s", warning)
        self.label_warnings = warnings
        return warnings

    def warn_exemptions(self) -> tuple[str, ...]:
        """Log each exemption by namespace name that a namespace creator could take (the
        name does not exist, or is a pattern: issue 41), once, at start and whenever the
        rules or the namespaces change. Names are checked only where the namespaces are
        watched (a live inventory); a static inventory holds none."""
        policy = self.rules.current.policy
        namespaces = _namespaces(self.inventory)
        size = None if namespaces is None else len(namespaces)
        judged = self._exemptions_judged
        # By identity and size: the watcher's feed sends a new mapping at each change; an
        # in-process watch changes its own, and adds or drops a name with the size.
        if judged and judged[0] is policy and judged[1] is namespaces and judged[2] == size:
            return self.exemption_warnings
        self._exemptions_judged = (policy, namespaces, size)
        warnings = tuple(str(w) for w in exemption_warnings(policy, namespaces))
        for warning in warnings:
            if warning not in self.exemption_warnings:
                log.warning("an exemption a namespace creator could take: %s", warning)
        self.exemption_warnings = warnings
        return warnings

    def warn_unmet(self) -> tuple[Unmet, ...]:
        """Log each rule value that nothing in the cluster has (``policy_findings``), once,
        at start and whenever the rules (files or objects) or the cluster view change; the
        reloader asks with every readiness check and sets the metric from ``unmet``."""
        policy = self.rules.current.policy
        view = view_of(self.inventory)
        namespaces = _namespace_names(self.inventory)
        judged = (policy, view.snapshot, view.devices, view.pools, view.runtime_classes)
        if (
            self._values_judged
            and all(a is b for a, b in zip(judged, self._values_judged[:-1], strict=True))
            and namespaces == self._values_judged[-1]
        ):
            return self.unmet
        self._values_judged = (*judged, namespaces)
        found = tuple(policy_findings(policy, view, namespaces=namespaces))
        before = {u.message for u in self.unmet}
        for unmet in found:
            if unmet.message not in before:
                log.warning(
                    "rule value matches nothing in the cluster: %s",
                    unmet.message,
                    extra={"rule": unmet.rule, "source": unmet.source, "path": unmet.path},
                )
        self.unmet = found
        return found

    def ready(self) -> tuple[bool, str]:
        """Rules are loaded once the service exists; a live inventory must have synced."""
        self.warn_unlabelled()
        self.warn_exemptions()
        self.warn_unmet()
        if self.inventory is not None and not self.inventory.ready():
            return False, NOT_SYNCED
        if not self.rules.objects_merged:
            return False, OBJECTS_NOT_MERGED
        return True, f"rules generation {self.rules.current.generation}"

    def _policy(self, ruleset: RuleSet) -> Policy:
        """The rule set's policy, with the operator's failure-mode override applied once
        per rule set (the engine memoises per policy object, so keep it stable)."""
        if self.inventory_failure_mode is None:
            return ruleset.policy
        memo = self._policy_for
        if memo is not None and memo[0] is ruleset:
            return memo[1]
        policy = ruleset.policy
        settings = dataclasses.replace(
            policy.settings, inventory_failure_mode=self.inventory_failure_mode
        )
        overridden = dataclasses.replace(policy, settings=settings)
        self._policy_for = (ruleset, overridden)
        return overridden

    def _namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        if self.inventory is None or not namespace:
            return None
        return self.inventory.namespace_labels(namespace)


# Pod subresources the engine judges: ``kubectl debug``'s new containers, and in-place
# resizes (``pods/resize``: memory limits against the memory rules). Both carry the whole
# Pod, old and new.
JUDGED_SUBRESOURCES = ("ephemeralcontainers", "resize")


def _namespaces(source: InventorySource | None) -> Mapping[str, Mapping[str, str]] | None:
    listed = getattr(source, "namespaces", None)
    found: Mapping[str, Mapping[str, str]] | None = listed() if listed is not None else None
    return found


def _namespace_names(source: InventorySource | None) -> frozenset[str] | None:
    """The namespaces a rule's ``match.namespaces`` are checked against; None: not known."""
    found = _namespaces(source)
    return None if found is None else frozenset(found)


def _skip_reason(request: AdmissionRequest) -> str:
    if request.operation not in ("CREATE", "UPDATE"):
        return "operation"
    if request.sub_resource == SCALE and request.operation == "UPDATE":
        return ""  # the engine passes through the scales of kinds it does not know
    if request.sub_resource and not (
        request.sub_resource in JUDGED_SUBRESOURCES
        and request.kind == "Pod"
        and request.group == ""
        and request.operation == "UPDATE"
    ):
        return "subresource"
    return ""


_SKIPPED: dict[str, Answer] = {}


def _skipped(reason: str) -> Answer:
    answer = _SKIPPED.get(reason)
    if answer is None:
        answer = _SKIPPED[reason] = Answer(reply(allowed=True), "skipped", skipped_because=reason)
    return answer


def _answer(decision: Decision, *, mutate: bool, generation: int) -> Answer:
    if not decision.understood:
        return _skipped("kind")
    patch = decision.patch if mutate and decision.allowed else ()
    try:
        encoded = reply(
            allowed=decision.allowed,
            message="" if decision.allowed else decision.message,
            patch=patch,
            warnings=decision.warnings,
            audit=decision.audit,
        )
    except PatchTooLarge as too_large:  # the patched object could not be stored anyway
        denial = reply(allowed=False, message=str(too_large), warnings=decision.warnings)
        return Answer(denial, "denied", findings=decision.findings, rules_generation=generation)
    return Answer(
        encoded,
        "allowed" if decision.allowed else "denied",
        findings=decision.findings,
        warnings=decision.warnings,
        patch_ops=len(patch),
        rules_generation=generation,
        mutated_by=decision.mutated_by if patch else (),
        exceptions=tuple(dict.fromkeys(w.exception for w in decision.waivers)),
    )
