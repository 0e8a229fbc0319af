"""The CRDs of deploy/base/crds: written from the rule-file schema, structural as the API
server demands, and taking every rule document the project ships or shows as an object."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.cluster.ruleobjects import gpu_policy
from tests.deploy.test_manifests import ROOT, render
from tests.kubeschema import FIELD_VALIDATIONS, apply_custom_resource, as_json_schema
from webhook.engine.policy.crds import GROUP, NAMES, VERSION, custom_resource_definitions
from webhook.engine.policy.ruleset import DocumentRef
from webhook.engine.policy.schema import DOCUMENT_KINDS
from webhook.files.rulefiles import schema_problems
from webhook.files.ruleobjects import RuleObject, judge_object

CRDS = ROOT / "deploy" / "base" / "crds"
# Kinds users already have, by the names kubectl resolves (plural, singular, short names):
# Karpenter (karpenter.sh, karpenter.k8s.aws), Kyverno (kyverno.io), Gatekeeper, Kueue
# (kueue.x-k8s.io), the NVIDIA GPU operator (nvidia.com), and the core API.
TAKEN = {
    "nodepools", "nodepool", "nodeclaims", "nodeclaim", "nodeoverlays", "ec2nodeclasses",
    "ec2nc", "nodeclasses", "policies", "pol", "clusterpolicies", "cpol", "policyexceptions",
    "polex", "workloads", "wl", "clusterqueues", "cq", "localqueues", "lq",
    "resourceflavors", "rf", "clusterpolicy", "nvidiadrivers", "nvd", "constrainttemplates",
    "nodes", "no", "pods", "po", "limitranges", "limits", "resourcequotas", "quota",
    "priorityclasses", "pc", "runtimeclasses", "deviceclasses", "resourceslices",
    "computeclasses",
}  # fmt: skip


def crd_files() -> dict[str, dict[str, Any]]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))}


def crd_for(kind: str) -> dict[str, Any]:
    (crd,) = [c for c in crd_files().values() if c["spec"]["names"]["kind"] == kind]
    return crd


def open_api(kind: str) -> dict[str, Any]:
    (version,) = crd_for(kind)["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def structural_problems(node: dict[str, Any], where: str = "") -> Iterator[str]:
    """apiextensions-apiserver pkg/apiserver/schema/validation.go: every node typed (or
    int-or-string, or keeping unknown fields), no additionalProperties beside properties,
    no JSON Schema the API server refuses (const, uniqueItems, $schema, if)."""
    for key in ("const", "uniqueItems", "$schema", "$id", "if", "then", "else", "$ref"):
        if key in node:
            yield f"{where or '.'}: {key}"
    if "type" not in node and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        yield f"{where or '.'}: no type"
    if "properties" in node and "additionalProperties" in node:
        yield f"{where}: properties and additionalProperties"
    for branch in node.get("oneOf") or ():
        if set(branch) - {"required"}:
            yield f"{where}: a oneOf branch with more than value validations: {sorted(branch)}"
        for name in branch.get("required") or ():
            if name not in (node.get("properties") or {}):
                yield f"{where}: oneOf names {name}, not a property"
    for below, child in children(node, where):
        yield from structural_problems(child, below)


def children(node: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The schemas right below ``node``: its properties, its items, its map values."""
    for name, value in (node.get("properties") or {}).items():
        yield f"{where}.{name}", value
    if isinstance(node.get("items"), dict):
        yield f"{where}[]", node["items"]
    if isinstance(node.get("additionalProperties"), dict):
        yield f"{where}.*", node["additionalProperties"]


def rule_documents() -> Iterator[Any]:
    """Every rule document shipped (rules/, the deploy copy) or shown (golden cases, docs,
    the policy test suites' objects)."""
    files = [
        *sorted((ROOT / "rules").glob("*.yaml")),
        *sorted((ROOT / "deploy" / "base" / "rules").glob("*.yaml")),
        *sorted((ROOT / "tests" / "cases").glob("*/rules/*.yaml")),
        *sorted((ROOT / "tests" / "cases" / "_rules").glob("*/*.yaml")),
        *sorted((ROOT / "policy-tests").glob("**/*.yaml")),  # objects the suites apply
    ]
    for path in files:
        if path.name == "kustomization.yaml":
            continue
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") in DOCUMENT_KINDS:
                yield pytest.param(doc, id=f"{path.relative_to(ROOT)}#{index}")
    text = (ROOT / "docs" / "rules.md").read_text()
    for index, block in enumerate(text.split("```yaml\n")[1:]):
        try:
            doc = yaml.safe_load(block.split("```", 1)[0])
        except yaml.YAMLError:
            continue  # an excerpt (a part of a document), not a document
        if isinstance(doc, dict) and doc.get("kind") in DOCUMENT_KINDS:
            yield pytest.param(doc, id=f"docs/rules.md#{index}")


def test_the_crds_are_what_scripts_gen_crds_writes():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-crds"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    written = crd_files()
    assert written == {
        name: yaml.safe_load(yaml.safe_dump(crd))
        for name, crd in custom_resource_definitions().items()
    }


def test_a_stale_crd_is_caught_with_what_to_run(tmp_path: Path):
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    (copy / "scripts" / "gen-crds").write_bytes((ROOT / "scripts" / "gen-crds").read_bytes())
    (copy / "webhook").symlink_to(ROOT / "webhook")
    crds = copy / "deploy" / "base" / "crds"
    crds.mkdir(parents=True)
    for path in CRDS.glob("*.yaml"):
        (crds / path.name).write_text(path.read_text().replace("gpupol\n", "gp\n"))
    script = [sys.executable, str(copy / "scripts" / "gen-crds")]
    stale = subprocess.run([*script, "--check"], capture_output=True, text=True, check=False)
    assert stale.returncode == 1
    assert "gpupolicies.yaml" in stale.stderr
    assert "run scripts/gen-crds" in stale.stderr
    subprocess.run(script, check=True)
    assert subprocess.run([*script, "--check"], check=False).returncode == 0


def test_there_is_one_cluster_scoped_crd_per_rule_kind_in_the_base():
    assert sorted(c["spec"]["names"]["kind"] for c in crd_files().values()) == sorted(
        DOCUMENT_KINDS
    )
    rendered = [o for o in render("base") if o["kind"] == "CustomResourceDefinition"]
    assert sorted(o["metadata"]["name"] for o in rendered) == sorted(
        f"{n.plural}.{GROUP}" for n in NAMES.values()
    )
    for crd in crd_files().values():
        assert crd["spec"]["group"] == GROUP
        assert crd["spec"]["scope"] == "Cluster"
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
        assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", sorted(DOCUMENT_KINDS))
def test_each_crd_is_valid_and_structural(kind):
    kubernetes_validate.validate(crd_for(kind), kubernetes_validate.latest_version(), strict=True)
    assert list(structural_problems(open_api(kind))) == []


def test_the_structural_check_finds_what_the_api_server_refuses():
    assert list(structural_problems({"type": "object", "properties": {"a": {"const": 1}}})) == [
        ".a: const",
        ".a: no type",
    ]


def test_no_name_of_a_rule_kind_is_one_users_already_have():
    """kubectl get nodepools keeps meaning Karpenter's NodePool."""
    for crd in crd_files().values():
        names = crd["spec"]["names"]
        used = {names["plural"], names["singular"], *names["shortNames"]}
        assert not used & TAKEN, names["kind"]
    assert "NodePool" not in DOCUMENT_KINDS


def test_kubectl_get_shows_ready_age_and_what_helps():
    for crd in crd_files().values():
        (version,) = crd["spec"]["versions"]
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert columns[0] == "Ready"
        assert "Age" in columns
    policy = [
        c["name"] for c in crd_for("GPUPolicy")["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    assert policy == ["Ready", "Order", "Checks", "Namespaces", "Age", "Message"]


@functools.cache
def document_validator(kind: str) -> Draft202012Validator:
    """One per kind, not one per document: each built every CRD file parsed again (64 ms,
    170 documents), and a validator holds nothing of what it validated."""
    return Draft202012Validator(as_json_schema(open_api(kind)))


@functools.cache
def cached_crd(kind: str) -> dict[str, Any]:
    return crd_for(kind)


def applied(kind: str, spec: dict[str, Any], *, field_validation: str = "Strict") -> Any:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": "a"}}
    crd = cached_crd(kind)
    return apply_custom_resource(crd, {**body, "spec": spec}, field_validation=field_validation)


@pytest.mark.parametrize("document", list(rule_documents()))
def test_every_shipped_and_example_rule_document_applies_as_an_object(document):
    """Strictly: no field of theirs is unknown to the CRD (none would be pruned)."""
    body = {**document, "apiVersion": f"{GROUP}/{VERSION}"}
    answer = apply_custom_resource(cached_crd(document["kind"]), body)
    assert (answer.error, answer.warnings) == (None, ())
    assert answer.stored == body


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        pytest.param("GPUPolicy", {"order": "first"}, "order", id="a-word-for-a-number"),
        pytest.param(
            "GPUPolicy", {"validate": [{"maxGPUsPerPod": 8, "action": "stop"}]}, "action",
            id="an-unknown-action",
        ),
        pytest.param(
            "GPUPolicy", {"validate": [{"maxGPUsPerPod": 8, "requiredLabels": ["a"]}]},
            "spec.validate[0]: Invalid value: \"object\": maxGPUsPerPod and requiredLabels are "
            "two checks in one entry: give each its own entry", id="two-checks-in-one-entry",
        ),
        pytest.param(
            "GPUPolicy", {"exempt": ["hideGPUs", "hideGPUs"]}, "non-unique", id="an-exemption-twice"
        ),
        pytest.param("GPUNodePool", {"maxNodes": 2}, "allocatable", id="a-pool-of-no-size"),
        pytest.param(
            "GPUSettings", {"inventoryFailureMode": "maybe"}, "inventoryFailureMode", id="an-unknown-mode"
        ),
        pytest.param(
            "GPUPolicy", {"mutate": {"memoryLimit": {"fixed": "1Gi", "perGPU": "2Gi"}}},
            "fixed and perGPU conflict: give only one of fixed, perGPU, inventoryShare",
            id="two-memory-limit-modes",
        ),
    ],
)  # fmt: skip
def test_the_api_server_refuses_what_the_schema_refuses(kind, spec, field):
    answer = applied(kind, spec)
    assert answer.stored is None
    assert field in answer.error


EVERY_CHECK = ", ".join(
    entry["required"][0] for entry in DOCUMENT_KINDS["GPUPolicy"]["properties"]["spec"][
        "properties"]["validate"]["items"]["oneOf"]
)  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "spec", "key", "refused"),
    [
        pytest.param(
            "GPUPolicy", {"validate": [{"maxGPUsPerPods": 2}]}, "spec.validate[0].maxGPUsPerPods",
            "spec.validate[0]: Invalid value: \"object\": no check in this entry; the checks: ",
            id="a-check",
        ),
        pytest.param(
            "GPUPolicy", {"validate": [{"maxGPUsPerPod": 2, "acton": "warn"}]},
            "spec.validate[0].acton", None, id="a-check-field",
        ),
        pytest.param(
            "GPUPolicy", {"match": {"namespace": ["team-a"]}}, "spec.match.namespace", None,
            id="a-match-field",
        ),
        pytest.param(
            "GPUPolicy", {"mutate": {"memoryLimit": {"fixd": "1Gi"}}},
            "spec.mutate.memoryLimit.fixd",
            "spec.mutate.memoryLimit: Invalid value: \"object\": give one of fixed, perGPU, "
            "inventoryShare (a misspelt one is dropped", id="a-memory-limit-mode",
        ),
        pytest.param("GPUPolicy", {"validat": []}, "spec.validat", None, id="a-spec-field"),
        pytest.param(
            "GPUSettings", {"inventoryFailureMod": "open"}, "spec.inventoryFailureMod", None,
            id="a-setting",
        ),
        pytest.param(
            "GPUNodePool", {"allocatable": {"nvidia.com/gpu": 8}, "maxNode": 2},
            "spec.maxNode", None, id="a-pool-field",
        ),
    ],
)  # fmt: skip
def test_a_misspelt_field_is_named_by_the_api_server_itself(kind, spec, key, refused):
    """Issue 42: the API server names the misspelt key, also while the webhook is down.
    Strict clients (kubectl's default) are refused with it; any other client is told it as
    a warning, and where the typo leaves an entry without its check the object is refused
    too, in words that list the checks (never "must validate one and only one schema")."""
    strict = applied(kind, spec)
    assert strict.error == f'strict decoding error: unknown field "{key}"'
    # The same key that rules lint names in a rule file (with its did-you-mean).
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": "a"}}
    ref = DocumentRef("a.yaml", 0, kind, "a")
    linted = [str(p) for p in schema_problems({**body, "spec": spec}, ref)]
    assert any(key.rsplit(".", 1)[1] in line for line in linted), linted
    assert strict.stored is None
    warned = applied(kind, spec, field_validation="Warn")
    assert warned.warnings == (f'unknown field "{key}"',)
    if refused is None:
        assert warned.error is None  # stored without the key: the client was warned
    else:
        assert warned.error is not None
        assert refused in warned.error
        assert "oneOf" not in warned.error


def test_a_check_typo_is_refused_whatever_field_validation_the_client_asks_for():
    """Even ``kubectl apply --validate=false`` (Ignore: no warning) cannot store a
    validate entry that lost its only check: its meaning would change silently."""
    for mode in FIELD_VALIDATIONS:
        answer = applied("GPUPolicy", {"validate": [{"maxGPUsPerPods": 2}]}, field_validation=mode)
        assert answer.stored is None, mode
    answer = applied("GPUPolicy", {"validate": [{"maxGPUsPerPods": 2}]}, field_validation="Ignore")
    assert answer.error == (
        'GPUPolicy.gpu-webhook.io "a" is invalid: spec.validate[0]: Invalid value: "object": '
        f"no check in this entry; the checks: {EVERY_CHECK} (a misspelt one is dropped with "
        'an "unknown field" warning)'
    )


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"validate": [{"action": "warn"}]}, id="no-check"),
        pytest.param({"validate": [{"maxGPUsPerPod": 8, "wholeGPUsOnly": True}]}, id="two-checks"),
        pytest.param({"mutate": {"memoryLimit": {"whenTooLarge": "cap"}}}, id="no-mode"),
        pytest.param({"mutate": {"memoryLimit": {"fixed": 1, "inventoryShare": True}}}, id="two-modes"),
        pytest.param({"match": {"gpuCount": {"min": 4, "max": 2}}}, id="a-count-range-upside-down"),
        pytest.param(
            {"mutate": {"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}},
            id="a-value-with-exists",
        ),
        pytest.param({"mutate": {"tolerations": [{"value": "b"}]}}, id="no-key-without-exists"),
    ],
)  # fmt: skip
def test_the_api_server_refuses_in_the_words_of_rules_lint(spec):
    """Every command gives the same answer: what the CRD's CEL rules say, also while the
    webhook is down, is what /validate (and rules lint) says of the same object."""
    lines = judge_object([], [], RuleObject.of(gpu_policy("a", spec)), lint=schema_problems)
    said = applied("GPUPolicy", spec).error
    assert lines
    for line in lines:
        path, message = line.split(": ", 1)
        assert f'{path}: Invalid value: "object": {message}' in said


def test_what_the_cel_rules_accept_the_webhook_accepts_too():
    """No CEL rule is stricter than the webhook: each is the edge of a refusal of lint's."""
    for spec in (
        {"match": {"gpuCount": {"min": 2, "max": 2}}},
        {"match": {"gpuCount": {"max": 0}}, "exempt": ["hideGPUs"]},
        {"mutate": {"tolerations": [{"operator": "Exists"}, {"key": "a", "value": ""}]}},
    ):
        assert applied("GPUPolicy", spec).error is None, spec
        lines = judge_object([], [], RuleObject.of(gpu_policy("a", spec)), lint=schema_problems)
        assert lines == (), spec


def kept_objects(node: dict[str, Any], where: str = "") -> Iterator[str]:
    """Objects that keep unknown fields (where a typo reaches neither CEL nor strict
    decoding)."""
    if node.get("x-kubernetes-preserve-unknown-fields") and node.get("type") == "object":
        yield where
    for below, child in children(node, where):
        yield from kept_objects(child, below)


@pytest.mark.parametrize("kind", sorted(DOCUMENT_KINDS))
def test_no_object_of_a_rule_kind_keeps_unknown_fields_but_the_spec_in_force(kind):
    """The status' copy of the last good spec keeps what it copied; a value that may be a
    word or a boolean keeps any value, and /validate judges it."""
    assert list(kept_objects(open_api(kind))) == [".status.inForce.spec"]


def unbounded_rules(
    node: dict[str, Any], where: str = "", *, bounded: bool = True
) -> Iterator[str]:
    """CEL rules below a list without maxItems or a map without maxProperties: the API
    server estimates their cost as if the list held as many entries as a request can carry
    (3 MiB), and refuses the CRD past ``StaticEstimatedCostLimit`` (apiextensions-apiserver
    pkg/apis/apiextensions/validation/validation.go, ``getExpressionCost``;
    cel_validation.go, ``extractMaxElements``)."""
    if node.get("x-kubernetes-validations") and not bounded:
        yield where or "."
    for below, child in children(node, where):
        limit = {"[]": "maxItems", ".*": "maxProperties"}.get(below[len(where) :])
        inner = bounded and (limit is None or limit in node)
        yield from unbounded_rules(child, below, bounded=inner)


@pytest.mark.parametrize("kind", sorted(DOCUMENT_KINDS))
def test_every_cel_rule_runs_on_a_bounded_number_of_entries(kind):
    assert list(unbounded_rules(open_api(kind))) == []


def test_the_cost_check_finds_a_rule_below_an_unbounded_list():
    rule = {"type": "object", "x-kubernetes-validations": [{"rule": "true"}]}
    assert list(unbounded_rules({"properties": {"a": {"type": "array", "items": rule}}})) == [
        ".a[]"
    ]
