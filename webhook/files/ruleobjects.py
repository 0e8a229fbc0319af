"""Rule documents served by the API server (GPUPolicy objects, ...), merged with the files.

An object is a rule document like any in a file; what differs is who is told when it is
wrong. A broken file rejects the whole set (``rulefiles``), but a broken object is one
team's mistake: it alone is left out (or its last good version stays in force), the others
and the files stay in force, and its ``status`` says why. The same merge judges an object
at ``/validate`` before it is stored, so ``kubectl apply`` refuses what would be left out.

Order matters only for blame: the files first (they alone must compile, else the set is
rejected as before), then each object in (kind, name) order, and an object that makes the
set fail is the broken one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.policy.decision import MAX_MESSAGE, clipped_reasons, shorten
from webhook.engine.policy.ruleset import (
    DocumentRef,
    Policy,
    PolicyError,
    PolicyProblem,
    RuleDocument,
    compile_policy,
)
from webhook.engine.policy.schema import API_VERSION
from webhook.files.jsonvalues import oversized
from webhook.files.shipped import cuda_table, shipped_catalogue

OBJECT_SOURCE = "cluster"
Key = tuple[str, str]  # (kind, name)


@dataclass(frozen=True, slots=True)
class RuleObject:
    """One object as the webhook keeps it: its document, and what its status names."""

    kind: str
    name: str
    generation: int
    resource_version: str
    body: Mapping[str, Any]
    # The version in force when this one was found broken, as its status keeps it
    # (``status.inForce``): what a restarted server keeps in force meanwhile.
    kept: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, raw: Mapping[str, Any], *, kind: str = "") -> RuleObject:
        """From an API object (list items carry no kind: the caller knows it). Any JSON is
        taken: a ``metadata`` that is not a map (``[1]``, ``"x"``, ``7``, which anyone
        may post to ``/validate``) is kept as it is for the lint to refuse, never an
        ``AttributeError`` and an HTTP 500 (issue 41)."""
        given = raw.get("metadata")
        meta: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        kind = str(raw.get("kind") or kind)
        kept_meta = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
        body: dict[str, Any] = {
            "apiVersion": raw.get("apiVersion") or API_VERSION,
            "kind": kind,
            "metadata": kept_meta if given is None or given is meta else given,
            "spec": raw.get("spec") if "spec" in raw else {},
        }
        generation = meta.get("generation")
        status = raw.get("status")
        kept = status.get("inForce") if isinstance(status, Mapping) else None
        usable = (
            isinstance(kept, Mapping)
            and isinstance(kept.get("generation"), int)
            and isinstance(kept.get("spec"), Mapping)
            # Compiled without the lint (it was linted when in force): bounded all the same,
            # a status is anyone's with the status subresource (issue 41).
            and oversized(kept["spec"]) is None
        )
        return cls(
            kind=kind,
            name=_text(meta.get("name")),
            generation=generation if isinstance(generation, int) else 0,
            resource_version=_text(meta.get("resourceVersion")),
            body=body,
            kept=dict(kept) if usable and isinstance(kept, Mapping) else None,
        )

    def kept_version(self) -> RuleObject | None:
        """The version its status says was in force, as an object of its own."""
        if self.kept is None:
            return None
        body = {**self.body, "spec": self.kept["spec"]}
        return RuleObject(self.kind, self.name, self.kept["generation"], "", body)

    @property
    def key(self) -> Key:
        return (self.kind, self.name)

    @property
    def ref(self) -> DocumentRef:
        return DocumentRef(OBJECT_SOURCE, -1, self.kind, self.name)

    @property
    def document(self) -> RuleDocument:
        return RuleDocument(self.ref, self.body)

    def wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "generation": self.generation,
            "resource_version": self.resource_version,
            "body": self.body,
            "kept": self.kept,
        }

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> RuleObject:
        return cls(
            kind=str(raw["kind"]),
            name=str(raw["name"]),
            generation=int(raw["generation"]),
            resource_version=str(raw["resource_version"]),
            body=raw["body"],
            kept=raw.get("kept"),
        )


def _text(value: object) -> str:
    """A name as the lint and the messages show it: a string, or nothing (a name that is a
    list or a map is the lint's to refuse, not a repr to print)."""
    return value if isinstance(value, str) else ""


def objects_fingerprint(objects: Sequence[RuleObject]) -> str:
    """Changes when a document changes; not when only its status or resourceVersion does
    (a status write must not count as a change, or writing it would loop)."""
    digest = hashlib.sha256()
    for obj in sorted(objects, key=lambda o: o.key):
        digest.update(json.dumps([obj.key, obj.generation, obj.body], sort_keys=True).encode())
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Verdict:
    """Is an object in force, and if not, why (the lines ``rules lint`` prints)."""

    generation: int
    problems: tuple[str, ...] = ()
    # A broken object whose last good version stays in force: that version's generation.
    kept_generation: int | None = None

    @property
    def ready(self) -> bool:
        return not self.problems

    @property
    def message(self) -> str:
        if not self.problems:
            return "in force"
        said = clipped_reasons(self.problems, len(self.problems), see=SEE_THEM_ALL)
        if self.kept_generation is not None:
            return f"{said} (generation {self.kept_generation} stays in force)"
        return f"{said} (not in force)"


@dataclass(frozen=True, slots=True)
class Merged:
    policy: Policy
    verdicts: Mapping[Key, Verdict] = field(default_factory=dict)
    # The version of each object in force: what stays when a later version is broken.
    in_force: Mapping[Key, RuleObject] = field(default_factory=dict)
    # The files' documents, for judging a new object against them.
    file_documents: tuple[RuleDocument, ...] = ()


_NAME_CHARACTERS = 253
# Where a clipped message sends the reader for every problem of a rule object.
SEE_THEM_ALL = "run gpu-webhook rules lint on the object to see them all"


def rule_object_message(kind: str, name: str, problems: Sequence[str]) -> str:
    """Why ``/validate`` refuses a rule object: its problems, clipped as a pod's denials
    are (``status.message`` at most ``MAX_MESSAGE`` characters, then how many more)."""
    # A name is at most 253 characters once valid; the lint says what is wrong with longer.
    head = f"{shorten(kind, _NAME_CHARACTERS)} {shorten(name, _NAME_CHARACTERS)}: "
    limit = MAX_MESSAGE - len(head)
    return head + clipped_reasons(problems, len(problems), limit=limit, see=SEE_THEM_ALL)


def problem_lines(problems: Sequence[PolicyProblem]) -> tuple[str, ...]:
    """An object's problems as field path and message: the object is named by kubectl."""
    return tuple(f"{p.path}: {p.message}" if p.path else p.message for p in problems)


def _compile(documents: Sequence[RuleDocument]) -> Policy:
    return compile_policy(documents, catalogue=shipped_catalogue(), cuda_table=cuda_table())


# What a document alone is checked for (``rulefiles.schema_problems``, passed in by
# ``rulefiles``, which imports this module).
Lint = Callable[[Mapping[str, Any], DocumentRef], list[PolicyProblem]]


def _own_problems(
    obj: RuleObject, files: Mapping[Key, DocumentRef], lint: Lint
) -> list[PolicyProblem]:
    problems = lint(obj.body, obj.ref)
    defined = files.get(obj.key)
    if defined is not None:
        problems.append(
            PolicyProblem(
                obj.ref,
                "metadata.name",
                f"{obj.kind} {obj.name} is defined in the rule files too ({defined}): "
                "delete one of the two, or rename this object",
            )
        )
    return problems


def merge_objects(
    file_documents: Sequence[RuleDocument],
    objects: Sequence[RuleObject],
    *,
    lint: Lint,
    in_force: Mapping[Key, RuleObject] | None = None,
) -> Merged:
    """The policy of the files and the objects that fit with them.

    ``PolicyError`` only when the files alone do not compile; every object's trouble is in
    its verdict. ``in_force``: the versions that were in force before, kept for an object
    whose new version is broken."""
    kept = in_force or {}
    files = {(d.ref.kind, d.ref.name): d.ref for d in file_documents}
    ordered = sorted(objects, key=lambda o: o.key)
    problems = {obj.key: _own_problems(obj, files, lint) for obj in ordered}
    clean = [o for o in ordered if not problems[o.key]]
    accepted: list[RuleDocument] = [*file_documents, *(o.document for o in clean)]
    try:  # the usual case, in one compile: every object that passed its own checks fits
        policy = _compile(accepted)
    except PolicyError:
        accepted = list(file_documents)
        policy = _compile(accepted)  # files alone must compile, else the set is refused
        for obj in clean:  # which ones do not fit: each against those before it
            try:
                policy = _compile([*accepted, obj.document])
            except PolicyError as exc:
                problems[obj.key] = list(exc.problems)
            else:
                accepted.append(obj.document)
    verdicts: dict[Key, Verdict] = {}
    now_in_force: dict[Key, RuleObject] = {}
    for obj in ordered:
        if not problems[obj.key]:
            now_in_force[obj.key] = obj
            verdicts[obj.key] = Verdict(obj.generation)
            continue
        verdict = Verdict(obj.generation, problem_lines(problems[obj.key]))
        previous = kept.get(obj.key) or obj.kept_version()
        if previous is not None and previous.generation != obj.generation:
            try:
                policy = _compile([*accepted, previous.document])
            except PolicyError:
                pass
            else:
                accepted.append(previous.document)
                now_in_force[obj.key] = previous
                verdict = Verdict(obj.generation, verdict.problems, previous.generation)
        verdicts[obj.key] = verdict
    return Merged(policy, verdicts, now_in_force, tuple(file_documents))


def judge_object(
    file_documents: Sequence[RuleDocument],
    objects: Sequence[RuleObject],
    candidate: RuleObject,
    *,
    lint: Lint,
) -> tuple[str, ...]:
    """What is wrong with ``candidate`` beside the files and the other objects in force:
    what ``/validate`` refuses it for (empty: it would be in force)."""
    others = [o.document for o in objects if o.key != candidate.key]
    files = {(d.ref.kind, d.ref.name): d.ref for d in file_documents}
    problems = _own_problems(candidate, files, lint)
    if problems:
        return problem_lines(problems)
    try:
        _compile([*file_documents, *others, candidate.document])
    except PolicyError as exc:
        mine = [p for p in exc.problems if p.document == candidate.ref] or list(exc.problems)
        return problem_lines(mine)
    return ()
