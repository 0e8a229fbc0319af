"""Golden cases: each directory under tests/cases is one admission scenario.

A case holds the rules (``rules/`` or ``rules.ref``), optionally the nodes
(``inventory.yaml`` or ``inventory.ref``), the object, optionally the request
(``request.yaml``: ``operation``, ``oldObject``, ``subResource``, ``namespace``,
``namespaceLabels``), and what must come out: ``expected.yaml`` (allowed, findings, warnings)
and ``expected-object.yaml`` (the object after applying the returned patch).

``rules.ref`` holds one name: ``default`` is the repository's ``rules/``, any other name is
``tests/cases/_rules/<name>/``. ``inventory.ref`` names ``tests/cases/_inventories/<name>.yaml``.

Run with ``GOLDEN_UPDATE=1`` to rewrite the expected files from the engine's current output;
review the diff before committing it. Finding messages are kept as the substrings already
written when they still appear, so a regenerated file stays short where a human trimmed it.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.kubeschema import validation_error
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import (
    IDENTITY_METADATA,
    NO_INVENTORY,
    InventoryView,
    Request,
)
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.policyexceptions import parse_time
from webhook.engine.policy.ruleset import Policy
from webhook.files.inventoryfile import InventoryFile, load_inventory_file
from webhook.files.rulefiles import load_policy

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "tests" / "cases"
SHARED_RULES = CASES / "_rules"
SHARED_INVENTORIES = CASES / "_inventories"
UPDATE = os.environ.get("GOLDEN_UPDATE") == "1"

REQUIRED_FILES = {"object.yaml", "expected.yaml", "expected-object.yaml"}
OPTIONAL_FILES = {"rules", "rules.ref", "inventory.yaml", "inventory.ref", "request.yaml"}
REQUEST_KEYS = {"namespace", "operation", "oldObject", "namespaceLabels", "subResource", "now"}
EXPECTED_KEYS = {"allowed", "findings", "warnings", "repaired", "waived"}
FINDING_KEYS = {"rule", "check", "action", "message"}


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir() and not p.name.startswith("_"))


def _read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _write_yaml(path: Path, data: Any) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=100), encoding="utf-8")


def _ref(case: Path, name: str) -> str:
    return (case / name).read_text(encoding="utf-8").strip()


def rules_dir(case: Path) -> Path:
    if (case / "rules").is_dir():
        return case / "rules"
    name = _ref(case, "rules.ref")
    return REPO / "rules" if name == "default" else SHARED_RULES / name


def inventory_view(case: Path) -> InventoryView:
    """The case's nodes, and its RuntimeClasses when the inventory lists any."""
    if (case / "inventory.yaml").is_file():
        path = case / "inventory.yaml"
    elif (case / "inventory.ref").is_file():
        path = SHARED_INVENTORIES / f"{_ref(case, 'inventory.ref')}.yaml"
    else:
        return NO_INVENTORY
    return _inventory_file(path).view()


# Each file read once per test process, not at each of the 1,800 tests that judge a case
# (about 60% of this module's time): the policy and the inventory file are frozen, plain
# data, and the tests here are of the engine's answer, not of reading the files
# (tests/files, and the commands in tests/commands/test_one_answer.py, read them anew).
@functools.cache
def _inventory_file(path: Path) -> InventoryFile:
    return load_inventory_file(str(path))


@functools.cache
def case_policy(directory: Path) -> Policy:
    """``load_policy`` of a case's rule directory, once per test process."""
    return load_policy(str(directory))


def load_request(case: Path, obj: Mapping[str, Any]) -> Request:
    spec = _read_yaml(case / "request.yaml") if (case / "request.yaml").is_file() else {}
    return Request(
        obj,
        namespace=spec.get("namespace", ""),
        operation=spec.get("operation", "CREATE"),
        old_object=spec.get("oldObject"),
        namespace_labels=spec.get("namespaceLabels"),
        sub_resource=spec.get("subResource", ""),
        now=parse_time(spec["now"]) if "now" in spec else None,
    )


def _with_object(request: Request, obj: Mapping[str, Any]) -> Request:
    return Request(
        obj,
        namespace=request.namespace,
        operation=request.operation,
        old_object=request.old_object,
        namespace_labels=request.namespace_labels,
        sub_resource=request.sub_resource,
        now=request.now,
    )


def finding_keys(decision: Decision) -> list[tuple[str, str, str]]:
    return [(f.rule, f.check, f.action) for f in decision.findings]


def _updated_expectations(decision: Decision, old: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[tuple[str, str, str], list[str]] = {}
    for f in old.get("findings") or []:
        kept.setdefault((f["rule"], f["check"], f["action"]), []).append(f.get("message", ""))
    findings = []
    for f in decision.findings:
        candidates = kept.get((f.rule, f.check, f.action), [])
        substring = next((s for s in candidates if s and s in f.message), "")
        if substring:
            candidates.remove(substring)
        message = substring or f.message
        findings.append({"rule": f.rule, "check": f.check, "action": f.action, "message": message})
    out: dict[str, Any] = {
        "allowed": decision.allowed,
        "findings": findings,
        "warnings": list(decision.warnings),
    }
    if old.get("repaired"):
        out["repaired"] = old["repaired"]
    if decision.waivers:
        out["waived"] = waived(decision)
    return out


def waived(decision: Decision) -> list[str]:
    """Who waived what: ``<exception> waived <rule>/<check>``."""
    return [f"{w.exception} waived {w.finding.id}" for w in decision.waivers]


def run_case(case: Path) -> tuple[Policy, Request, Decision]:
    policy = case_policy(rules_dir(case))
    obj = _read_yaml(case / "object.yaml")
    request = load_request(case, obj)
    return policy, request, evaluate(request, policy=policy, inventory=inventory_view(case))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_case_gives_the_expected_decision_and_object(case: Path) -> None:
    policy, request, decision = run_case(case)
    original = copy.deepcopy(request.object)
    patched = jsonpatch.apply_patch(original, list(decision.patch))
    expected_path = case / "expected.yaml"
    expected = _read_yaml(expected_path) if expected_path.is_file() else {}
    if UPDATE:
        _write_yaml(expected_path, _updated_expectations(decision, expected or {}))
        _write_yaml(case / "expected-object.yaml", patched)
        expected = _read_yaml(expected_path)

    assert request.object == original, "the engine modified the object it was given"
    assert patched == decision.mutated, "the patch does not produce decision.mutated"
    assert patched == _read_yaml(case / "expected-object.yaml")
    assert decision.allowed is expected["allowed"]
    assert finding_keys(decision) == [
        (f["rule"], f["check"], f["action"]) for f in expected.get("findings") or []
    ]
    for finding, want in zip(decision.findings, expected.get("findings") or [], strict=True):
        assert want["message"] in finding.message, f"{finding.id}: {finding.message}"
    assert list(decision.warnings) == (expected.get("warnings") or [])

    again = evaluate(_with_object(request, patched), policy=policy, inventory=inventory_view(case))
    assert list(again.patch) == [], "mutating the mutated object must change nothing"
    repaired = set(expected.get("repaired") or [])
    assert again.allowed is decision.allowed
    assert finding_keys(again) == [
        k
        for k, f in zip(finding_keys(decision), decision.findings, strict=True)
        if f.id not in repaired
    ]


def test_case_directories_hold_only_known_files() -> None:
    problems = []
    for case in case_dirs():
        names = {p.name for p in case.iterdir()}
        problems += [
            f"{case.name}: unknown file {n}"
            for n in sorted(names - REQUIRED_FILES - OPTIONAL_FILES)
        ]
        problems += [f"{case.name}: missing {n}" for n in sorted(REQUIRED_FILES - names)]
        if len(names & {"rules", "rules.ref"}) != 1:
            problems.append(f"{case.name}: needs exactly one of rules/ and rules.ref")
        if len(names & {"inventory.yaml", "inventory.ref"}) > 1:
            problems.append(f"{case.name}: inventory.yaml and inventory.ref both given")
        if "rules.ref" in names and not rules_dir(case).is_dir():
            problems.append(f"{case.name}: rules.ref names no rule directory")
        inventory_ref = "inventory.ref" in names and _ref(case, "inventory.ref")
        if inventory_ref and not (SHARED_INVENTORIES / f"{inventory_ref}.yaml").is_file():
            problems.append(f"{case.name}: inventory.ref names no inventory file")
        if "request.yaml" in names:
            extra = set(_read_yaml(case / "request.yaml") or {}) - REQUEST_KEYS
            problems += [f"{case.name}: request.yaml: unknown key {k}" for k in sorted(extra)]
        if "expected.yaml" in names:
            expected = _read_yaml(case / "expected.yaml") or {}
            extra = set(expected) - EXPECTED_KEYS
            problems += [f"{case.name}: expected.yaml: unknown key {k}" for k in sorted(extra)]
            if "allowed" not in expected:
                problems.append(f"{case.name}: expected.yaml: allowed is missing")
            for f in expected.get("findings") or []:
                if set(f) != FINDING_KEYS:
                    problems.append(f"{case.name}: expected.yaml: finding needs {FINDING_KEYS}")
    assert problems == []


def test_shared_rule_directories_and_inventories_are_all_used() -> None:
    used_rules = {_ref(c, "rules.ref") for c in case_dirs() if (c / "rules.ref").is_file()}
    used_inv = {_ref(c, "inventory.ref") for c in case_dirs() if (c / "inventory.ref").is_file()}
    shared_rules = {p.name for p in SHARED_RULES.iterdir()} if SHARED_RULES.is_dir() else set()
    shared_inv = (
        {p.stem for p in SHARED_INVENTORIES.iterdir()} if SHARED_INVENTORIES.is_dir() else set()
    )
    assert shared_rules <= used_rules
    assert shared_inv <= used_inv


def test_a_patch_path_escapes_a_resource_name_with_a_slash() -> None:
    _, _, decision = run_case(CASES / "builtin-requests-only-repaired")
    paths = [op["path"] for op in decision.patch]
    assert (
        "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
        in paths
    )


def _another_replica(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a sibling replica would carry it: every identity field different."""
    other = copy.deepcopy(dict(obj))
    meta = other.get("metadata")
    if isinstance(meta, dict):
        meta.update(
            name="replica-7f9c4",
            generateName="replica-",
            uid="0b7c5c43-8a0e-4f43-9d1e-4d2b1c3a6e55",
            resourceVersion="9876",
            generation=3,
            creationTimestamp="2026-11-29T12:00:00Z",
            managedFields=[{"manager": "kubectl", "operation": "Update", "time": "now"}],
            ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}],
            selfLink="/api/v1/namespaces/default/pods/replica-7f9c4",
        )
    return other


def test_identity_metadata_covers_every_field_a_sibling_replica_changes() -> None:
    changed = set(_another_replica({"metadata": {}})["metadata"])
    assert changed == IDENTITY_METADATA


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_identity_metadata_never_changes_the_decision(case: Path) -> None:
    policy, request, decision = run_case(case)
    sibling = _with_object(request, _another_replica(request.object))

    other = evaluate(sibling, policy=policy, inventory=inventory_view(case))

    assert other.allowed is decision.allowed
    assert other.findings == decision.findings
    assert other.warnings == decision.warnings
    assert other.audit == decision.audit
    assert list(other.patch) == list(decision.patch)


BUILTIN_GROUPS = ("v1", "apps/v1", "batch/v1")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_patches_keep_built_in_objects_schema_valid(case: Path) -> None:
    obj = _read_yaml(case / "object.yaml")
    if obj.get("apiVersion") not in BUILTIN_GROUPS:
        pytest.skip("kubernetes-validate knows the schemas of built-in kinds only")
    before, after = (
        validation_error(obj),
        validation_error(_read_yaml(case / "expected-object.yaml")),
    )
    assert after == before


def _relabelled(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with one more label, that no rule reads."""
    other = copy.deepcopy(dict(obj))
    meta = other.setdefault("metadata", {})
    if isinstance(meta, dict):
        labels = meta.get("labels")
        meta["labels"] = {**(labels if isinstance(labels, dict) else {}), "example.com/x": "1"}
    return other


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_an_unrelated_label_edit_of_any_stored_object_is_allowed_unpatched(case: Path) -> None:
    """Whatever a case's object is (admitted, or denied today but stored before a rule
    existed), an UPDATE that only adds a label changes nothing it reaches or asks for."""
    policy = case_policy(rules_dir(case))
    stored = _read_yaml(case / "expected-object.yaml")
    as_read = load_request(case, stored)
    request = Request(
        _relabelled(stored),
        namespace=as_read.namespace,
        operation="UPDATE",
        old_object=stored,
        now=as_read.now,
    )

    decision = evaluate(request, policy=policy, inventory=inventory_view(case))

    assert decision.allowed, decision.message
    assert [f for f in decision.findings if f.action == "deny"] == []
    assert list(decision.patch) == []


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in case_dirs()])
def test_a_pod_applied_with_its_own_patch_gets_the_same_decision(case: Path) -> None:
    """The object the API server stores after our patch is judged as the one we patched:
    a decision that flips on a second look would deny on retry what it allowed."""
    policy, request, decision = run_case(case)
    patched = jsonpatch.apply_patch(copy.deepcopy(request.object), list(decision.patch))

    again = evaluate(_with_object(request, patched), policy=policy, inventory=inventory_view(case))

    assert again.allowed is decision.allowed
    assert [(f.id, f.action) for f in again.denials] == [(f.id, f.action) for f in decision.denials]
    assert list(again.patch) == []
