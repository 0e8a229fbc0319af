"""Rule values checked against the cluster (issue 42): each typo class a golden case
(``tests/cases/_policyvalues/<class>/``), as a rule file and as a policy object; and a
differential that mutates one character of every cluster-matched value of the shipped
examples (``rules/90-examples.yaml``) against the example inventory and requires a finding.

The other entry points read the same golden cases: ``rules lint``
(tests/commands/test_rules_values.py), serve's log and metric, ``/validate`` and the
object's status (tests/admission/test_service_policyvalues.py)."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import pod
from tests.policyvalues import CASE_PARAMS, Case, golden_cases
from webhook.engine.evaluation.evaluate import evaluate, policy_findings
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.kube.quantity import parse_quantity
from webhook.engine.policy.ruleset import Policy, PolicyError, compile_policy
from webhook.files.inventoryfile import load_inventory_file
from webhook.files.rulefiles import load_policy
from webhook.files.ruleobjects import RuleObject

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "rules" / "90-examples.yaml"
INVENTORY = REPO / "examples" / "inventory.yaml"


def as_object(case: Case) -> Policy:
    """The case's policy as the API server would serve it: a GPUPolicy object."""
    obj = RuleObject.of({**case.document, "metadata": {"name": case.policy_name}}, kind="GPUPolicy")
    return compile_policy([obj.document])


def test_every_typo_class_of_the_issue_has_a_golden_case() -> None:
    assert {c.name for c in golden_cases()} >= {
        "product",
        "glob",
        "label-value",
        "memory",
        "mig-profile",
        "class",
        "namespace",
    }


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_a_typo_in_a_rule_file_is_found_with_what_the_cluster_has_instead(case: Case) -> None:
    (found,) = policy_findings(
        load_policy(str(case.directory / "rules")), case.view(), namespaces=case.namespaces
    )

    assert found.core == case.says
    assert found.blocking is case.blocking
    assert (
        found.message
        == f"rule {case.policy_name} ({case.directory / 'rules' / 'policy.yaml'}): {case.says}"
    )


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_the_same_typo_in_a_policy_object_says_the_same_and_names_the_object(case: Case) -> None:
    (found,) = policy_findings(as_object(case), case.view(), namespaces=case.namespaces)

    assert found.core == case.says
    assert found.message == (
        f"rule {case.policy_name} (GPUPolicy object {case.policy_name}): {case.says}"
    )


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_the_corrected_value_is_no_finding(case: Case) -> None:
    guess = re.search(r"did you mean (.+?)\?(?: |$)", case.says)
    assert guess is not None, case.says
    text = (case.directory / "rules" / "policy.yaml").read_text()
    value = re.search(r"(\S+) \(spec", case.says)
    assert value is not None
    fixed = text.replace(value.group(1), guess.group(1))
    if case.name == "memory":  # the guess is a number with a remark
        fixed = text.replace("800Gi", "80Gi")
    policy = compile_policy([RuleObject.of(yaml.safe_load(fixed), kind="GPUPolicy").document])

    assert policy_findings(policy, case.view(), namespaces=case.namespaces) == []


def test_a_value_only_a_node_pool_brings_is_said_as_such_not_as_a_typo(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUNodePool\nmetadata: {name: b200-pool}\n"
        "spec:\n  labels: {nvidia.com/gpu.product: NVIDIA-B200}\n"
        "  allocatable: {nvidia.com/gpu: '8', memory: 2000Gi, cpu: '190'}\n  maxNodes: 2\n"
        "---\napiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: b200-only}\n"
        "spec:\n  validate:\n  - allowedProducts: [NVIDIA-B200]\n"
    )
    policy = load_policy(str(tmp_path))

    (found,) = policy_findings(policy, load_inventory_file(str(INVENTORY)).view())

    assert found.pool == "b200-pool"
    assert found.blocking is False
    assert found.core == (
        "GPU product NVIDIA-B200 (spec.validate[0].allowedProducts[0]): no node has it yet; "
        "pool b200-pool may bring it"
    )


def test_without_an_inventory_nothing_is_called_a_typo() -> None:
    case = golden_cases()[0]
    assert policy_findings(load_policy(str(case.directory / "rules")), InventoryView(None)) == []


# --- the differential: one character of each value of the shipped examples -------------


@functools.cache
def examples_text() -> str:
    """``rules/90-examples.yaml`` with its examples uncommented."""
    lines = []
    for line in EXAMPLES.read_text().splitlines():
        if line.startswith("# ---") or line.startswith("# #"):
            lines.append("---" if line.startswith("# ---") else "")
        elif line.startswith("# ") or line == "#":
            lines.append(line[2:])
    return "\n".join(lines)


def example_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(examples_text()) if isinstance(d, dict) and "kind" in d]


def example_view() -> InventoryView:
    # The examples name the GPU operator's RuntimeClass; the example inventory lists none.
    return dataclasses.replace(
        load_inventory_file(str(INVENTORY)).view(), runtime_classes=frozenset({"nvidia"})
    )


NAMESPACES = ("vision", "vision-dev", "team-a", "monitoring", "default", "kube-system")


def cluster_names() -> set[str]:
    """Every name the example cluster has, read here from the file as plainly as possible
    (not through the engine): GPU node label values, resources and MIG products."""
    raw = yaml.safe_load(INVENTORY.read_text())
    names: set[str] = set(NAMESPACES) | {"nvidia"}
    for node in raw["items"]:
        allocatable = node["status"].get("allocatable") or {}
        if not any(k.startswith("nvidia.com/") for k in allocatable):
            continue
        labels = node["metadata"].get("labels") or {}
        names |= set(labels.values())
        product = labels.get("nvidia.com/gpu.product", "")
        for resource in allocatable:
            names.add(resource)
            if resource.startswith("nvidia.com/mig-"):
                names.add(f"{product}-MIG-{resource.removeprefix('nvidia.com/mig-')}")
    return names


MOST_MEMORY = 80 * 2**30  # the A100s' and H100s' 80 GB


def most_units() -> int:
    """The most units of one GPU resource a node has (14 MIG slices of one profile)."""
    raw = yaml.safe_load(INVENTORY.read_text())
    return max(
        int(amount)
        for node in raw["items"]
        for name, amount in (node["status"].get("allocatable") or {}).items()
        if name.startswith("nvidia.com/")
    )


def cluster_values(doc: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str, str]]:
    """(path in the document, kind, value) of each value a GPUPolicy matches against the
    cluster: product globs, affinity values, GPU memory, counts, namespaces, RuntimeClass,
    the avoided label's value. Limits a cluster has no say in (maxGPUsPerPod, labels of
    pods, priority classes) are not values of the cluster."""
    spec = doc.get("spec") or {}
    for at, name in enumerate((spec.get("match") or {}).get("namespaces") or []):
        yield ("spec", "match", "namespaces", at), "name", name
    for index, entry in enumerate(spec.get("validate") or []):
        for at, product in enumerate(entry.get("allowedProducts") or []):
            yield ("spec", "validate", index, "allowedProducts", at), "name", product
        if "minGPUMemory" in entry:
            yield ("spec", "validate", index, "minGPUMemory"), "memory", entry["minGPUMemory"]
        for at, count in enumerate(entry.get("allowedGPUCounts") or []):
            yield ("spec", "validate", index, "allowedGPUCounts", at), "count", str(count)
    mutate = spec.get("mutate") or {}
    affinity = mutate.get("nodeAffinity") or {}
    for index, requirement in enumerate(affinity.get("required") or []):
        for at, value in enumerate(requirement.get("values") or []):
            yield ("spec", "mutate", "nodeAffinity", "required", index, "values", at), "name", value
    for index, preference in enumerate(affinity.get("preferred") or []):
        for e, expression in enumerate(preference.get("matchExpressions") or []):
            for at, value in enumerate(expression.get("values") or []):
                path = ("spec", "mutate", "nodeAffinity", "preferred", index)
                yield (*path, "matchExpressions", e, "values", at), "name", value
    if "gpuMemory" in affinity:
        yield (
            ("spec", "mutate", "nodeAffinity", "gpuMemory", "min"),
            "memory",
            affinity["gpuMemory"]["min"],
        )
    if "runtimeClassName" in mutate:
        yield ("spec", "mutate", "runtimeClassName"), "name", mutate["runtimeClassName"]
    if (mutate.get("avoidGPUNodes") or {}).get("value"):
        yield ("spec", "mutate", "avoidGPUNodes", "value"), "name", mutate["avoidGPUNodes"]["value"]


def one_character_typos(value: str) -> Iterator[str]:
    """Each character replaced by another: a digit by the next, anything else by x (y)."""
    for at, char in enumerate(value):
        other = str((int(char) + 1) % 10) if char.isdigit() else ("y" if char == "x" else "x")
        yield value[:at] + other + value[at + 1 :]


def nothing_has(kind: str, value: str) -> bool:
    """The independent oracle: the mutated value matches nothing the cluster has."""
    if kind == "memory":
        try:
            return parse_quantity(value) > MOST_MEMORY
        except ValueError:
            return True  # not a quantity: the schema's problem, still a problem
    if kind == "count":
        return not value.isdigit() or int(value) > most_units()
    return not any(fnmatch.fnmatchcase(name, value) for name in cluster_names())


def with_value(doc: dict[str, Any], path: tuple[Any, ...], value: str) -> dict[str, Any]:
    changed = yaml.safe_load(yaml.safe_dump(doc))
    node = changed
    for key in path[:-1]:
        node = node[key]
    old = node[path[-1]]
    node[path[-1]] = int(value) if isinstance(old, int) and value.isdigit() else value
    return changed


def mutations() -> list[Any]:
    params = []
    for doc in example_documents():
        if doc.get("kind") != "GPUPolicy":
            continue
        for path, kind, value in cluster_values(doc):
            for typo in one_character_typos(str(value)):
                if nothing_has(kind, typo):
                    dotted = ".".join(str(p) for p in path)
                    name = doc["metadata"]["name"]
                    params.append(pytest.param(doc, path, kind, typo, id=f"{name}:{dotted}={typo}"))
    return params


def test_the_examples_themselves_are_no_finding_on_the_example_cluster() -> None:
    docs = example_documents()
    policy = compile_policy([RuleObject.of(d, kind=d["kind"]).document for d in docs])
    assert policy_findings(policy, example_view(), namespaces=NAMESPACES) == []


def test_the_differential_mutates_every_kind_of_value_of_every_example_policy() -> None:
    params = mutations()
    fields = {next(p for p in reversed(param.values[1]) if isinstance(p, str)) for param in params}
    # The examples' counts (1, 2, 4, 8) mutated by one digit are counts a node holds (up to
    # 14 MIG slices): legitimate policies, never required to be findings.
    assert fields == {
        "namespaces",
        "allowedProducts",
        "minGPUMemory",
        "values",
        "min",
        "runtimeClassName",
        "value",
    }
    assert {param.values[2] for param in params} == {"name", "memory"}


@pytest.mark.parametrize(("doc", "path", "kind", "typo"), mutations())
def test_one_character_typo_in_any_example_value_is_a_finding(
    doc: dict[str, Any], path: tuple[Any, ...], kind: str, typo: str
) -> None:
    changed = with_value(doc, path, typo)
    try:
        policy = compile_policy([RuleObject.of(changed, kind="GPUPolicy").document])
    except PolicyError:
        assert kind == "memory"  # not a quantity: refused by lint, a finding of its own
        return
    found = [u.path for u in policy_findings(policy, example_view(), namespaces=NAMESPACES)]
    assert any(_same_path(p, path) for p in found), (typo, found)


def _same_path(written: str, path: tuple[Any, ...]) -> bool:
    """``spec.validate[0].allowedProducts[1]`` against ("spec", "validate", 0, ...)."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return written == text


BLOCKING = [pytest.param(c, id=c.name) for c in golden_cases() if c.blocking]


def tolerating_pod(namespace: str) -> dict[str, Any]:
    """A one-GPU pod of ``namespace`` that tolerates the GPU taint: only the rule stops it."""
    obj = pod(gpus=1)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    return obj


@pytest.mark.parametrize("case", BLOCKING)
def test_a_pod_such_a_rule_denies_is_told_the_rule_cannot_be_met_never_to_use_a_node(
    case: Case,
) -> None:
    policy = load_policy(str(case.directory / "rules"))
    namespace = next(iter(case.document["spec"].get("match", {}).get("namespaces") or []), "a")
    obj = tolerating_pod(namespace)
    (unmet,) = policy_findings(policy, case.view())

    decision = evaluate(Request(obj, namespace=namespace), policy=policy, inventory=case.view())

    # A RuntimeClass is judged by the built-in check, which names the rule that set it.
    rule_denials = [f for f in decision.denials if f.rule in (case.policy_name, "builtin")]
    assert [f.message for f in rule_denials] == [unmet.denial], decision.denials
    assert all("use that node" not in f.message for f in decision.denials)
    assert "Ask the cluster admin to fix the rule" in unmet.denial


@pytest.mark.parametrize("action", ["warn", "audit"])
def test_a_warning_or_audit_of_such_a_rule_says_the_rule_cannot_be_met_too(action: str) -> None:
    (case,) = [c for c in golden_cases() if c.name == "product"]
    doc = case.document
    doc["spec"]["validate"][0]["action"] = action
    policy = compile_policy([RuleObject.of(doc, kind="GPUPolicy").document])
    obj = tolerating_pod("vision")

    decision = evaluate(Request(obj, namespace="vision"), policy=policy, inventory=case.view())

    assert decision.allowed
    (found,) = [f for f in decision.findings if f.rule == case.policy_name]
    assert found.message.startswith(
        "rule vision-products (GPUPolicy object vision-products) cannot be met on this cluster"
    )
    said = [*decision.warnings, *decision.audit.values()]
    assert any("cannot be met on this cluster" in text for text in said), said
    assert not any("Select allowed products" in text for text in said), said


def test_a_product_a_karpenter_pool_of_unlabelled_gpus_may_bring_is_no_typo() -> None:
    """Karpenter's GPU pools are sized through the catalogue, whose nodes carry the
    provider's labels, not GPU feature discovery's product: any product may come."""
    (case,) = [c for c in golden_cases() if c.name == "product"]
    karpenter = REPO / "tests" / "cases" / "_inventories" / "karpenter-aws.yaml"

    found = policy_findings(
        load_policy(str(case.directory / "rules")), load_inventory_file(str(karpenter)).view()
    )

    assert [(u.pool != "", u.blocking) for u in found] == [(True, False)]
    assert "no node has it yet; pool" in found[0].core
