"""Reading rule files: every problem at once, located by file, document and field path.

A directory of rules is all or nothing: a set with any error is rejected as a whole, so a
broken edit never replaces rules that work (``RuleStore`` keeps the last good set).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.engine.policy import schemasubset
from webhook.engine.policy.decision import MAX_REASON, shorten
from webhook.engine.policy.policytest import SUITE_KIND
from webhook.engine.policy.ruleset import (
    DocumentRef,
    Policy,
    PolicyError,
    PolicyProblem,
    RuleDocument,
    compile_policy,
)
from webhook.engine.policy.schema import (
    API_VERSION,
    DOCUMENT_KINDS,
    RENAMED_KINDS,
    qualified_name,
)
from webhook.files import celparser
from webhook.files.jsonvalues import (
    MAX_PROBLEMS,
    MAX_RULE_BYTES,
    MAX_SET_PROBLEMS,
    MORE_PROBLEMS,
    oversized,
)
from webhook.files.lastgood import LastGood
from webhook.files.manifests import ManifestError, decode, parse_text, read_bytes
from webhook.files.ruleobjects import (
    Key,
    Merged,
    RuleObject,
    judge_object,
    merge_objects,
    objects_fingerprint,
)
from webhook.files.shipped import cuda_table, shipped_catalogue

# JSON is read too: it is YAML, and a file silently skipped would be a rule not in force.
RULE_SUFFIXES = (".yaml", ".yml", ".json")
NO_DOCUMENTS = (
    "holds no rule documents; an empty rule set is never taken (an empty ConfigMap would "
    "turn every rule off). To run the built-in checks alone, write one GPUSettings document"
)

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    """jsonschema's validator of one kind, made (and jsonschema imported) only for a
    document ``schemasubset`` cannot call valid: it is what words the errors."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(DOCUMENT_KINDS[kind])


def _field_path(error: ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_TYPES = {
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "a map of fields",
}
_CHECK_OPTIONS = ("action", "message")


def _shown(value: object) -> str:
    """A value as the user wrote it in YAML, never as a Python repr."""
    if isinstance(value, Mapping):
        return "a map" if not value else f"a map ({', '.join(map(str, value))})"
    if isinstance(value, list):
        return "a list"
    return shorten(json.dumps(value), _SHOWN_CHARACTERS)


# A value quoted in a problem: enough to find it, never a whole long string again.
_SHOWN_CHARACTERS = 80


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean "x"?)' for the closest choice, case first, or nothing."""
    options = list(choices)
    folded = [c for c in options if c.lower() == word.lower()]
    close = folded or difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _explain(error: ValidationError) -> str:
    schema: Any = error.schema
    instance: Any = error.instance
    expected: Any = error.validator_value
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(instance) - set(allowed), key=str)
        unknown = "; ".join(f'unknown field "{e}"{did_you_mean(str(e), allowed)}' for e in extra)
        return f"{unknown}; the fields: {', '.join(allowed)}"
    if error.validator == "oneOf" and all(set(c) == {"required"} for c in expected):
        # A choice of one field among several (memoryLimit's fixed, perGPU, inventoryShare).
        modes = [name for c in expected for name in c["required"]]
        chosen = [name for name in modes if name in instance]
        if len(chosen) > 1:
            return f"{' and '.join(chosen)} conflict: give only one of {', '.join(modes)}"
        return f"give one of {', '.join(modes)}"
    if error.validator == "oneOf" and isinstance(instance, Mapping):
        checks = {next(iter(s.get("required", ["?"]))): s for s in expected}
        return _explain_check(instance, checks)
    if error.validator == "enum":
        choices = [str(c) for c in expected]
        hint = did_you_mean(instance, choices) if isinstance(instance, str) else ""
        return f"{_shown(instance)} is not one of {', '.join(choices)}{hint}"
    if error.validator == "const":
        return f"must be {_shown(expected)}, not {_shown(instance)}"
    if error.validator == "type":
        wanted = [str(t) for t in (expected if isinstance(expected, list) else [expected])]
        return f"{_shown(instance)} is not {' or '.join(_TYPES.get(t, t) for t in wanted)}"
    if error.validator == "minimum":
        return f"must be {expected} or more, not {_shown(instance)}"
    if error.validator == "maximum":
        return f"must be {expected} or less, not {_shown(instance)}"
    if error.validator == "maxProperties" and isinstance(instance, Mapping):
        fields = ", ".join(schema.get("properties", {}))
        given = " and ".join(sorted(map(str, instance)))
        return f"{given} conflict: give only one of {fields}"
    if error.validator == "minProperties":
        return f"give one of {', '.join(schema.get('properties', {}))}"
    if error.validator == "minItems":
        return "must not be an empty list"
    if error.validator == "minLength":
        return "must not be empty"
    if error.validator == "pattern" and schema.get("format") == "date-time":
        return f"{_shown(instance)} is not an RFC 3339 time such as 2027-01-31T18:00:00Z"
    if error.validator == "pattern":
        return f"{_shown(instance)} is not a valid name (lower-case letters, digits, - and .)"
    return error.message


def _explain_check(entry: Mapping[str, Any], checks: Mapping[str, Any]) -> str:
    """One entry of ``validate``: which check is wrong and how, not just that none fits."""
    names = [str(k) for k in entry if k not in _CHECK_OPTIONS]
    listing = f"the checks: {', '.join(checks)}"
    if not names:
        return f"no check in this entry; {listing}"
    unknown = [n for n in names if n not in checks]
    if unknown:
        return (
            "; ".join(f'unknown check "{n}"{did_you_mean(n, checks)}' for n in unknown)
            + f"; {listing}"
        )
    if len(names) > 1:
        return f"{' and '.join(names)} are two checks in one entry: give each its own entry"
    from jsonschema import Draft202012Validator

    problems = Draft202012Validator(checks[names[0]]).iter_errors(entry)
    return "; ".join(
        f"{_field_path(e)}: {_explain(e)}" if _field_path(e) else _explain(e)
        for e in sorted(problems, key=lambda e: list(map(str, e.absolute_path)))
    )


def _problem(error: ValidationError, ref: DocumentRef) -> PolicyProblem:
    return PolicyProblem(ref, *explained(error))


def explained(error: ValidationError) -> tuple[str, str]:
    """A schema error as rule files say it: the field's path, and what is wrong with it in
    the user's words (did-you-mean for unknown fields and values). Policy test suites
    (``webhook.files.policysuites``) are told their errors the same way."""
    path = _field_path(error)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        required: Any = error.validator_value
        missing = [str(r) for r in required if r not in error.instance]
        if missing:
            return (f"{path}.{missing[0]}" if path else missing[0]), "missing"
    # jsonschema's own words quote the value whole ("'aaa…' is too long"): clipped as a
    # pod's reasons are.
    return path, shorten(_explain(error), MAX_REASON)


def schema_problems(body: Mapping[str, Any], ref: DocumentRef) -> list[PolicyProblem]:
    """Every problem of a document at once: a wrong apiVersion does not hide a wrong kind
    or a wrong field."""
    problems = []
    if body.get("apiVersion") != API_VERSION:
        problems.append(PolicyProblem(ref, "apiVersion", f"must be {API_VERSION}"))
    schema = DOCUMENT_KINDS.get(ref.kind)
    if schema is None and ref.kind in RENAMED_KINDS:
        new, why = RENAMED_KINDS[ref.kind]
        return [
            *problems,
            PolicyProblem(ref, "kind", f"did you mean {new}? ({ref.kind} was {why})"),
        ]
    if schema is None and ref.kind == SUITE_KIND:
        # Kyverno keeps kyverno-test.yaml beside its policies; a rule directory is all rules.
        return [
            *problems,
            PolicyProblem(
                ref,
                "kind",
                f"{SUITE_KIND} is a policy test suite (gpu-webhook test), not a rule document: "
                "keep suites outside the rule directory (its subdirectories are not read)",
            ),
        ]
    if schema is None:
        close = difflib.get_close_matches(str(ref.kind), list(DOCUMENT_KINDS), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        kinds = ", ".join(DOCUMENT_KINDS)
        return [*problems, PolicyProblem(ref, "kind", f"must be one of {kinds}{hint}")]
    too_large = oversized(body)
    if too_large is not None:  # refused unlinted: the lint's work grows with the document
        return [*problems, PolicyProblem(ref, *too_large)]
    if schemasubset.valid(schema, body):
        return problems  # what jsonschema would find: nothing
    errors = _first_errors(_validator(ref.kind), body)
    said = {p.path for p in problems}
    found = [_problem(e, ref) for e in errors[:MAX_PROBLEMS]]
    if len(errors) > MAX_PROBLEMS:
        found.append(PolicyProblem(ref, "", MORE_PROBLEMS))
    return [*problems, *(p for p in found if p.path not in said)]


def _first_errors(validator: Draft202012Validator, body: Mapping[str, Any]) -> list[Any]:
    """The first ``MAX_PROBLEMS`` + 1 schema errors, by field: jsonschema finds them one by
    one, so the walk stops there instead of collecting every failed ``oneOf`` try of
    every entry (issue 41)."""
    first = itertools.islice(validator.iter_errors(body), MAX_PROBLEMS + 1)
    return sorted(first, key=lambda e: list(map(str, e.absolute_path)))


def shipped_rules() -> Path:
    """The default policy installed with the command (``webhook/data/rules``, a link to the
    repository's ``rules/`` that the wheel carries as package data), for use outside a
    checkout."""
    from importlib import resources  # only here: it imports zipfile and tempfile

    return Path(str(resources.files("webhook").joinpath("data", "rules")))


def rule_file_paths(directory: str) -> list[Path]:
    """The rule files of a directory, or the one file given."""
    root = Path(directory)
    if root.is_file():
        return [root]
    # Kubernetes mounts ConfigMaps with hidden ..data/..timestamp entries: skip dot names.
    return sorted(
        p
        for p in root.iterdir()
        if p.suffix in RULE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


@dataclass(frozen=True, slots=True)
class RuleFiles:
    """The rule files of a directory, each read once.

    The fingerprint is taken of these bytes and the policy compiled from the same bytes, so
    the rules in force are always the rules their fingerprint names. A file rewritten in
    place while it is read (``cp`` and ``cat >`` truncate, then write) is compiled as it
    was read, torn or not, and the next poll sees its new bytes as a change. (Reading the
    files once to hash and again to compile let a rewrite between the two leave the old
    rules in force under the new fingerprint, with no further reload.)
    """

    # Each file with its bytes, or why it could not be read.
    files: tuple[tuple[Path, bytes | ManifestError], ...]
    # Why the directory itself could not be listed, if it could not.
    problem: str = ""

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.problem.encode())
        for path, data in self.files:
            digest.update(path.name.encode())
            digest.update(data if isinstance(data, bytes) else str(data).encode())
        return digest.hexdigest()

    def contents(self) -> list[tuple[str, bytes]]:
        """Name and bytes of each file read."""
        return [(path.name, data) for path, data in self.files if isinstance(data, bytes)]


def read_rule_files(directory: str) -> RuleFiles:
    try:
        paths = rule_file_paths(directory)
    except FileNotFoundError:
        return RuleFiles((), f"{directory}: no such directory")
    except NotADirectoryError:
        return RuleFiles((), f"{directory}: not a directory")
    except OSError as exc:
        return RuleFiles((), f"{directory}: cannot be read: {exc.strerror}")
    read: list[tuple[Path, bytes | ManifestError]] = []
    left = MAX_RULE_BYTES
    for path in paths:
        if path.suffix not in RULE_SUFFIXES:
            read.append((path, b""))  # refused unread by ``read_documents``
            continue
        data, error = read_bytes(str(path), limit=left, too_large=_too_many_bytes(left))
        read.append((path, data if data is not None else error or ManifestError(str(path), "")))
        left -= len(data or b"")
    return RuleFiles(tuple(read))


def _too_many_bytes(left: int) -> str:
    """Why a rule file is refused unread (issue 41): a rule set is parsed and linted by
    every worker at start and on each reload, so its bytes are bounded before that work."""
    besides = "" if left == MAX_RULE_BYTES else f" (the files before it leave {left:,} bytes)"
    return (
        f"the rule files hold more than {MAX_RULE_BYTES // 1024:,} KiB together{besides}, "
        "more than a ConfigMap can: the rules are refused unread; shorten them"
    )


def read_documents(files: RuleFiles) -> tuple[list[RuleDocument], list[PolicyProblem]]:
    documents: list[RuleDocument] = []
    problems: list[PolicyProblem] = []
    if files.problem:
        return [], [PolicyProblem(None, "", files.problem)]
    for path, data in files.files:
        if path.suffix not in RULE_SUFFIXES:
            suffixes = ", ".join(RULE_SUFFIXES)
            problems.append(PolicyProblem(None, "", f"{path}: not a rule file ({suffixes})"))
            continue
        if not isinstance(data, bytes):
            problems.append(PolicyProblem(None, "", str(data)))
            continue
        text, error = decode(data, str(path))
        if error is not None or text is None:
            problems.append(PolicyProblem(None, "", str(error)))
            continue
        docs, errors = parse_text(text, str(path))
        problems.extend(PolicyProblem(None, "", str(e)) for e in errors)
        for doc in docs:
            if len(problems) >= MAX_SET_PROBLEMS:  # the lint stops: bounded work and output
                return documents, [*problems, PolicyProblem(None, "", MORE_PROBLEMS)]
            kind = doc.obj.get("kind")
            kind = kind if isinstance(kind, str) and kind else "no kind"
            name = qualified_name(kind, doc.obj.get("metadata"))
            ref = DocumentRef(str(path), doc.index, kind, name)
            found = schema_problems(doc.obj, ref)
            problems.extend(found)
            if not found:
                documents.append(RuleDocument(ref, doc.obj))
    return documents, problems


def load_policy(directory: str) -> Policy:
    """The policy in ``directory``; ``PolicyError`` lists every problem in every file."""
    return compile_rule_files(read_rule_files(directory), directory=directory)


_UNEXPECTED = (RecursionError, ValueError, TypeError, KeyError, AttributeError, IndexError)


def compile_rule_files(files: RuleFiles, *, directory: str) -> Policy:
    return compile_rules(files, directory=directory).policy


def compile_rules(
    files: RuleFiles,
    *,
    directory: str,
    objects: Sequence[RuleObject] = (),
    in_force: Mapping[Key, RuleObject] | None = None,
) -> Merged:
    """The policy of the files as read, with the objects that fit (``ruleobjects``);
    ``PolicyError`` lists every problem in every file.

    A directory without a single rule document is refused: it is far more often an empty
    or half-written ConfigMap than a choice, and taking it would silently drop every
    toleration and setting (plain GPU pods would then be denied as unable to fit on the
    tainted GPU nodes). Wanting the built-in checks only is said with one ``GPUSettings``
    document."""
    # Every policy is compiled here (CLI, server, hot reload): the one place that needs the
    # engine's selectors to find the cached CEL parser, and no command without rules pays.
    celparser.register()
    try:
        documents, problems = read_documents(files)
        if not documents and not problems:
            problems.append(PolicyProblem(None, "", f"{directory}: {NO_DOCUMENTS}"))
        if problems:  # and the semantic problems of the documents that passed, all at once
            try:
                compile_policy(documents, catalogue=shipped_catalogue(), cuda_table=cuda_table())
            except PolicyError as exc:
                problems.extend(exc.problems)
            raise PolicyError(problems)
        return merge_objects(documents, objects, lint=schema_problems, in_force=in_force)
    except _UNEXPECTED as exc:
        # What the readers let through and the compiler trips on is still a broken rule
        # set: one line, counted as a failed reload, never a traceback (issue 35).
        shown = f"{type(exc).__name__}: {str(exc)[:120]}"
        raise PolicyError(
            [PolicyProblem(None, "", f"{directory}: the rule files are not usable ({shown})")]
        ) from None


def fingerprint(directory: str) -> str:
    """Changes when any rule file's name or content changes, including a ConfigMap's
    symlink swap, which replaces files without events on the files themselves."""
    return read_rule_files(directory).fingerprint


@dataclass(frozen=True, slots=True)
class RuleSet:
    policy: Policy
    fingerprint: str
    generation: int


ObjectSupplier = Callable[[], Sequence[RuleObject] | None]


class RuleStore:
    """The rules in force: replaced atomically by a valid new set, kept on a broken one.

    With ``last_good`` (a server's), every set loaded is also kept there, and a store that
    finds the files broken when it starts takes the last good set from there instead of
    failing: a worker started after a broken edit serves what its siblings serve. Its
    first ``reload_if_changed`` then reports the files on disk as rejected.

    With ``objects`` (a live server's: the rule objects the API server serves, None until
    listed), each reload merges them in (``ruleobjects``), and ``merged.verdicts`` says which are
    in force.
    """

    def __init__(
        self,
        directory: str,
        *,
        last_good: LastGood | None = None,
        objects: ObjectSupplier | None = None,
    ) -> None:
        self.directory = os.fspath(directory)
        self.last_good = last_good
        self.objects = objects
        self._lock = threading.Lock()
        self.last_error: PolicyError | None = None
        self.failed_fingerprint = ""
        self.merged = Merged(Policy())
        self._objects_seen = False
        self._merged_objects = False
        try:
            policy, seen = self._load()
        except PolicyError:
            kept = self._last_good_policy()
            if kept is None:
                raise
            policy, seen = kept, ""  # "": the files on disk are judged at the first reload
        self.current = RuleSet(policy, seen, 1)

    def _objects(self) -> tuple[RuleObject, ...]:
        found = None if self.objects is None else self.objects()
        if found is not None:
            self._objects_seen = True
        return tuple(found or ())

    @property
    def objects_merged(self) -> bool:
        """The rule objects were listed and merged at least once (or there are none to
        wait for): until then a server would judge without the cluster's policies."""
        return self.objects is None or self._merged_objects

    def _fingerprint(self, files: RuleFiles, objects: Sequence[RuleObject]) -> str:
        if self.objects is None:
            return files.fingerprint
        return f"{files.fingerprint}:{objects_fingerprint(objects)}"

    def _load(
        self, files: RuleFiles | None = None, objects: Sequence[RuleObject] | None = None
    ) -> tuple[Policy, str]:
        """The policy of the files (read now unless given) and the fingerprint of exactly
        the bytes it was compiled from; the same bytes are kept as the last good set."""
        if files is None:
            files = read_rule_files(self.directory)
        if objects is None:
            objects = self._objects()
        seen = self._objects_seen
        merged = compile_rules(
            files, directory=self.directory, objects=objects, in_force=self.merged.in_force
        )
        self.merged = merged
        self._merged_objects = seen
        if self.last_good is not None:
            with contextlib.suppress(OSError):  # serving matters more than the copy
                self.last_good.save_rules(files.contents())
        return merged.policy, self._fingerprint(files, objects)

    def judge(self, candidate: RuleObject) -> tuple[str, ...]:
        """What keeps ``candidate`` out of force beside the files and objects in force now
        (empty: it would be in force): what ``/validate`` refuses it for."""
        merged = self.merged
        return judge_object(
            merged.file_documents,
            list(merged.in_force.values()),
            candidate,
            lint=schema_problems,
        )

    def _last_good_policy(self) -> Policy | None:
        if self.last_good is None:
            return None
        for _ in range(3):  # a sibling may swap in a newer copy while this one reads
            kept = self.last_good.rules()
            if kept is None:
                return None
            try:
                return load_policy(str(kept))
            except PolicyError:
                continue
        return None

    def reload_if_changed(self) -> bool | None:
        """True: reloaded; False: the new files are broken (old rules kept); None: no change."""
        with self._lock:
            files = read_rule_files(self.directory)
            objects = self._objects()
            seen = self._fingerprint(files, objects)
            first_objects = self._objects_seen and not self._merged_objects
            if seen == self.current.fingerprint and not first_objects:
                # Broken files put back as they were: nothing on disk is rejected any more.
                self.last_error, self.failed_fingerprint = None, ""
                return None
            if seen == self.failed_fingerprint and not first_objects:
                return None
            try:
                policy, seen = self._load(files, objects)
            except PolicyError as exc:
                self.last_error = exc
                self.failed_fingerprint = seen
                # Broken files keep the last good rules, without the objects: waiting for
                # files that may never be fixed would leave the server unready for good.
                self._merged_objects = self._objects_seen
                return False
            self.current = RuleSet(policy, seen, self.current.generation + 1)
            self.last_error = None
            self.failed_fingerprint = ""
            return True
