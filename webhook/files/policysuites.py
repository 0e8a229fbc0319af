"""Reading policy test suites (``kind: GPUPolicyTest``) for ``gpu-webhook test``.

Suites are found as ``gator verify`` finds its ``Suite`` files: every YAML or JSON file under
the directories given is looked at, and the files that declare the kind are suites; the
manifests, rules and inventories beside them are not. Every path in a suite is relative to
the suite file, as in both Kyverno's and Gatekeeper's suites, so a directory of suites
moves as a whole. Each suite is validated with its JSON Schema (``gpu-webhook rules schema
--suite``), worded as rule files are, and each problem names the suite's file, the line
and the field.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from webhook.engine.policy.policytest import SUITE_KIND, entry_problems, suite_schema
from webhook.engine.policy.ruleset import PolicyError, PolicyProblem
from webhook.engine.policy.schema import DOCUMENT_KINDS
from webhook.files.manifests import (
    MANIFEST_SUFFIXES,
    Document,
    ManifestError,
    decode,
    load_manifests,
    parse_text,
    read_bytes,
)
from webhook.files.rulefiles import RuleFiles, compile_rules, explained, read_rule_files
from webhook.files.ruleobjects import Merged, RuleObject

# Bounds on what one run looks at, each said with what to do when reached: a suite is a
# hand-written file, and a directory walked for suites may be a whole repository.
MAX_SUITE_BYTES = 1024 * 1024
MAX_FILES_LOOKED_AT = 10_000
MAX_BYTES_LOOKED_AT = 512 * 1024 * 1024
MAX_SUITES = 1000
# Objects judged and (result, object) pairs compared over the whole run, all suites together.
MAX_OBJECTS = 10_000
MAX_CASES = 10_000
# Files are looked into for the kind in any case, so that a misspelt one is told, not skipped.
_MARKER = SUITE_KIND.lower().encode()
_MISSPELT = (SUITE_KIND.lower(), f"{SUITE_KIND.lower()}s")


@dataclass(frozen=True, slots=True)
class Suite:
    """One ``GPUPolicyTest`` document, its paths resolved against its file."""

    doc: Document
    name: str
    rules: tuple[str, ...]
    rule_objects: tuple[str, ...]
    inventory: str | None
    namespace: str | None
    # Each namespace's labels (``namespaces``), as the server reads them from the cluster.
    labels: Mapping[str, Mapping[str, str]]
    resources: tuple[str, ...]
    results: tuple[Mapping[str, Any], ...]

    @property
    def source(self) -> str:
        return self.doc.source

    def line_of(self, field: str) -> int:
        return self.doc.line_of(field)

    def error(self, field: str, message: str) -> ManifestError:
        """A problem of this suite at ``field``'s line: ``suite.yaml:12: field: message``."""
        return ManifestError(
            self.source, f"{field}: {message}" if field else message, self.line_of(field)
        )


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(suite_schema())


def find_suites(paths: Sequence[str]) -> tuple[list[Suite], list[ManifestError]]:
    """Every suite in ``paths`` (files, or directories walked in name order), and every
    problem: a file named on the command line must hold a suite; a file found by the walk
    is a suite only if it says ``kind: GPUPolicyTest``."""
    suites: list[Suite] = []
    errors: list[ManifestError] = []
    looked_at = 0
    read = 0
    for given in paths:
        if not Path(given).exists():
            errors.append(ManifestError(given, "no such file or directory"))
            continue
        named = not Path(given).is_dir()
        for path in [given] if named else _walk(given):
            looked_at += 1
            if looked_at > MAX_FILES_LOOKED_AT:
                return suites, [*errors, _too_many(given, f"{MAX_FILES_LOOKED_AT:,} files")]
            data, error = read_bytes(path)
            if data is None:
                if named:
                    errors.append(error or ManifestError(path, "cannot be read"))
                continue
            read += len(data)
            if read > MAX_BYTES_LOOKED_AT:
                return suites, [*errors, _too_many(given, f"{MAX_BYTES_LOOKED_AT >> 20} MiB")]
            if _MARKER not in data.lower():
                if named:
                    errors.append(ManifestError(path, f"holds no {SUITE_KIND} document"))
                continue
            found, problems = _suites_in(path, data)
            suites.extend(found)
            errors.extend(problems)
            if len(suites) > MAX_SUITES:
                return suites[:MAX_SUITES], [*errors, _too_many(given, f"{MAX_SUITES} suites")]
    return suites, errors


def _too_many(given: str, what: str) -> ManifestError:
    return ManifestError(
        given,
        f"more than {what} to look through for suites: name the directories that hold the "
        "suites (gpu-webhook test DIR...), or split the run",
    )


def _walk(root: str) -> Iterator[str]:
    """The manifest files under ``root`` in name order; hidden directories (``.git``,
    ``.venv``) are not entered, and links to directories not followed."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(MANIFEST_SUFFIXES) and not name.startswith("."):
                yield os.path.join(directory, name)


def _suites_in(path: str, data: bytes) -> tuple[list[Suite], list[ManifestError]]:
    if len(data) > MAX_SUITE_BYTES:
        return [], [
            ManifestError(
                path,
                f"a {SUITE_KIND} file holds more than {MAX_SUITE_BYTES >> 20} MiB: keep the "
                "objects in files of their own and name them in resources",
            )
        ]
    text, error = decode(data, path)
    if text is None:
        return [], [error or ManifestError(path, "not UTF-8 text")]
    documents, errors = parse_text(text, path, fields=True)
    suites: list[Suite] = []
    for doc in documents:
        kind = doc.obj.get("kind")
        if kind != SUITE_KIND:
            if isinstance(kind, str) and kind.lower() in _MISSPELT:  # else not a suite
                said = f'kind: "{kind}" (did you mean "{SUITE_KIND}"?)'
                errors.append(ManifestError(path, said, doc.line))
            continue
        suite, problems = _suite(doc)
        errors.extend(problems)
        if suite is not None:
            suites.append(suite)
    return suites, errors


def _suite(doc: Document) -> tuple[Suite | None, list[ManifestError]]:
    errors = sorted(_validator().iter_errors(doc.obj), key=lambda e: list(map(str, e.path)))
    if errors:
        problems = []
        for error in errors:
            field, message = explained(error)
            where = doc.line_of(field) if field else doc.line
            problems.append(
                ManifestError(doc.source, f"{field}: {message}" if field else message, where)
            )
        return None, problems
    obj = doc.obj
    base = Path(doc.source).parent
    problems = []

    def resolved(field: str, value: str) -> str:
        if Path(value).is_absolute():
            problems.append(
                _at(
                    doc,
                    field,
                    "give a path relative to the suite file, so that "
                    "the suite works wherever it is checked out",
                )
            )
            return value
        path = base / value
        if not path.exists():
            problems.append(_at(doc, field, f"{path}: no such file or directory"))
        return str(path)

    def each(field: str) -> tuple[str, ...]:
        return tuple(resolved(f"{field}[{i}]", v) for i, v in enumerate(obj.get(field) or ()))

    suite = Suite(
        doc=doc,
        name=str(obj["metadata"]["name"]),
        rules=each("rules"),
        rule_objects=each("ruleObjects"),
        inventory=resolved("inventory", obj["inventory"]) if "inventory" in obj else None,
        namespace=obj.get("namespace"),
        labels={n["name"]: n["labels"] for n in obj.get("namespaces") or ()},
        resources=each("resources"),
        results=tuple(obj["results"]),
    )
    for index, result in enumerate(suite.results):
        if "patched" in result:
            resolved(f"results[{index}].patched", result["patched"])
        for field, message in entry_problems(result):
            problems.append(_at(doc, f"results[{index}].{field}", message))
    return (None, problems) if problems else (suite, [])


def _at(doc: Document, field: str, message: str) -> ManifestError:
    return ManifestError(doc.source, f"{field}: {message}", doc.line_of(field))


def suite_rules(suite: Suite) -> Merged:
    """The suite's rules: its rule files read as one directory, with its rule objects merged
    in as the server merges the objects the API server serves. ``PolicyError`` when the
    rule files are not usable, as ``check --rules`` says it."""
    files: list[tuple[Path, bytes | ManifestError]] = []
    for path in suite.rules:
        read = read_rule_files(path)
        if read.problem:
            raise PolicyError([PolicyProblem(None, "", read.problem)])
        files.extend(read.files)
    objects, errors = _rule_objects(suite)
    if errors:
        raise SuiteObjectsError(errors)
    return compile_rules(RuleFiles(tuple(files)), directory=", ".join(suite.rules), objects=objects)


class SuiteObjectsError(Exception):
    """The suite's ``ruleObjects`` files are not rule objects."""

    def __init__(self, errors: list[ManifestError]) -> None:
        super().__init__("; ".join(map(str, errors)))
        self.errors = errors


def _rule_objects(suite: Suite) -> tuple[list[RuleObject], list[ManifestError]]:
    if not suite.rule_objects:
        return [], []
    documents, errors = load_manifests(list(suite.rule_objects))
    objects = []
    for doc in documents:
        kind = doc.obj.get("kind")
        if kind not in DOCUMENT_KINDS:
            kinds = ", ".join(DOCUMENT_KINDS)
            errors.append(
                ManifestError(doc.source, f"{kind!s} is not a rule object ({kinds})", doc.line)
            )
            continue
        objects.append(RuleObject.of(doc.obj))
    return objects, errors
