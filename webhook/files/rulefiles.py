"""Reading rule files: every problem at once, located by file, document and field path.

A directory of rules is all or nothing: a set with any error is rejected as a whole, so a
broken edit never replaces rules that work (``RuleStore`` keeps the last good set).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from webhook.engine.policy import (
    DocumentRef,
    Policy,
    PolicyError,
    PolicyProblem,
    RuleDocument,
    compile_policy,
)
from webhook.engine.schema import API_VERSION, DOCUMENT_KINDS
from webhook.files.manifests import parse_text, read_source

RULE_SUFFIXES = (".yaml", ".yml")
_VALIDATORS = {kind: Draft202012Validator(schema) for kind, schema in DOCUMENT_KINDS.items()}


def _field_path(error: ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _explain(error: ValidationError) -> str:
    schema: Any = error.schema
    instance: Any = error.instance
    if error.validator == "additionalProperties":
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        allowed = ", ".join(sorted(schema.get("properties", {})))
        return f"unknown field {', '.join(map(repr, extra))} (allowed: {allowed})"
    choices: Any = error.validator_value
    if error.validator == "oneOf" and all(set(c) == {"required"} for c in choices):
        # A choice of one field among several (memoryLimit's fixed, perGPU, inventoryShare).
        fields = ", ".join(name for c in choices for name in c["required"])
        return f"set exactly one of {fields}"
    if error.validator == "oneOf" and isinstance(error.instance, Mapping):
        names = [k for k in error.instance if k not in ("action", "message")]
        return f"unknown or ambiguous check {', '.join(names) or '(none)'}"
    if error.validator == "enum":
        allowed_values: Any = error.validator_value
        return f"{instance!r} is not one of {', '.join(map(str, allowed_values))}"
    return error.message


def schema_problems(body: Mapping[str, Any], ref: DocumentRef) -> list[PolicyProblem]:
    if body.get("apiVersion") != API_VERSION:
        return [PolicyProblem(ref, "apiVersion", f"must be {API_VERSION}")]
    validator = _VALIDATORS.get(ref.kind)
    if validator is None:
        return [PolicyProblem(ref, "kind", f"must be one of {', '.join(DOCUMENT_KINDS)}")]
    errors = sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
    return [PolicyProblem(ref, _field_path(e), _explain(e)) for e in errors]


def rule_file_paths(directory: str) -> list[Path]:
    root = Path(directory)
    # Kubernetes mounts ConfigMaps with hidden ..data/..timestamp entries: skip dot names.
    return sorted(
        p
        for p in root.iterdir()
        if p.suffix in RULE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def read_documents(directory: str) -> tuple[list[RuleDocument], list[PolicyProblem]]:
    documents: list[RuleDocument] = []
    problems: list[PolicyProblem] = []
    try:
        paths = rule_file_paths(directory)
    except FileNotFoundError:
        return [], [PolicyProblem(None, "", f"{directory}: no such directory")]
    except NotADirectoryError:
        return [], [PolicyProblem(None, "", f"{directory}: not a directory")]
    for path in paths:
        text, error = read_source(str(path))
        if error is not None or text is None:
            problems.append(PolicyProblem(None, "", str(error)))
            continue
        docs, errors = parse_text(text, str(path))
        problems.extend(PolicyProblem(None, "", str(e)) for e in errors)
        for doc in docs:
            meta = doc.obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            ref = DocumentRef(str(path), doc.index, str(doc.obj.get("kind", "?")), str(name))
            found = schema_problems(doc.obj, ref)
            problems.extend(found)
            if not found:
                documents.append(RuleDocument(ref, doc.obj))
    return documents, problems


def load_policy(directory: str) -> Policy:
    """The policy in ``directory``; ``PolicyError`` lists every problem in every file."""
    documents, problems = read_documents(directory)
    try:
        policy = compile_policy(documents)
    except PolicyError as exc:
        problems.extend(exc.problems)
        policy = None
    if problems or policy is None:
        raise PolicyError(problems)
    return policy


def fingerprint(directory: str) -> str:
    """Changes when any rule file's name or content changes, including a ConfigMap's
    symlink swap, which replaces files without events on the files themselves."""
    digest = hashlib.sha256()
    try:
        for path in rule_file_paths(directory):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    except OSError as exc:
        digest.update(repr(exc).encode())
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class RuleSet:
    policy: Policy
    fingerprint: str
    generation: int


class RuleStore:
    """The rules in force: replaced atomically by a valid new set, kept on a broken one."""

    def __init__(self, directory: str) -> None:
        self.directory = os.fspath(directory)
        self._lock = threading.Lock()
        self.current = RuleSet(load_policy(self.directory), fingerprint(self.directory), 1)
        self.last_error: PolicyError | None = None
        self.failed_fingerprint = ""

    def reload_if_changed(self) -> bool | None:
        """True: reloaded; False: the new files are broken (old rules kept); None: no change."""
        with self._lock:
            seen = fingerprint(self.directory)
            if seen in (self.current.fingerprint, self.failed_fingerprint):
                return None
            try:
                policy = load_policy(self.directory)
            except PolicyError as exc:
                self.last_error = exc
                self.failed_fingerprint = seen
                return False
            self.current = RuleSet(policy, seen, self.current.generation + 1)
            self.last_error = None
            self.failed_fingerprint = ""
            return True
