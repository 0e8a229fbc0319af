"""The CRDs of deploy/base/crds: written from the rule-file schema, structural as the API
server demands, and taking every rule document the project ships or shows as an object."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.deploy.test_manifests import ROOT, render
from webhook.engine.policy.crds import GROUP, NAMES, VERSION, custom_resource_definitions
from webhook.engine.policy.schema import DOCUMENT_KINDS, NAMESPACED_KINDS

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


def as_json_schema(node: Any) -> Any:
    """An openAPIV3Schema as JSON Schema, with the API server's extensions as it reads
    them: int-or-string, preserved unknown fields (anything), list-type set (unique)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: as_json_schema(v) for name, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = as_json_schema(value)
        elif key in ("oneOf", "anyOf", "allOf"):
            out[key] = [as_json_schema(v) for v in value]
        elif key == "x-kubernetes-int-or-string":
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        elif key == "x-kubernetes-list-type" and value == "set":
            out["uniqueItems"] = True
        elif not key.startswith("x-kubernetes-") and key != "format":
            out[key] = value
    return out


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
    for name, value in (node.get("properties") or {}).items():
        yield from structural_problems(value, f"{where}.{name}")
    if isinstance(node.get("items"), dict):
        yield from structural_problems(node["items"], f"{where}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from structural_problems(node["additionalProperties"], f"{where}.*")


def rule_documents() -> Iterator[Any]:
    """Every rule document shipped (rules/, the deploy copy) or shown (golden cases, docs)."""
    files = [
        *sorted((ROOT / "rules").glob("*.yaml")),
        *sorted((ROOT / "deploy" / "base" / "rules").glob("*.yaml")),
        *sorted((ROOT / "tests" / "cases").glob("*/rules/*.yaml")),
        *sorted((ROOT / "tests" / "cases" / "_rules").glob("*/*.yaml")),
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


def test_there_is_one_crd_per_rule_kind_in_the_base_namespaced_only_for_a_team_kind():
    assert sorted(c["spec"]["names"]["kind"] for c in crd_files().values()) == sorted(
        DOCUMENT_KINDS
    )
    rendered = [o for o in render("base") if o["kind"] == "CustomResourceDefinition"]
    assert sorted(o["metadata"]["name"] for o in rendered) == sorted(
        f"{n.plural}.{GROUP}" for n in NAMES.values()
    )
    for crd in crd_files().values():
        assert crd["spec"]["group"] == GROUP
        kind = crd["spec"]["names"]["kind"]
        assert crd["spec"]["scope"] == ("Namespaced" if kind in NAMESPACED_KINDS else "Cluster")
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


@pytest.mark.parametrize("document", list(rule_documents()))
def test_every_shipped_and_example_rule_document_applies_as_an_object(document):
    validator = document_validator(document["kind"])
    body = {**document, "apiVersion": f"{GROUP}/{VERSION}"}
    assert [e.message for e in validator.iter_errors(body)] == []


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        pytest.param("GPUPolicy", {"order": "first"}, "order", id="a-word-for-a-number"),
        pytest.param(
            "GPUPolicy", {"validate": [{"maxGPUsPerPod": 8, "action": "stop"}]}, "action",
            id="an-unknown-action",
        ),
        pytest.param(
            "GPUPolicy", {"validate": [{"maxGPUsPerPod": 8, "requiredLabels": ["a"]}]}, "validate.0",
            id="two-checks-in-one-entry",
        ),
        pytest.param(
            "GPUPolicy", {"exempt": ["hideGPUs", "hideGPUs"]}, "non-unique", id="an-exemption-twice"
        ),
        pytest.param("GPUNodePool", {"maxNodes": 2}, "allocatable", id="a-pool-of-no-size"),
        pytest.param(
            "GPUSettings", {"inventoryFailureMode": "maybe"}, "inventoryFailureMode", id="an-unknown-mode"
        ),
        pytest.param(
            "GPUPolicyException",
            {"checks": ["builtin/capacity"], "workloads": {"names": ["a"]}, "expires": "next friday"},
            "expires", id="an-expiry-that-is-no-time",
        ),
        pytest.param(
            "GPUPolicyException", {"checks": ["builtin/capacity"], "workloads": {}}, "workloads",
            id="an-exception-for-no-workload",
        ),
    ],
)  # fmt: skip
def test_the_api_server_refuses_what_the_schema_refuses(kind, spec, field):
    validator = Draft202012Validator(as_json_schema(open_api(kind)))
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": "a"}}
    errors = list(validator.iter_errors({**body, "spec": spec}))
    said = " ".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    assert field in said, said


def test_unknown_fields_are_kept_for_the_webhook_to_name():
    """Pruned, a misspelt field would vanish silently (kubectl apply --validate=false); kept,
    /validate refuses it with rules lint's did-you-mean."""
    spec = open_api("GPUPolicy")["properties"]["spec"]
    assert spec["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["properties"]["match"]["x-kubernetes-preserve-unknown-fields"] is True


def cel_refusals(kind: str, spec: dict[str, Any]) -> list[str]:
    """The messages of the spec's ``x-kubernetes-validations`` that fail, evaluated as the
    API server does (``self`` is the spec), with celpy."""
    rules = open_api(kind)["properties"]["spec"].get("x-kubernetes-validations") or []
    environment = celpy.Environment()
    refused = []
    for rule in rules:
        program = environment.program(environment.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.json_to_cel(spec)}):
            refused.append(rule["message"])
    return refused


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        pytest.param({"exempt": ["hideGPUs"]}, "cannot exempt checks", id="an-exemption"),
        pytest.param(
            {"match": {"namespaces": ["team-b"]}}, "its own namespace only", id="other-namespaces"
        ),
        pytest.param(
            {"match": {"namespaceSelector": {"matchLabels": {"a": "b"}}}},
            "its own namespace only",
            id="a-namespace-selector",
        ),
        pytest.param(
            {"match": {"excludeNamespaces": ["x"]}}, "its own namespace only", id="an-exclusion"
        ),
        pytest.param(
            {"mutate": {"tolerations": [{"operator": "Exists"}]}},
            "cannot add tolerations",
            id="a-toleration",
        ),
        pytest.param(
            {"mutate": {"runtimeClassName": "nvidia"}}, "runtime class", id="a-runtime-class"
        ),
    ],
)
def test_the_api_server_refuses_a_namespace_policy_that_would_widen(spec, said):
    """Refused by the CRD's CEL rules: even while the webhook is down."""
    (refused,) = cel_refusals("GPUNamespacePolicy", spec)
    assert said in refused


def test_the_api_server_takes_a_namespace_policy_that_only_tightens():
    spec = {
        "match": {"podSelector": {"matchLabels": {"team": "a"}}},
        "validate": [{"maxGPUsPerPod": 2}],
        "mutate": {"env": {"hideGPUsFromNonGPUContainers": True}},
    }
    assert cel_refusals("GPUNamespacePolicy", spec) == []
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUNamespacePolicy", "spec": spec}
    assert list(document_validator("GPUNamespacePolicy").iter_errors(body)) == []


def test_an_exception_needs_checks_and_workloads():
    validator = document_validator("GPUPolicyException")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPolicyException", "spec": {}}
    said = " ".join(e.message for e in validator.iter_errors(body))
    assert "'checks' is a required property" in said
    assert "'workloads' is a required property" in said
