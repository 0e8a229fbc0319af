"""Hiding GPUs from containers that asked for none, in-process (issue 43): the
MutatingAdmissionPolicy ``core-hide-gpus``, evaluated with cel-python (tests/admissioncel.py)
as the API server evaluates it, hides only what the webhook would hide, with the webhook's
values, so that the webhook after it (the API server's order) gives today's object and
answer: on every golden case, every corpus pod and generated pods, with and without an
inventory."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admissioncel import mutated, selects
from tests.builders import CORPUS, RULES
from tests.engine.evaluation.test_matchconditions import CLUSTER, plain_pods
from tests.engine.policy.test_admissionpolicies import container, pod
from webhook.engine.enforcement.mutators import HIDE_GPUS
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView, Request
from webhook.engine.kube.workloads import KindTable
from webhook.engine.policy.admissioncel import hiding
from webhook.engine.policy.admissioncel.policies import admission_policies
from webhook.engine.policy.ruleset import Policy
from webhook.files.rulefiles import load_policy

SHIPPED = load_policy(str(RULES))
HIDDEN = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}, {"name": "CUDA_VISIBLE_DEVICES", "value": ""}]  # fmt: skip


_MADE: dict[int, tuple[Policy, list[tuple[Mapping[str, Any], Mapping[str, Any]]]]] = {}


def mutating(policy: Policy) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Every MutatingAdmissionPolicy of the rules with its binding, in the order made;
    once per policy (by identity: the policy is kept, so its id stays its own)."""
    known = _MADE.get(id(policy))
    if known is None or known[0] is not policy:
        made = [
            (objs[0], objs[1])
            for _, objs in admission_policies(policy).files
            if objs[0]["kind"] == "MutatingAdmissionPolicy"
        ]
        known = _MADE[id(policy)] = (policy, made)
    return known[1]


def hide_policy(policy: Policy = SHIPPED) -> Mapping[str, Any]:
    (found,) = [p for p, _ in mutating(policy) if p["metadata"]["name"].endswith("hide-gpus")]
    return found


def through_policies(
    policy: Policy, obj: Mapping[str, Any], namespace: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The pod after every MutatingAdmissionPolicy whose binding selects its namespace."""
    out = copy.deepcopy(dict(obj))
    for map_policy, binding in mutating(policy):
        if selects(binding, namespace, labels):
            out = mutated(map_policy, out, namespace=namespace, labels=labels)
    return out


def webhook(
    policy: Policy, view: InventoryView, obj: Mapping[str, Any], namespace: str
) -> tuple[dict[str, Any], tuple[Any, ...], tuple[str, ...], bool]:
    """The object as the webhook leaves it, and its findings, warnings and verdict."""
    request = Request(copy.deepcopy(dict(obj)), namespace=namespace, operation="CREATE")
    decision = evaluate(request, policy=policy, inventory=view)
    out = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), list(decision.patch))
    return out, decision.findings, decision.warnings, decision.allowed


def assert_todays_answer(
    policy: Policy, view: InventoryView, obj: Mapping[str, Any], namespace: str = "research"
) -> dict[str, Any]:
    """The webhook after the policies answers as the webhook alone, and the policies
    applied again change nothing; the pod after the policies is returned."""
    before = through_policies(policy, obj, namespace, {})
    assert through_policies(policy, before, namespace, {}) == before, "not idempotent"
    for section in ("initContainers", "containers"):
        pairs = zip(obj["spec"].get(section) or [], before["spec"].get(section) or [], strict=True)
        for old, new in pairs:
            names = [e.get("name") for e in old.get("env") or []]
            assert "NVIDIA_VISIBLE_DEVICES" not in names or new == old, "its own value touched"
    assert webhook(policy, view, before, namespace) == webhook(policy, view, obj, namespace)
    return before


def hidden_by_policy(obj: Mapping[str, Any], namespace: str = "research") -> list[str]:
    out = mutated(hide_policy(), obj, namespace=namespace)
    names = []
    for section in ("initContainers", "containers"):
        pairs = zip(obj["spec"].get(section) or [], out["spec"].get(section) or [], strict=True)
        for old, new in pairs:
            if old != new:
                names.append(new["name"])
    return names


# --- what the policy hides ----------------------------------------------------------------

GPU = {"limits": {"nvidia.com/gpu": "1"}}


def gpu_pod(*others: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return pod(container("train", resources=GPU), *others, **spec)


def sidecar(name: str = "logs", **body: Any) -> dict[str, Any]:
    return {"name": name, "image": "fluent/fluent-bit:3.1", **body}


def env(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": n, "value": v} for n, v in pairs]


HIDES = [
    pytest.param(gpu_pod(sidecar()), ["logs"], id="a-sidecar-without-env"),
    pytest.param(gpu_pod(sidecar(env=env(("LEVEL", "info")))), ["logs"], id="a-sidecar-with-env"),
    pytest.param(gpu_pod(sidecar(env=[])), ["logs"], id="an-empty-env"),
    pytest.param(gpu_pod(sidecar(env=env(("CUDA_VISIBLE_DEVICES", "0")))), ["logs"], id="its-cuda-visible-devices-kept"),
    pytest.param(gpu_pod(sidecar(env=env(("A", "1"), ("A", "2")))), ["logs"], id="a-variable-named-twice"),
    pytest.param(gpu_pod(sidecar(env=[{"value": "x"}])), ["logs"], id="a-variable-without-a-name"),
    pytest.param(gpu_pod(sidecar(env=env(("NVIDIA_VISIBLE_DEVICES", "all")))), [], id="its-own-visible-devices-left-to-the-check"),
    pytest.param(gpu_pod(sidecar(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])), [], id="its-own-visible-devices-from-a-field"),
    pytest.param(gpu_pod(initContainers=[sidecar("fetch")]), ["fetch"], id="an-init-container"),
    pytest.param(gpu_pod(initContainers=[sidecar("proxy", restartPolicy="Always")]), ["proxy"], id="a-native-sidecar"),
    pytest.param(pod(sidecar(), initContainers=[container("warm", resources=GPU)]), ["logs"], id="a-gpu-init-container-makes-a-gpu-pod"),
    pytest.param(gpu_pod(sidecar(resources={"limits": {"example.com/nic": "1"}})), ["logs"], id="another-extended-resource-is-no-gpu"),
    pytest.param(gpu_pod(sidecar(resources={"limits": {"nvidia.com/gpu": "0"}})), ["logs"], id="zero-gpus"),
    pytest.param(gpu_pod(sidecar(resources={"requests": {"nvidia.com/gpu": "0"}})), [], id="a-lone-zero-request-is-a-quantity-problem"),
    pytest.param(gpu_pod(sidecar(resources={"claims": [{"name": "nic"}]})), [], id="a-claim-holder-left-to-the-inventory"),
    pytest.param(pod(container("train", resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}}), sidecar()), ["logs"], id="a-mig-pod"),
    pytest.param(pod(container("train", resources={"limits": {"amd.com/gpu": "2"}}), sidecar()), ["logs"], id="another-vendors-gpu"),
    pytest.param(pod(container("train", resources={"claims": [{"name": "gpu"}]}), sidecar(), resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}]), [], id="a-claim-only-pod-left-to-the-inventory"),
    pytest.param(pod(sidecar(), tolerations=[{"operator": "Exists"}]), [], id="a-cpu-pod-tolerating-gpu-nodes-left-to-the-inventory"),
    pytest.param(pod(sidecar()), [], id="a-cpu-pod"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "names"), HIDES)
def test_the_policy_hides_the_containers_the_webhook_surely_hides(
    obj: dict[str, Any], names: list[str]
) -> None:
    assert hidden_by_policy(obj) == names
    for view in (NO_INVENTORY, CLUSTER):
        assert_todays_answer(SHIPPED, view, obj)


def test_it_appends_as_the_webhook_appends() -> None:
    obj = gpu_pod(sidecar(env=env(("LEVEL", "info"))), sidecar("keep", env=env(("CUDA_VISIBLE_DEVICES", "1"))))  # fmt: skip
    out = mutated(hide_policy(), obj, namespace="research")
    logs, keep = out["spec"]["containers"][1:]
    assert logs["env"] == env(("LEVEL", "info")) + HIDDEN
    assert keep["env"] == env(("CUDA_VISIBLE_DEVICES", "1")) + HIDDEN[:1]
    assert out["spec"]["containers"][0] == obj["spec"]["containers"][0]


def test_it_sets_the_webhooks_values() -> None:
    assert hiding.HIDE_GPUS == HIDE_GPUS


def test_an_exempt_namespace_is_left_alone() -> None:
    """rules/05-gpu-stack-exempt.yaml spares the GPU stack's namespaces ``hideGPUs``."""
    assert hidden_by_policy(gpu_pod(sidecar()), namespace="nvidia-gpu-operator") == []


def rules(tmp_path: Path, *specs: str) -> Policy:
    for i, spec in enumerate(specs):
        (tmp_path / f"r{i}.yaml").write_text(
            f"apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {{name: r{i}}}\n"
            f"spec: {spec}\n"
        )
    return load_policy(str(tmp_path))


def test_a_gpu_pods_rule_hides_in_the_pods_it_matches(tmp_path: Path) -> None:
    policy = rules(
        tmp_path,
        "{match: {namespaces: [team-*]}, mutate: {env: {hideGPUsFromNonGPUContainers: gpuPods}}}",
    )
    made = hide_policy(policy)
    obj = gpu_pod(sidecar())
    assert mutated(made, obj, namespace="team-a")["spec"]["containers"][1]["env"] == HIDDEN
    assert mutated(made, obj, namespace="research") == obj
    for namespace in ("team-a", "research"):
        assert_todays_answer(policy, NO_INVENTORY, obj, namespace)


def test_a_rule_exempting_pods_by_label_spares_them(tmp_path: Path) -> None:
    policy = rules(
        tmp_path,
        "{match: {gpuCount: {min: 0}}, mutate: {env: {hideGPUsFromNonGPUContainers: gpuNodes}}}",
        "{match: {podSelector: {matchLabels: {app: dcgm}}}, exempt: [hideGPUs]}",
    )
    obj = gpu_pod(sidecar())
    assert mutated(hide_policy(policy), obj, namespace="x") != obj
    obj["metadata"]["labels"] = {"app": "dcgm"}
    assert mutated(hide_policy(policy), obj, namespace="x") == obj
    assert_todays_answer(policy, NO_INVENTORY, obj, "x")


GOLDEN_RULES = load_policy(str(Path(__file__).resolve().parent / "admissionpolicies" / "rules"))


@pytest.mark.parametrize(
    ("namespace", "labels", "hidden"),
    [
        pytest.param("team-a", {}, ["logs"], id="a-matched-namespace"),
        pytest.param("research", {}, [], id="a-namespace-not-matched"),
        pytest.param("team-a", {"app": "dcgm"}, [], id="exempt-by-pod-label"),
    ],
)
def test_the_golden_rules_hide_where_they_match_and_exempt_nowhere(
    namespace: str, labels: dict[str, str], hidden: list[str]
) -> None:
    obj = gpu_pod(sidecar(), metadata={"labels": labels})
    out = mutated(hide_policy(GOLDEN_RULES), obj, namespace=namespace)
    assert [c["name"] for c in out["spec"]["containers"] if c.get("env") == HIDDEN] == hidden
    assert_todays_answer(GOLDEN_RULES, NO_INVENTORY, obj, namespace)


def test_a_rule_it_cannot_match_is_left_to_the_webhook(tmp_path: Path) -> None:
    policy = rules(
        tmp_path,
        "{match: {namespaces: ['team-[ab]']}, mutate: {env: {hideGPUsFromNonGPUContainers: "
        "gpuPods}}}",
    )
    made = admission_policies(policy)
    assert not [o for o in made.objects if o["metadata"]["name"].endswith("hide-gpus")]
    said = [str(s) for s in made.skipped if s.part == "env.hideGPUsFromNonGPUContainers"]
    assert any("character class" in s for s in said), said


def test_without_hiding_rules_there_is_no_policy(tmp_path: Path) -> None:
    policy = rules(tmp_path, "{validate: [{maxGPUsPerPod: 8}]}")
    assert [p for p, _ in mutating(policy) if "hide" in p["metadata"]["name"]] == []


# --- against the webhook: the corpus and generated pods ------------------------------------


def corpus_pods() -> Iterator[Any]:
    """Each corpus Pod, and the pod each pod template of a workload makes."""
    table = KindTable()
    for path in sorted(CORPUS.rglob("*.yaml")):
        if "_unparseable" in path.parts:
            continue
        for number, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if not isinstance(doc, dict) or "kind" not in doc:
                continue
            for i, template in enumerate(table.templates(doc) or []):
                if template.singles:
                    continue
                labels = dict(template.labels)
                made = {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "p", "labels": labels}, "spec": template.spec}  # fmt: skip
                rel = path.relative_to(CORPUS)
                yield pytest.param(json.loads(json.dumps(made)), id=f"{rel}#{number}.{i}")


@pytest.mark.parametrize("obj", list(corpus_pods()))
@pytest.mark.parametrize("view", [NO_INVENTORY, CLUSTER], ids=["no-inventory", "cluster"])
def test_a_corpus_pod_gets_todays_answer_after_the_policies(
    obj: dict[str, Any], view: InventoryView
) -> None:
    assert_todays_answer(SHIPPED, view, obj, "default")


def as_pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Pod":
        return obj
    template = obj["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template["metadata"]},
            "spec": template["spec"]}  # fmt: skip


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=plain_pods(), namespace=st.sampled_from(["default", "kube-system", "gpu-operator"]))
def test_a_generated_pod_gets_todays_answer_after_the_policies(
    obj: dict[str, Any], namespace: str
) -> None:
    for view in (NO_INVENTORY, CLUSTER):
        assert_todays_answer(SHIPPED, view, as_pod(obj), namespace)


MANY = 600
ADVERSARIAL = [
    pytest.param(pod(), id="no-containers"),
    pytest.param(gpu_pod(*[sidecar(f"s{i}") for i in range(MANY)]), id="many-containers"),
    pytest.param(gpu_pod(sidecar(env=[{"name": "A"}] * MANY)), id="many-env-entries"),
    pytest.param(gpu_pod({"image": "x"}), id="a-container-without-a-name"),
    pytest.param(gpu_pod(sidecar(resources={"limits": {"n" * 300_000: "1"}})), id="a-resource-name-300k"),
    pytest.param(gpu_pod(sidecar(resources={"limits": {"nvidia.com/gpu": 1.5}})), id="a-number-not-a-string"),
]  # fmt: skip


@pytest.mark.parametrize("obj", ADVERSARIAL)
def test_an_adversarial_pod_never_makes_the_policy_err(obj: dict[str, Any]) -> None:
    """``mutated`` raises on an evaluation error (with ``failurePolicy: Ignore``: nothing
    hidden)."""
    out = mutated(hide_policy(), obj, namespace="research")
    assert mutated(hide_policy(), out, namespace="research") == out


# The cost of the policy over the largest pods: test_admissionpolicies, with the others.
