"""The core rules' admission policies as kustomize and the chart install them (issue 43):
generated from rules/ and never stale, valid to Kubernetes' schemas, and, as rendered,
refusing GPU access without a GPU request and adding the GPU toleration with no webhook to
ask (evaluated with cel-python, tests/admissioncel.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.admissioncel import mutated, refusals
from tests.builders import ROOT, RULES
from tests.deploy.test_chart import kind, run_helm
from tests.deploy.test_manifests import kubectl
from tests.deploy.test_manifests import render as kustomize
from tests.kubeschema import validation_error
from webhook.engine.policy.admissioncel.policies import admission_policies
from webhook.files.rulefiles import load_policy

MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
CORE = ("core-gpu-access", "core-workload-quantities", "core-tolerations", "core-hide-gpus")


def core(objs: Any) -> list[dict[str, Any]]:
    return [o for o in objs if any(o["metadata"]["name"].endswith(c) for c in CORE)]


def without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {"name": obj["metadata"]["name"]}}


def chart(
    values: dict[str, Any] | None = None, *, serves_map: bool = True, **where: Any
) -> list[dict[str, Any]]:
    extra = ("--api-versions", MAP_API) if serves_map else ()
    done = run_helm("template", *extra, values=values, **where)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def cuda_pod(**spec: Any) -> dict[str, Any]:
    body = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    body.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "research"},
            "spec": {"containers": [body], **spec}}  # fmt: skip


VISIBLE_ALL = cuda_pod(container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
DEV_NVIDIA0 = cuda_pod(
    container={"volumeMounts": [{"name": "dev", "mountPath": "/dev/nvidia0"}]},
    volumes=[{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}],
)
# A rule file of a release's own: the shipped policies would not know its exemption.
MINE = (
    "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: monitoring}\n"
    "spec: {match: {namespaces: [monitoring]}, exempt: [gpuAccessWithoutRequest]}\n"
)
GPU_POD = cuda_pod(container={"resources": {"limits": {"nvidia.com/gpu": "1"}}})


def test_the_generated_files_are_not_stale() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-admission-policies"), "--check"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_kustomize_installs_the_validating_policies_of_the_shipped_rules() -> None:
    generated = admission_policies(load_policy(str(RULES))).objects
    installed = core(kustomize("base"))
    validating = [o for o in generated if o["kind"].startswith("Validating")]
    order = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731 - kustomize sorts by kind
    assert sorted((without_labels(o) for o in installed), key=order) == sorted(
        validating, key=order
    )
    for obj in installed:
        assert validation_error(obj) is None, validation_error(obj)


def overlay(tmp_path: Path) -> list[dict[str, Any]]:
    """An overlay of the base with the component, as kustomize renders it."""
    deploy = os.path.relpath(ROOT / "deploy", tmp_path)  # kustomize takes no absolute root
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{deploy}/base]\ncomponents: [{deploy}/components/core-mutations]\n"
    )
    done = subprocess.run([kubectl(), "kustomize", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_component_adds_the_mutating_policies_to_an_overlay(tmp_path: Path) -> None:
    generated = admission_policies(load_policy(str(RULES))).objects
    mutating = [o for o in generated if o["kind"].startswith("Mutating")]
    installed = [
        without_labels(o) for o in core(overlay(tmp_path)) if o["kind"].startswith("Mutating")
    ]
    order = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731 - kustomize sorts by kind
    assert sorted(installed, key=order) == sorted(mutating, key=order)


@pytest.mark.slow
def test_the_chart_renders_them_with_its_names_and_namespaces() -> None:
    objs = chart({"fullnameOverride": "gpu-policy", "excludedNamespaces": ["batch-infra"]},
                 namespace="platform")  # fmt: skip
    names = sorted(o["metadata"]["name"] for o in core(objs))
    assert (
        names
        == ["gpu-policy-core-gpu-access"] * 2
        + ["gpu-policy-core-hide-gpus"] * 2
        + ["gpu-policy-core-tolerations"] * 2
        + ["gpu-policy-core-workload-quantities"] * 2
    )
    for binding in [o for o in core(objs) if o["kind"].endswith("Binding")]:
        assert binding["spec"]["policyName"] == binding["metadata"]["name"]
        (by_name,) = [t for t in binding["spec"]["matchResources"]["namespaceSelector"]
                      ["matchExpressions"] if t["key"] == "kubernetes.io/metadata.name"]  # fmt: skip
        assert by_name["values"] == ["kube-system", "platform", "gpu-operator", "batch-infra"]
    for obj in core(objs):
        assert validation_error(obj) is None, validation_error(obj)


@pytest.mark.slow
def test_the_chart_renders_the_mutating_policies_only_where_the_api_server_serves_them() -> None:
    kinds = {o["kind"] for o in core(chart(serves_map=False))}
    assert kinds == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"admissionPolicies": {"coreRules": {"enabled": False}}}, id="disabled"),
        pytest.param({"admissionPolicies": {"enabled": False}}, id="all-policies-disabled"),
        pytest.param({"rules": {"files": {"50-mine.yaml": MINE}}}, id="rules-of-your-own"),
        pytest.param({"rules": {"existingConfigMap": "mine"}}, id="a-configmap-of-rules"),
    ],
)
def test_the_chart_renders_none_where_they_are_off_or_not_of_the_rules_in_use(
    values: dict[str, Any],
) -> None:
    assert core(chart(values)) == []


SIDECAR = {"name": "logs", "image": "fluent/fluent-bit:3.1"}
HIDDEN = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}, {"name": "CUDA_VISIBLE_DEVICES", "value": ""}]  # fmt: skip


def down(objs: list[dict[str, Any]]) -> None:
    """What the API server does alone (the webhook scaled to 0, failurePolicy Ignore) with
    the rendered policies: refuses GPU access without a GPU request, adds the GPU
    toleration and hides GPUs from a GPU pod's other containers."""
    (vap,) = [
        o for o in kind(objs, "ValidatingAdmissionPolicy") if "gpu-access" in o["metadata"]["name"]
    ]
    for bad in (VISIBLE_ALL, DEV_NVIDIA0):
        assert refusals(vap, bad, namespace="research")
    assert refusals(vap, GPU_POD, namespace="research") == []
    maps = kind(objs, "MutatingAdmissionPolicy")
    assert len(maps) == 2

    def admitted(obj: dict[str, Any]) -> dict[str, Any]:
        for map_ in maps:
            obj = mutated(map_, obj, namespace="research")
        return obj

    pod = admitted({**GPU_POD, "spec": {**GPU_POD["spec"], "containers": [*GPU_POD["spec"]["containers"], SIDECAR]}})  # fmt: skip
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    train, logs = pod["spec"]["containers"]
    assert "env" not in train
    assert logs["env"] == HIDDEN
    assert refusals(vap, pod, namespace="research") == []
    assert admitted(VISIBLE_ALL) == VISIBLE_ALL, "a pod that asks for no GPU is the webhook's"


@pytest.mark.slow
def test_with_the_webhook_down_the_chart_s_policies_still_refuse_tolerate_and_hide() -> None:
    down(core(chart()))


def test_with_the_webhook_down_the_overlay_s_policies_still_refuse_tolerate_and_hide(
    tmp_path: Path,
) -> None:
    down(core(overlay(tmp_path)))
