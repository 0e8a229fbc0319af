"""The core rules as admission policies (issue 43): generated from the rules, evaluated with
cel-python (tests/admissioncel.py) as the API server evaluates them, and held against the
webhook's own answer on every golden case it can judge."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.admissioncel import SCANNED, mutated, refusals, selects
from tests.builders import RULES
from tests.engine.evaluation.test_cases import (
    case_dirs,
    case_policy,
    inventory_view,
    load_request,
    rules_dir,
)
from tests.kubeschema import validation_error
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, Request
from webhook.engine.policy.admissioncel.pod import glob_regex, name_in
from webhook.engine.policy.admissioncel.policies import Generated, admission_policies
from webhook.files.rulefiles import load_policy

HERE = Path(__file__).resolve().parent / "admissionpolicies"
UPDATE = os.environ.get("GOLDEN_UPDATE") == "1"
# The API server version whose schemas the objects must satisfy: MutatingAdmissionPolicy is
# admissionregistration.k8s.io/v1 there.
KUBERNETES = "1.36.0"


def generated(rules: Path = RULES) -> Generated:
    return admission_policies(load_policy(str(rules)))


def by_name(objs: list[Mapping[str, Any]], kind: str, suffix: str) -> Mapping[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def access() -> Mapping[str, Any]:
    return by_name(generated().objects, "ValidatingAdmissionPolicy", "core-gpu-access")


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "research", **spec.pop("metadata", {})},
        "spec": {"containers": list(containers), **spec},
    }


def container(name: str = "main", **body: Any) -> dict[str, Any]:
    return {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", **body}


def env(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": n, "value": v} for n, v in pairs]


GPU = {"limits": {"nvidia.com/gpu": "1"}}
MOUNT = [{"name": "v", "mountPath": "/host"}]


def host(path: str, kind: str = "") -> list[dict[str, Any]]:
    return [{"name": "v", "hostPath": {"path": path, **({"type": kind} if kind else {})}}]


# --- the golden generation ----------------------------------------------------------------


def test_the_generated_policies_are_the_golden_ones_compared_as_objects() -> None:
    made = generated(HERE / "rules")
    got = {
        "files": {stem: list(objs) for stem, objs in made.files},
        "skipped": [str(s) for s in made.skipped],
    }
    golden = HERE / "expected.yaml"
    if UPDATE:
        golden.write_text(yaml.safe_dump(got, sort_keys=False, width=100))
    assert got == yaml.safe_load(golden.read_text())


@pytest.mark.parametrize("rules", [RULES, HERE / "rules"], ids=["shipped", "golden"])
def test_every_object_is_valid_to_the_kubernetes_136_schemas(rules: Path) -> None:
    import kubernetes_validate

    for obj in generated(rules).objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the failure
            pytest.fail(f"{obj['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}")
        assert validation_error(obj) is None


def test_the_shipped_rules_make_the_access_policy_and_the_two_mutating_policies() -> None:
    made = generated()
    stems = [stem for stem, _ in made.files]
    assert stems == [
        "core-gpu-access",
        "core-workload-quantities",
        "core-tolerations",
        "core-hide-gpus",
    ]
    kinds = [o["kind"] for o in made.objects]
    assert kinds == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    (left,) = [s for s in made.skipped if s.part == "env.hideGPUsFromNonGPUContainers"]
    assert left.rule == "hide-gpus-from-non-gpu-containers"
    assert left.reason.startswith("pods that ask for no GPU (whether one can land on a GPU node")


@pytest.mark.parametrize(
    ("action", "actions"),
    [("deny", ["Deny"]), ("warn", ["Warn"]), ("audit", ["Audit"])],
)
def test_a_checks_action_is_its_bindings_validation_actions(
    action: str, actions: list[str], tmp_path: Path
) -> None:
    (tmp_path / "s.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUSettings\nmetadata: {name: cluster}\n"
        f"spec: {{checks: {{gpuAccessWithoutRequest: {action}}}}}\n"
    )
    binding = by_name(generated(tmp_path).objects, "ValidatingAdmissionPolicyBinding", "access")
    assert binding["spec"]["validationActions"] == actions


# --- globs and selectors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        pytest.param("nvidia.com/mig-*", "nvidia.com/mig-1g.10gb", True, id="star-crosses-dots"),
        pytest.param("nvidia.com/mig-*", "nvidiaXcom/mig-1", False, id="a-dot-is-a-dot"),
        pytest.param("team-?", "team-a", True, id="question-mark-one-char"),
        pytest.param("team-?", "team-ab", False, id="question-mark-only-one"),
        pytest.param("a+b", "a+b", True, id="regex-metacharacters-literal"),
    ],
)
def test_a_glob_reads_in_re2_as_fnmatch_reads_it(pattern: str, name: str, matches: bool) -> None:
    regex = glob_regex(pattern)
    assert regex is not None
    assert (re.match(regex, name) is not None) is matches


def test_a_character_class_is_left_to_the_webhook() -> None:
    assert glob_regex("team-[ab]") is None
    assert name_in("r", ["nvidia.com/gpu", "team-[ab]"]) is None


# --- gpuAccessWithoutRequest, in-process --------------------------------------------------

ACCESS = [
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all")))), True, id="visible-devices-all"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "0,1")))), True, id="device-indexes"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "void")))), False, id="void-hides"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_VISIBLE_DEVICES", "none")))), False, id="the-last-value-counts"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", " all , void")))), False, id="a-void-entry-hides"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "")))), False, id="empty-exposes-nothing"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "$(X)")))), False, id="a-reference-left-to-the-webhook"),
    pytest.param(pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])), True, id="a-configmap-value-unseen"),
    pytest.param(pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}}])), False, id="a-field-left-to-the-webhook"),
    pytest.param(pod(container(env=env(("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")))), True, id="capabilities-alone"),
    pytest.param(pod(container(env=env(("NVIDIA_DRIVER_CAPABILITIES", "none")))), False, id="no-capabilities"),
    pytest.param(pod(container(env=env(("NVIDIA_DRIVER_CAPABILITIES", "all"), ("NVIDIA_VISIBLE_DEVICES", "void")))), False, id="capabilities-without-devices"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all")), resources=GPU)), False, id="a-gpu-container-may"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all")), resources={"claims": [{"name": "gpu"}]})), False, id="a-claim-counts-as-a-request"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all")), resources={"limits": {"example.com/accel": "1"}})), False, id="another-extended-resource-may-be-a-gpu-by-dra"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev/nvidia0")), True, id="hostpath-dev-nvidia0"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev")), True, id="hostpath-dev"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/")), True, id="hostpath-root"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/run/nvidia/driver/dev/nvidiactl")), True, id="hostpath-driver-root"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev/char/195:0")), True, id="hostpath-char-link"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev/char/10:200")), False, id="hostpath-other-char-link"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev/fuse", "CharDevice")), True, id="any-char-device"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev/shm")), False, id="hostpath-dev-shm"),
    pytest.param(pod(container(volumeMounts=MOUNT), volumes=host("/dev//nvidia0")), False, id="an-unclean-path-left-to-the-webhook"),
    pytest.param(pod(container(volumeMounts=[{"name": "v", "mountPath": "/h", "subPath": "null"}]), volumes=host("/dev")), False, id="a-subpath-left-to-the-webhook"),
    pytest.param(pod(container(volumeMounts=[{"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}]), volumes=host("/dev/null")), True, id="device-list-all"),
    pytest.param(pod(container(resources=GPU, volumeMounts=[{"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}]), volumes=host("/dev/null")), True, id="device-list-in-a-gpu-container"),
    pytest.param(pod(container(volumeMounts=[{"name": "v", "mountPath": "/run/nvidia-container-devices/all"}]), volumes=host("/dev/null")), False, id="device-list-by-another-path-is-not-read"),
    pytest.param(pod(container(volumeMounts=[{"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}]), volumes=[{"name": "v", "emptyDir": {}}]), False, id="device-list-from-an-emptydir"),
    pytest.param(pod(container(), initContainers=[container("init", env=env(("NVIDIA_VISIBLE_DEVICES", "all")))]), True, id="an-init-container"),
    pytest.param(pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all"))), metadata={"namespace": "gpu-operator"}), False, id="exempt-namespace"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "refused"), ACCESS)
def test_the_access_policy_refuses_what_the_webhook_refuses_without_cluster_state(
    obj: dict[str, Any], refused: bool
) -> None:
    failed = refusals(access(), obj, namespace=obj["metadata"]["namespace"])
    assert bool(failed) is refused
    decision = evaluate(
        Request(obj, namespace=obj["metadata"]["namespace"]),
        policy=load_policy(str(RULES)),
        inventory=NO_INVENTORY,
    )
    denied = [
        f for f in decision.findings if f.check == "gpuAccessWithoutRequest" and f.action == "deny"
    ]
    if refused:
        assert denied, "the policy refuses what the webhook admits"
        named = failed[0].split('"')[1]
        assert f'container "{named}"' in denied[0].message


def test_an_exemption_by_pod_label_spares_the_pod() -> None:
    vap = by_name(generated(HERE / "rules").objects, "ValidatingAdmissionPolicy", "access")
    bad = pod(container(env=env(("NVIDIA_VISIBLE_DEVICES", "all"))))
    assert refusals(vap, bad, namespace="research")
    bad["metadata"]["labels"] = {"app": "dcgm"}
    assert refusals(vap, bad, namespace="research") == []
    assert refusals(vap, pod(container()), namespace="nvidia-x") == []


# --- rule checks --------------------------------------------------------------------------


def quotas() -> Mapping[str, Any]:
    return by_name(generated(HERE / "rules").objects, "ValidatingAdmissionPolicy", "team-quotas")


def gpus(n: str, name: str = "main") -> dict[str, Any]:
    return container(name, resources={"limits": {"nvidia.com/gpu": n}})


RULE_CHECKS = [
    pytest.param(pod(gpus("8")), "team-a", {"tier": "batch"}, "the pod requests 8 GPUs; at most 4", id="too-many-per-pod"),
    pytest.param(pod(gpus("3")), "team-a", {"tier": "batch"}, 'container "main" requests a GPU count not allowed', id="a-count-not-allowed"),
    pytest.param(pod(gpus("2"), gpus("2", "b"), metadata={"labels": {"cost-center": "x"}}), "team-a", {"tier": "batch"}, None, id="allowed-counts-within-the-maximum"),
    pytest.param(pod(gpus("8")), "team-admin", {"tier": "batch"}, None, id="an-excluded-namespace"),
    pytest.param(pod(gpus("8")), "team-a", {"tier": "web"}, None, id="a-namespace-label-not-selected"),
    pytest.param(pod(gpus("8")), "research", {"tier": "batch"}, None, id="a-namespace-not-matched"),
    pytest.param(pod(gpus("8000m")), "team-a", {"tier": "batch"}, None, id="a-quantity-not-plain-left-to-the-webhook"),
    pytest.param(pod(gpus("2"), initContainers=[{**gpus("4", "warm"), "restartPolicy": "Always"}]), "team-a", {"tier": "batch"}, "the pod requests 6 GPUs", id="sidecars-add-up"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "namespace", "labels", "refused"), RULE_CHECKS)
def test_a_rules_per_pod_limits_hold_in_process(
    obj: dict[str, Any], namespace: str, labels: dict[str, str], refused: str | None
) -> None:
    failed = refusals(quotas(), obj, namespace=namespace, labels=labels)
    if refused is None:
        assert failed == []
    else:
        assert any(refused in m for m in failed), failed


def test_required_labels_are_said_with_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: labels}\n"
        "spec: {validate: [{requiredLabels: [cost-center, team]}]}\n"
    )
    vap = by_name(generated(tmp_path).objects, "ValidatingAdmissionPolicy", "labels")
    obj = pod(gpus("1"), metadata={"labels": {"team": "a"}})
    (message,) = refusals(vap, obj, namespace="x")
    assert "missing: cost-center. Add them" in message
    assert refusals(vap, pod(container()), namespace="x") == []


def test_a_gpu_count_maximum_is_judged_only_where_the_count_is_exact() -> None:
    vap = by_name(generated(HERE / "rules").objects, "ValidatingAdmissionPolicy", "small-mig-pods")
    two = {"limits": {"nvidia.com/mig-1g.10gb": "2"}}
    obj = pod(container(resources=two), metadata={"labels": {"team": "a"}})
    assert refusals(vap, obj, namespace="x")
    obj["spec"]["containers"][0]["resources"]["limits"]["example.com/nic"] = "1"
    assert refusals(vap, obj, namespace="x") == [], "another resource may be a GPU by DRA"


# --- tolerations --------------------------------------------------------------------------


def tolerations_policy(rules: Path = RULES) -> Mapping[str, Any]:
    return by_name(generated(rules).objects, "MutatingAdmissionPolicy", "core-tolerations")


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TOLERATIONS = [
    pytest.param(pod(gpus("1")), [GPU_TAINT], id="a-gpu-pod-gets-it"),
    pytest.param(pod(container()), None, id="a-cpu-pod-does-not"),
    pytest.param(pod(gpus("1"), tolerations=[{"operator": "Exists"}]), [{"operator": "Exists"}], id="a-blanket-toleration-covers-it"),
    pytest.param(pod(gpus("1"), tolerations=[GPU_TAINT]), [GPU_TAINT], id="already-there-as-extendedresourcetoleration-adds-it"),
    pytest.param(pod(gpus("1"), tolerations=[{"key": "x", "operator": "Exists"}]), [{"key": "x", "operator": "Exists"}, GPU_TAINT], id="appended"),
    pytest.param(pod(gpus("1"), tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]), [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}, GPU_TAINT], id="a-narrower-one-does-not-cover-it"),
    pytest.param(pod(container(resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}})), [GPU_TAINT], id="a-mig-pod"),
    pytest.param(pod(container(resources={"limits": {"nvidia.com/gpu": "0"}})), None, id="zero-gpus"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "tolerations"), TOLERATIONS)
def test_the_mutating_policy_adds_the_gpu_toleration_once(
    obj: dict[str, Any], tolerations: list[dict[str, Any]] | None
) -> None:
    out = mutated(tolerations_policy(), obj, namespace="research")
    assert out["spec"].get("tolerations") == tolerations
    assert mutated(tolerations_policy(), out, namespace="research") == out


def test_two_rules_add_theirs_in_rule_order() -> None:
    obj = pod(
        container(resources={"limits": {"nvidia.com/mig-1g.10gb": "1", "amd.com/gpu": "1"}}),
        metadata={"labels": {"team": "a"}},
    )
    out = mutated(tolerations_policy(HERE / "rules"), obj, namespace="x")
    keys = [t["key"] for t in out["spec"]["tolerations"]]
    assert keys == ["mig", "amd.com/gpu"]


# --- against the webhook, on every golden case --------------------------------------------

# The webhook's gpuAccessWithoutRequest denials of golden pods no policy can say: each needs
# what only the webhook knows or reads as the kubelet does.
LEFT_TO_THE_WEBHOOK = {
    "access-claim-nic-only-container-denied": "a claim the inventory shows gives no GPU",
    "access-hostpath-dev-through-subpath-denied": "a subPath joined to the host path",
    "access-nvidia-runtime-class-cpu-pod-denied": "the NVIDIA runtime class",
    "access-privileged-pod-on-dra-only-gpu-node-denied": "privileged, on a GPU node",
    "access-privileged-tolerating-gpu-taint-denied": "privileged, on a GPU node",
    "access-runtime-class-with-nvidia-handler-cpu-pod-denied": "a RuntimeClass's handler",
    "access-visible-devices-from-fields-and-references": "fields and $(VAR) references",
}


def create_cases(*, pods_only: bool) -> list[Any]:
    found = []
    for case in case_dirs():
        obj = yaml.safe_load((case / "object.yaml").read_text())
        request = load_request(case, obj)
        if request.operation != "CREATE" or request.sub_resource:
            continue
        if obj.get("kind") == "Pod" or not pods_only:
            found.append(pytest.param(case, id=case.name))
    return found


def applies(policy: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """The policies for pods see pods; the workload one the objects of its API groups (its
    validations say which kinds they are for)."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    if rules[0]["resources"] == ["pods"]:
        return obj.get("kind") == "Pod"
    return any(group in rule["apiGroups"] for rule in rules)


ACTION = {"Deny": "deny", "Warn": "warn", "Audit": "audit"}


def _findings(case: Path) -> list[tuple[str, str, str]]:
    expected = yaml.safe_load((case / "expected.yaml").read_text())
    return [(f["rule"], f["check"], f["action"]) for f in expected.get("findings") or []]


@pytest.mark.parametrize("case", create_cases(pods_only=False))
def test_a_policy_refuses_a_golden_object_only_where_the_webhook_finds_the_same(case: Path) -> None:
    """Never a refusal the webhook does not make (with the binding's action), and every
    access denial the webhook makes from the pod alone."""
    obj = yaml.safe_load((case / "object.yaml").read_text())
    request = load_request(case, obj)
    made = admission_policies(case_policy(rules_dir(case)))
    findings = _findings(case)
    refused_access = False
    for _, objs in made.files:
        policy, binding = objs
        if policy["kind"] != "ValidatingAdmissionPolicy" or not applies(policy, obj):
            continue
        if not selects(binding, request.effective_namespace, request.namespace_labels):
            continue
        failed = refusals(
            policy, obj, namespace=request.effective_namespace, labels=request.namespace_labels
        )
        if not failed:
            continue
        (action,) = [ACTION[a] for a in binding["spec"]["validationActions"]]
        name = policy["metadata"]["name"]
        if name.endswith("core-gpu-access"):
            refused_access = True
            assert ("builtin", "gpuAccessWithoutRequest", action) in findings
        elif "core-workload-quantities" in name:
            for message in failed:
                check = message.split("(")[1].split(")")[0]
                assert ("builtin", check, action) in findings, message
        else:
            rule = name.removeprefix("gpu-webhook-core-rule-")
            assert any(r == rule and a == action for r, _, a in findings), (name, failed)
    if obj.get("kind") != "Pod":
        return  # a workload's pods meet the access policy when they are created
    denies_access = ("builtin", "gpuAccessWithoutRequest", "deny") in findings
    if denies_access and not refused_access:
        assert case.name in LEFT_TO_THE_WEBHOOK
    if case.name in LEFT_TO_THE_WEBHOOK:
        assert not refused_access, "said in CEL now: take it off the list"


def mutating_cases() -> list[Any]:
    """The pod cases whose rules make a mutating policy (the toleration, hiding GPUs)."""
    return [
        p
        for p in create_cases(pods_only=True)
        if any(
            o["kind"] == "MutatingAdmissionPolicy"
            for o in admission_policies(case_policy(rules_dir(p.values[0]))).objects
        )
    ]


@pytest.mark.parametrize("case", mutating_cases())
def test_the_webhook_after_the_mutating_policies_gives_todays_object_and_answer(
    case: Path,
) -> None:
    """The policies add a toleration and hide GPUs only where the webhook does the same,
    and the webhook, called after them (the API server's order: MutatingAdmissionPolicies,
    then the webhooks), adds nothing twice: the object and the decision are today's."""
    policy = case_policy(rules_dir(case))
    made = admission_policies(policy)
    obj = yaml.safe_load((case / "object.yaml").read_text())
    request = load_request(case, obj)
    namespace, labels = request.effective_namespace, request.namespace_labels
    before = copy.deepcopy(obj)
    for _, objs in made.files:
        map_policy, binding = objs
        if map_policy["kind"] == "MutatingAdmissionPolicy" and selects(binding, namespace, labels):
            before = mutated(map_policy, before, namespace=namespace, labels=labels)
    want = yaml.safe_load((case / "expected-object.yaml").read_text())
    added = (before["spec"].get("tolerations") or [])[len(obj["spec"].get("tolerations") or []) :]
    assert all(t in (want["spec"].get("tolerations") or []) for t in added)
    after = Request(
        before,
        namespace=request.namespace,
        operation="CREATE",
        namespace_labels=request.namespace_labels,
    )
    decision = evaluate(after, policy=policy, inventory=inventory_view(case))
    result = jsonpatch.apply_patch(copy.deepcopy(before), list(decision.patch))
    assert result["spec"].get("tolerations") == want["spec"].get("tolerations")
    assert result == want
    assert [(f.rule, f.check, f.action) for f in decision.findings] == _findings(case)
    expected = yaml.safe_load((case / "expected.yaml").read_text())
    assert list(decision.warnings) == (expected.get("warnings") or [])
    assert decision.allowed is expected["allowed"]


# --- custom workloads' templates ----------------------------------------------------------


def workloads() -> Mapping[str, Any]:
    return by_name(generated().objects, "ValidatingAdmissionPolicy", "core-workload-quantities")


def pytorchjob(resources: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"containers": [container(resources=resources)]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}}}  # fmt: skip


def jobset(resources: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"template": {"spec": {"containers": [container(resources=resources)]}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"},
            "spec": {"replicatedJobs": [{"name": "w", "template": template}]}}  # fmt: skip


WORKLOADS = [
    pytest.param(pytorchjob({"requests": {"nvidia.com/gpu": "1"}}), "requestsWithoutLimits", id="requests-only-in-a-replica-map"),
    pytest.param(pytorchjob({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}), "requestsNotEqualLimits", id="unequal"),
    pytest.param(pytorchjob({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1.0"}}), None, id="equal-as-quantities"),
    pytest.param(pytorchjob({"limits": {"nvidia.com/gpu": "500m"}}), "fractionalQuantity", id="millis"),
    pytest.param(pytorchjob({"limits": {"nvidia.com/gpu": "2000m"}}), None, id="whole-millis"),
    pytest.param(jobset({"limits": {"nvidia.com/gpu": "0.5"}}), "fractionalQuantity", id="a-fraction-in-a-list-of-jobs"),
    pytest.param(jobset({"limits": {"nvidia.com/gpu": "1"}}), None, id="whole-gpus"),
    pytest.param(jobset({"requests": {"example.com/nic": "1"}}), None, id="not-a-gpu"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "check"), WORKLOADS)
def test_custom_workloads_templates_are_held_to_what_the_api_server_holds_pods_to(
    obj: dict[str, Any], check: str | None
) -> None:
    failed = refusals(workloads(), obj, namespace="research")
    decision = evaluate(
        Request(obj, namespace="research"), policy=load_policy(str(RULES)), inventory=NO_INVENTORY
    )
    if check is None:
        assert failed == []
    else:
        (message,) = failed
        assert f"({check})" in message
        assert check in [f.check for f in decision.findings if f.action == "deny"]


def test_every_cel_string_escape_is_one_cel_go_reads() -> None:
    """cel-python takes ``\\.`` in a string literal; cel-go refuses the expression."""
    made = generated(HERE / "rules").objects + generated().objects
    for obj in made:
        spec = obj.get("spec", {})
        texts = [v["expression"] for v in spec.get("variables") or []]
        texts += [v["expression"] for v in spec.get("validations") or []]
        texts += [v.get("messageExpression", "") for v in spec.get("validations") or []]
        texts += [m["jsonPatch"]["expression"] for m in spec.get("mutations") or []]
        for text in texts:
            assert not re.search(r"(?<!\\)(?:\\\\)*\\[^\\'\"abfnrtv]", text), text


# --- cost ---------------------------------------------------------------------------------

# The API server's limit per expression (k8s.io/apiserver/pkg/apis/cel/config.go,
# PerCallLimit): a cost above it is an evaluation error, which admits.
PER_CALL_LIMIT = 1_000_000


def big_pod(n: int) -> dict[str, Any]:
    """``n`` containers of ``n`` variables, mounts and GPU-like resources each, ``n``
    hostPath volumes of which a tenth hold device nodes: what any expression must walk. The
    first container asks for a GPU, so that every mutation has its work to do."""
    volumes = [{"name": f"v{i}", "hostPath": {"path": "/dev/nvidia0" if i % 10 == 0 else f"/data/{i}"}}
               for i in range(n)]  # fmt: skip
    containers = [
        container(
            f"c{i}",
            env=env(*[(f"V{j}", "x") for j in range(n)]),
            volumeMounts=[{"name": f"v{j}", "mountPath": f"/m/{j}"} for j in range(1, n, 10)],
            resources={"limits": {f"example.com/r{j}": "1" for j in range(n // 10)}},
        )
        for i in range(n)
    ]
    containers[0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    return pod(*containers, volumes=volumes)


def cost(policy: Mapping[str, Any], obj: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> int:
    """Our own conservative stand-in for cel-go's runtime cost (celpy has none): every node
    of every expression evaluated, each comprehension step included, and each element
    ``indexOf`` compares."""
    import celpy.evaluation

    count = -SCANNED[0]
    visit = celpy.evaluation.Evaluator.visit

    def counted(self: Any, tree: Any) -> Any:
        nonlocal count
        count += 1
        return visit(self, tree)

    with monkeypatch.context() as patched:
        patched.setattr(celpy.evaluation.Evaluator, "visit", counted)
        if policy["kind"] == "MutatingAdmissionPolicy":
            mutated(policy, obj, namespace="research")
        else:
            refusals(policy, obj, namespace="research")
    return count + SCANNED[0]


@pytest.mark.parametrize("suffix", ["core-gpu-access", "core-tolerations", "core-hide-gpus"])
def test_a_policys_cost_grows_with_the_pod_not_with_its_square(
    suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (policy,) = [o for o in generated().objects
                 if o["metadata"]["name"].endswith(suffix) and o["kind"].endswith("Policy")]  # fmt: skip
    small, large = (cost(policy, big_pod(n), monkeypatch) for n in (20, 40))
    # Four times the entries (n containers of n each): at most four times the cost, with
    # room for the constant part; a walk inside a walk of the same lists would be 8x. (The
    # hiding policy looks each hidden container's index up among the n names: n x n, as
    # the entries grow.)
    assert large <= 4.5 * small, (small, large)
    assert large < PER_CALL_LIMIT


@pytest.mark.parametrize(
    ("namespaces", "judged_in_team_a", "policies"),
    [
        pytest.param([], True, True, id="no-exception-namespaces"),
        pytest.param(["team-a"], False, True, id="a-named-one-is-left-out-of-every-binding"),
        pytest.param(["team-*"], False, False, id="a-pattern-leaves-the-checks-to-the-webhook"),
    ],
)
def test_no_policy_judges_where_a_gpu_policy_exception_may_waive(
    namespaces: list[str], judged_in_team_a: bool, policies: bool
) -> None:
    """An exception waives per workload and until it expires, which no in-process policy
    can know: it would deny what the webhook admits (issue 44 beside issue 43)."""
    policy = load_policy(str(RULES))
    settings = dataclasses.replace(policy.settings, exception_namespaces=tuple(namespaces))
    made = admission_policies(dataclasses.replace(policy, settings=settings))
    bindings = [o for o in made.objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert bool(bindings) is policies
    assert all(selects(b, "team-a") is judged_in_team_a for b in bindings)
    assert all(selects(b, "team-b") for b in bindings)
    said = {(s.rule, s.part) for s in made.skipped}
    assert (("settings", "exceptionNamespaces") in said) is (not policies)
    # An exception waives findings, never a patch: the mutating policies act everywhere.
    mutating = [o for o in made.objects if o["kind"] == "MutatingAdmissionPolicyBinding"]
    assert len(mutating) == 2
    assert all(selects(b, "team-a") for b in mutating)
