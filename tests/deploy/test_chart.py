"""The Helm chart, rendered by a real helm v4.1.4 (scripts/install-helm puts it in .venv/bin).

What ``helm install`` would create is valid Kubernetes, installs what deploy/base installs
with the same webhook configurations, refuses bad values and rule files, keeps its
certificates across upgrades, upgrades its CRDs (from the chart that had them in crds/, by a
real ``helm upgrade`` against a loopback API server), and is uninstalled webhook
configurations first, its CRDs kept.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chartcluster import APPLY_PATCH, ChartCluster, Write, chart_cluster
from tests.deploy.test_manifests import render as kustomize
from tests.kubeschema import validation_error
from webhook.engine.policy.schema import DOCUMENT_KINDS, RENAMED_KINDS
from webhook.files import certs

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-webhook"
HELM_VERSION = "v4.1.4"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
# Fields of a webhook that deploy/base/webhooks.yaml decides and the chart must keep.
POLICY_FIELDS = (
    "name", "rules", "failurePolicy", "sideEffects", "timeoutSeconds", "namespaceSelector",
    "matchPolicy", "reinvocationPolicy", "admissionReviewVersions", "objectSelector",
)  # fmt: skip
# Custom resources kubernetes-validate has no schema for.
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
# Helm's uninstall order, helm/helm v4.1.4 pkg/release/v1/util/kind_sorter.go, UninstallOrder;
# pkg/action/uninstall.go deleteRelease sorts the release's manifests by it, and
# pkg/kube/client.go batchPerform deletes one kind at a time, waiting for each before the
# next. Kinds not listed go last.
UNINSTALL_ORDER = (
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "APIService", "Ingress",
    "IngressClass", "Service", "CronJob", "Job", "StatefulSet", "HorizontalPodAutoscaler",
    "Deployment", "ReplicaSet", "ReplicationController", "Pod", "DaemonSet", "RoleBindingList",
    "RoleBinding", "RoleList", "Role", "ClusterRoleBindingList", "ClusterRoleBinding",
    "ClusterRoleList", "ClusterRole", "CustomResourceDefinition", "PersistentVolumeClaim",
    "PersistentVolume", "StorageClass", "ConfigMap", "SecretList", "Secret", "ServiceAccount",
    "PodDisruptionBudget", "PodSecurityPolicy", "LimitRange", "ResourceQuota", "NetworkPolicy",
    "Namespace", "PriorityClass",
)  # fmt: skip
CA_PEM = (ROOT / "tests" / "deploy" / "chart" / "ca.crt").read_text()
SETTINGS = "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUSettings\nmetadata: {name: cluster}\n"
# Custom kinds a WorkloadKind declares (issue 44): one with a scale subresource, one without.
WORKLOAD_KINDS = [
    {"group": "example.com", "resources": ["trainingruns"], "scale": True},
    {"group": "ml.example.org", "resources": ["sweeps", "trials"], "versions": ["v1", "v2beta1"]},
]

VALUES = [
    pytest.param({}, id="defaults"),
    pytest.param({"replicaCount": 1}, id="one-replica"),
    pytest.param(
        {"failurePolicy": "Fail", "excludedNamespaces": ["batch-infra"]}, id="fail-closed"
    ),
    pytest.param({"certs": {"mode": "certManager"}}, id="cert-manager"),
    pytest.param(
        {
            "certs": {
                "mode": "certManager",
                "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp"}},
            }
        },
        id="cert-manager-own-issuer",
    ),
    pytest.param(
        {"certs": {"mode": "secret", "secret": {"name": "mine", "caBundle": CA_PEM}}}, id="secret"
    ),
    pytest.param(
        {
            "image": {
                "repository": "registry.example.com/gpu-webhook",
                "digest": "sha256:" + "a" * 64,
            }
        },
        id="image-digest",
    ),
    pytest.param(
        {
            "nodeSelector": {"node-role.kubernetes.io/infra": ""},
            "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/arch",
                                        "operator": "In",
                                        "values": ["amd64"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "resources": {
                "requests": {"cpu": "200m", "memory": "256Mi"},
                "limits": {"memory": "1Gi"},
            },
            "priorityClass": {"create": False, "name": "system-cluster-critical"},
        },
        id="placement",
    ),
    pytest.param(
        {"rules": {"defaults": False, "files": {"team.yaml": SETTINGS}}},
        id="own-rules",
    ),
    pytest.param({"crds": {"install": False}}, id="no-crds"),
    pytest.param({"workloadKinds": WORKLOAD_KINDS}, id="workload-kinds"),
    pytest.param({"rules": {"existingConfigMap": "corp-gpu-rules"}}, id="existing-rules"),
    pytest.param(
        {"inventory": {"source": "configMap", "configMap": "nodes"}}, id="static-inventory"
    ),
    pytest.param({"audit": {"enabled": True}}, id="audit"),
    pytest.param({"matchConditions": {"sync": True}}, id="match-conditions-sync"),
    pytest.param(
        {"networkPolicy": {"enabled": False}, "priorityClass": {"create": False, "name": ""}},
        id="bare",
    ),
    pytest.param({"fullnameOverride": "gpu-policy"}, id="renamed"),
]


def helm() -> str:
    found = Path(sys.executable).parent / "helm"
    if not found.exists():
        pytest.fail("helm not found in .venv/bin: run scripts/install-helm")
    return str(found)


def run_helm(*args: str, chart: Path = CHART, values: dict[str, Any] | None = None,
             namespace: str = "gpu-webhook", release: str = "gpu-webhook") -> subprocess.CompletedProcess[str]:  # fmt: skip
    command = [helm(), *args, release, str(chart), "--namespace", namespace]
    if args[0] == "lint":
        command = [helm(), *args, str(chart), "--namespace", namespace]
    return subprocess.run(
        [*command, "--values", "-"], input=json.dumps(values or {}),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def template(values: dict[str, Any] | None = None, **where: Any) -> list[dict[str, Any]]:
    """What helm install would create, its CRDs included (templates since issue 44)."""
    done = run_helm("template", "--include-crds", values=values, **where)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@cache
def template_of(key: str) -> tuple[dict[str, Any], ...]:
    return tuple(template(json.loads(key)))


def rendered(values: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    return template_of(json.dumps(values, sort_keys=True))


def kind(objs: Any, name: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == name]


def webhooks(objs: Any) -> dict[str, list[dict[str, Any]]]:
    return {k: [{f: w.get(f) for f in POLICY_FIELDS} for w in o["webhooks"]]
            for k in WEBHOOK_KINDS for o in kind(objs, k)}  # fmt: skip


def test_the_helm_of_the_project_setup_is_helm_4_1_4() -> None:
    done = subprocess.run(
        [helm(), "version", "--short"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith(HELM_VERSION + "+")


def test_the_chart_lints_clean_under_strict() -> None:
    done = run_helm("lint", "--strict")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("values", VALUES)
def test_every_object_the_chart_renders_is_valid_kubernetes(values: dict[str, Any]) -> None:
    objs = rendered(values)
    assert kind(objs, "Deployment")
    for obj in objs:
        assert "namespace" in obj["metadata"] or obj["kind"] in (
            *WEBHOOK_KINDS, "ClusterRole", "ClusterRoleBinding", "PriorityClass",
            "CustomResourceDefinition", *POLICY_KINDS,
        ), obj["kind"]  # fmt: skip
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        assert validation_error(obj) is None, (obj["kind"], validation_error(obj))


@pytest.mark.parametrize("values", VALUES)
def test_no_object_is_a_hook_so_the_chart_installs_where_no_pod_has_run(
    values: dict[str, Any],
) -> None:
    """And only the CRDs are kept on uninstall: a webhook configuration left behind would
    judge pods with no server to answer."""
    for obj in rendered(values):
        annotations = obj["metadata"].get("annotations") or {}
        assert not [a for a in annotations if a.startswith("helm.sh/hook")], obj["kind"]
        kept = annotations.get("helm.sh/resource-policy") == "keep"
        assert kept is (obj["kind"] == "CustomResourceDefinition"), obj["kind"]


def test_the_webhook_configurations_are_those_of_deploy_base() -> None:
    assert webhooks(rendered({})) == webhooks(kustomize("base"))


def test_failure_policy_fail_gives_the_fail_closed_overlay() -> None:
    assert webhooks(rendered({"failurePolicy": "Fail"})) == webhooks(
        kustomize("overlays/fail-closed")
    )


def test_cert_manager_mode_is_the_cert_manager_overlay() -> None:
    objs, overlay = rendered({"certs": {"mode": "certManager"}}), kustomize("overlays/cert-manager")
    assert webhooks(objs) == webhooks(overlay)
    for name in WEBHOOK_KINDS:
        (ours,), (theirs,) = kind(objs, name), kind(overlay, name)
        assert ours["metadata"]["annotations"] == theirs["metadata"]["annotations"]
    assert {
        (o["kind"], o["metadata"]["name"])
        for o in objs
        if o["apiVersion"].startswith("cert-manager.io/")
    } == {
        (o["kind"], o["metadata"]["name"])
        for o in overlay
        if o["apiVersion"].startswith("cert-manager.io/")
    }
    assert not kind(objs, "CronJob")
    assert not kind(objs, "Secret")


def test_the_release_namespace_and_extra_exclusions_are_never_judged() -> None:
    objs = template({"excludedNamespaces": ["batch-infra"]}, namespace="platform")
    hooks = [h for k in WEBHOOK_KINDS for o in kind(objs, k) for h in o["webhooks"]]
    # The policy objects' entry is cluster-scoped: no namespaceSelector to extend.
    for hook in (h for h in hooks if "namespaceSelector" in h):
        assert hook["clientConfig"]["service"]["namespace"] == "platform"
        names = next(e for e in hook["namespaceSelector"]["matchExpressions"]
                     if e["key"] == "kubernetes.io/metadata.name")["values"]  # fmt: skip
        assert names == ["kube-system", "platform", "gpu-operator", "batch-infra"]


def test_the_chart_installs_the_kinds_and_rbac_deploy_base_installs() -> None:
    ours, base = rendered({}), kustomize("base")
    # helm install --create-namespace makes the namespace; CRDs are compared file by file
    # (test_the_chart_holds_current_copies_of_its_sources).
    skip = {"Namespace", "CustomResourceDefinition"}
    assert {o["kind"] for o in ours} - skip == {o["kind"] for o in base} - skip | {"Secret"}
    for name in ("ClusterRole", "Role"):
        assert sorted(json.dumps(o["rules"]) for o in kind(ours, name)) == sorted(
            json.dumps(o["rules"]) for o in kind(base, name)
        )
    (deployment,) = kind(ours, "Deployment")
    (theirs,) = kind(base, "Deployment")
    ours_pod, base_pod = deployment["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
    for key in ("securityContext", "automountServiceAccountToken", "priorityClassName"):
        assert ours_pod[key] == base_pod[key]
    (container,), (base_container,) = ours_pod["containers"], base_pod["containers"]
    for key in ("args", "env", "ports", "readinessProbe", "livenessProbe", "securityContext",
                "resources", "volumeMounts", "lifecycle"):  # fmt: skip
        assert container[key] == base_container[key], key


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


@pytest.mark.parametrize(
    "objs", [pytest.param("chart", id="chart"), pytest.param("base", id="base")]
)
def test_the_policy_roles_render_with_the_right_aggregation(objs: str) -> None:
    """Issue 44: the namespace policy author is aggregated to admin only, the reader to view
    and edit, and neither the cluster policy admin nor the exception requester to anything."""
    roles = kind(rendered({}) if objs == "chart" else kustomize("base"), "ClusterRole")
    aggregated = {
        re.sub(
            r"^.*?(policy-admin|namespace-policy-author|namespace-policy-reader|exception-requester)$",
            r"\1",
            o["metadata"]["name"],
        ): sorted(
            k.removeprefix(AGGREGATE)
            for k, v in (o["metadata"].get("labels") or {}).items()
            if k.startswith(AGGREGATE) and v == "true"
        )
        for o in roles
        if o["metadata"]["name"].endswith(("policy-admin", "-author", "-reader", "-requester"))
    }
    assert aggregated == {
        "policy-admin": [],
        "namespace-policy-author": ["admin"],
        "namespace-policy-reader": ["edit", "view"],
        "exception-requester": [],
    }
    (author,) = [o for o in roles if o["metadata"]["name"].endswith("namespace-policy-author")]
    assert [r["resources"] for r in author["rules"]] == [["gpunamespacepolicies"]]


@pytest.mark.parametrize(
    ("values", "replicas", "budget"),
    [pytest.param({}, 3, True, id="three"), pytest.param({"replicaCount": 1}, 1, False, id="one"),
     pytest.param({"replicaCount": 2}, 2, True, id="two")],
)  # fmt: skip
def test_a_disruption_budget_exists_only_above_one_replica(
    values: dict[str, Any], replicas: int, budget: bool
) -> None:
    objs = rendered(values)
    assert kind(objs, "Deployment")[0]["spec"]["replicas"] == replicas
    assert bool(kind(objs, "PodDisruptionBudget")) is budget


@pytest.mark.parametrize(
    ("values", "image"),
    [
        pytest.param({}, "ghcr.io/gpu-admission-webhook/gpu-webhook:0.1.0", id="app-version"),
        pytest.param({"image": {"repository": "r.example/gw", "tag": "dev"}}, "r.example/gw:dev", id="tag"),
        pytest.param({"image": {"repository": "r.example/gw", "tag": "dev", "digest": "sha256:" + "b" * 64}},
                     "r.example/gw@sha256:" + "b" * 64, id="digest-wins"),
    ],
)  # fmt: skip
def test_every_pod_runs_the_image_the_values_name(values: dict[str, Any], image: str) -> None:
    objs = rendered(values)
    pods = [o["spec"]["template"]["spec"] for o in kind(objs, "Deployment")] + [
        o["spec"]["jobTemplate"]["spec"]["template"]["spec"] for o in kind(objs, "CronJob")
    ]
    assert {c["image"] for pod in pods for c in pod["containers"]} == {image}


def test_the_rules_configmap_holds_the_shipped_rules_and_your_own() -> None:
    (shipped,) = kind(rendered({}), "ConfigMap")
    assert shipped["data"] == {
        p.name: p.read_text() for p in sorted((ROOT / "rules").glob("*.yaml"))
    }
    (mine,) = kind(
        rendered({"rules": {"files": {"20-hide-gpus.yaml": "# off\n", "team.yaml": SETTINGS}}}),
        "ConfigMap",
    )
    assert mine["data"]["20-hide-gpus.yaml"] == "# off\n"
    assert mine["data"]["team.yaml"] == SETTINGS
    assert "00-settings.yaml" in mine["data"]
    existing = rendered({"rules": {"existingConfigMap": "corp-gpu-rules"}})
    assert not kind(existing, "ConfigMap")
    volumes = kind(existing, "Deployment")[0]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "rules", "configMap": {"name": "corp-gpu-rules"}} in volumes


def test_no_rules_at_all_is_refused_in_one_line() -> None:
    done = run_helm("template", values={"rules": {"defaults": False}})
    assert done.returncode != 0
    assert "rules: no rule files" in done.stderr


@pytest.mark.parametrize(
    ("values", "said"),
    [
        pytest.param({"failurePolicy": "Never"}, "/failurePolicy", id="failure-policy"),
        pytest.param({"certs": {"mode": "vault"}}, "/certs/mode", id="certs-mode"),
        pytest.param({"certs": {"mode": "secret"}}, "/certs/secret", id="secret-without-name"),
        pytest.param({"replicaCount": 0}, "/replicaCount", id="no-replicas"),
        pytest.param({"replicaCount": "3"}, "/replicaCount", id="replicas-as-text"),
        pytest.param({"image": {"repository": "x", "digest": "latest"}}, "/image/digest", id="digest"),
        pytest.param({"replicas": 3}, "replicas", id="unknown-key"),
        pytest.param({"excludedNamespaces": ["Not_A_Namespace"]}, "/excludedNamespaces/0", id="namespace-name"),
        pytest.param({"inventory": {"source": "configMap"}}, "/inventory/configMap", id="inventory-without-configmap"),
        pytest.param({"rules": {"files": {"rules.txt": "a"}}}, "rules.txt", id="rule-file-name"),
        pytest.param({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "/metrics/serviceMonitor/enabled", id="toggle"),
        pytest.param({"crds": {"install": "no"}}, "/crds/install", id="crds-install"),
        pytest.param({"workloadKinds": [{"resources": ["trainingruns"]}]}, "/workloadKinds/0", id="kind-without-group"),
        pytest.param({"workloadKinds": [{"group": "example.com", "resources": ["trainingruns/scale"]}]},
                     "/workloadKinds/0/resources/0", id="kind-subresource"),
        pytest.param({"workloadKinds": [{"group": "example.com", "resources": []}]}, "/workloadKinds/0/resources", id="kind-no-resources"),
        pytest.param({"workloadKinds": [{"group": "example.com", "resources": ["TrainingRun"]}]},
                     "/workloadKinds/0/resources/0", id="kind-not-plural"),
        pytest.param({"workloadKinds": [{"group": "example.com", "resources": ["runs"], "scale": "yes"}]},
                     "/workloadKinds/0/scale", id="kind-scale-as-text"),
        pytest.param({"workloadKinds": [{"group": "example.com", "resources": ["runs"], "versions": "v1"}]},
                     "/workloadKinds/0/versions", id="kind-versions-not-a-list"),
        pytest.param({"workloadKinds": [{"group": "example.com", "plural": "runs", "resources": ["runs"]}]},
                     "plural", id="kind-unknown-key"),
        pytest.param({"workloadKinds": {"group": "example.com"}}, "/workloadKinds", id="kinds-not-a-list"),
    ],
)  # fmt: skip
def test_the_values_schema_refuses_what_the_chart_cannot_render(
    values: dict[str, Any], said: str
) -> None:
    done = run_helm("template", values=values)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert said in done.stderr, done.stderr


API = "apiVersion: gpu-webhook.io/v1alpha1\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("kind: GPUPolicy\n", "document 1 has no apiVersion; rule documents are gpu-webhook.io/v1alpha1", id="no-api-version"),
        pytest.param("apiVersion: v1\nkind: ConfigMap\n", 'document 1 has apiVersion "v1"; rule documents are gpu-webhook.io/v1alpha1', id="other-api"),
        pytest.param(f"{SETTINGS}---\n{API}kind: GPUPolicie\n", "document 2 has kind GPUPolicie; did you mean GPUPolicy?", id="misspelt"),
        pytest.param(f"# team a\n---\n{API}kind: GPUPolicies\n", "document 1 has kind GPUPolicies; did you mean GPUPolicy?", id="plural"),
        pytest.param(f"{API}kind: gpusettings\n", "document 1 has kind gpusettings; did you mean GPUSettings?", id="case"),
        pytest.param(f"{API}kind: NodePool\n", "document 1 has kind NodePool; did you mean GPUNodePool?", id="renamed"),
        pytest.param(f"{API}kind: Deployment\n", "document 1 has kind Deployment; the kinds: GPUPolicy, GPUSettings, GPUNodePool, WorkloadKind, InstanceType", id="unknown"),
        pytest.param(f"{API}metadata: {{name: a}}\n", "document 1 has no kind; the kinds: GPUPolicy,", id="no-kind"),
        pytest.param("- GPUPolicy\n", "document 1 is not a YAML map:", id="a-list"),
        pytest.param("spec: [\n", "document 1 is not a YAML map:", id="broken-yaml"),
        # Issue 44: the commonest typo, a misspelt check, failed the pod and not the release.
        pytest.param(f"{API}kind: GPUPolicy\nspec: {{validate: [{{maxGPUsPerPods: 2}}]}}\n", "document 1: spec.validate[0]: unknown field maxGPUsPerPods; the checks: maxGPUsPerPod,", id="misspelt-check"),
        pytest.param(f"{SETTINGS}---\n{API}kind: GPUPolicy\nspec: {{validate: [{{wholeGPUsOnly: true}}, {{maxGPUsPerPod: 2, acton: warn}}]}}\n", "document 2: spec.validate[1]: unknown field acton;", id="misspelt-entry-field"),
        pytest.param(f"{API}kind: GPUPolicy\nspec: {{validate: [{{action: warn, message: m}}]}}\n", "document 1: spec.validate[0]: no check in this entry; the checks:", id="no-check"),
    ],
)  # fmt: skip
def test_a_rules_file_that_is_not_rule_documents_fails_the_render_in_one_line(
    text: str, said: str
) -> None:
    """helm template, install and upgrade render alike: the release fails, not the pod."""
    done = run_helm("template", values={"rules": {"files": {"team.yaml": text}}})
    assert done.returncode == 1
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert f'rules.files["team.yaml"]: {said}' in line, done.stderr


def test_rule_files_of_comments_json_and_several_documents_render() -> None:
    files = {
        "20-hide-gpus.yaml": "# off: the shipped file replaced by nothing\n",
        "team.yaml": f"# team a\n---\n{API}kind: GPUPolicy\nmetadata: {{name: a}}\n---\n{SETTINGS}",
        "limits.yaml": f"{API}kind: GPUPolicy\nspec:\n  validate:\n  - maxGPUsPerPod: 2\n    action: warn\n    message: m\n  - wholeGPUsOnly: true\n",
        "pools.json": json.dumps({"apiVersion": "gpu-webhook.io/v1alpha1", "kind": "GPUNodePool"}),
    }
    (config,) = kind(rendered({"rules": {"files": files}}), "ConfigMap")
    assert {k: config["data"][k] for k in files} == files


def _template_words(define: str) -> list[str]:
    text = (CHART / "templates" / "_rulefiles.tpl").read_text()
    start = f'define "{define}" -}}}}\n'
    body = re.search(re.escape(start) + r"(.*?)\n\{\{- end", text, re.S)
    assert body, define
    return body.group(1).split()


def test_the_templates_know_the_rule_kinds_the_server_knows() -> None:
    assert _template_words("gpu-webhook.ruleKinds") == list(DOCUMENT_KINDS), (
        "a rule kind was added or removed: list it in templates/_rulefiles.tpl"
    )
    checks = DOCUMENT_KINDS["GPUPolicy"]["properties"]["spec"]["properties"]["validate"]["items"]
    assert _template_words("gpu-webhook.ruleChecks") == [
        e["required"][0] for e in checks["oneOf"]
    ], "a check was added or removed: list it in templates/_rulefiles.tpl"
    assert _template_words("gpu-webhook.renamedRuleKinds") == [
        f"{old}={new}" for old, (new, _) in RENAMED_KINDS.items()
    ]


def _validate_rules(objs: Any) -> list[dict[str, Any]]:
    (config,) = kind(objs, "ValidatingWebhookConfiguration")
    return next(w for w in config["webhooks"] if w["name"] == "validate.gpu-webhook.io")["rules"]


def test_declared_workload_kinds_are_routed_to_validate_with_get_for_their_scale() -> None:
    base, ours = rendered({}), rendered({"workloadKinds": WORKLOAD_KINDS})
    added = _validate_rules(ours)[len(_validate_rules(base)) :]
    assert _validate_rules(ours)[: len(_validate_rules(base))] == _validate_rules(base)
    assert added == [
        {"apiGroups": ["example.com"], "apiVersions": ["*"], "resources": ["trainingruns"],
         "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
        {"apiGroups": ["ml.example.org"], "apiVersions": ["v1", "v2beta1"],
         "resources": ["sweeps", "trials"], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
        {"apiGroups": ["example.com"], "apiVersions": ["*"], "resources": ["trainingruns/scale"],
         "operations": ["UPDATE"], "scope": "Namespaced"},
    ]  # fmt: skip
    # The mutating webhook and the rule objects' entry are not the declared kinds'.
    mutating, validating = WEBHOOK_KINDS
    assert webhooks(ours)[mutating] == webhooks(base)[mutating]
    assert webhooks(ours)[validating][1:] == webhooks(base)[validating][1:]
    (server,) = [r for r in kind(ours, "ClusterRole") if r["metadata"]["name"] == "gpu-webhook"]
    (theirs,) = [r for r in kind(base, "ClusterRole") if r["metadata"]["name"] == "gpu-webhook"]
    assert server["rules"] == [
        *theirs["rules"],
        {"apiGroups": ["example.com"], "resources": ["trainingruns"], "verbs": ["get"]},
    ]
    others = [r for r in kind(ours, "ClusterRole") + kind(ours, "Role") if r is not server]
    assert others == [r for r in kind(base, "ClusterRole") + kind(base, "Role") if r is not theirs]


def test_the_workload_kinds_value_renders_what_the_kustomize_overlay_patches() -> None:
    overlay = kustomize("overlays/workload-kinds")
    ours = rendered(
        {"workloadKinds": [{"group": "example.com", "resources": ["trainingruns"], "scale": True}]}
    )
    assert webhooks(ours) == webhooks(overlay)


def test_helm_uninstall_removes_both_webhook_configurations_before_anything_else() -> None:
    """A configuration left behind with failurePolicy Fail would block every pod create."""
    objs = rendered(
        {"failurePolicy": "Fail", "certs": {"mode": "certManager"}, "audit": {"enabled": True}}
    )
    position = {k: i for i, k in enumerate(UNINSTALL_ORDER)}
    order = sorted((o["kind"] for o in objs), key=lambda k: position.get(k, len(position)))
    assert order[:2] == ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]
    assert (
        order.count("ValidatingWebhookConfiguration") + order.count("MutatingWebhookConfiguration")
        == 2
    )


def test_helm_itself_sorts_the_webhook_configurations_as_known_kinds() -> None:
    """helm template prints in InstallOrder (the same source file as UninstallOrder): the
    configurations come last, after the Deployment, not with the unknown kinds."""
    done = run_helm("template", values={"certs": {"mode": "certManager"}})
    kinds = [d["kind"] for d in yaml.safe_load_all(done.stdout) if d]
    # Custom kinds and the admission policies: Helm's sorter puts them last.
    unknown = {"Certificate", "Issuer", *POLICY_KINDS}
    assert [k for k in kinds if k not in unknown][-2:] == list(WEBHOOK_KINDS)
    assert set(kinds[kinds.index("ValidatingWebhookConfiguration") + 1 :]) == unknown
    assert kinds.index("Deployment") < kinds.index("MutatingWebhookConfiguration")


SECRET_PATH = "/api/v1/namespaces/gpu-webhook/secrets/gpu-webhook-tls"
# What helm install writes on each object of a release; helm refuses to adopt one without.
RELEASED = {
    "name": "gpu-webhook", "namespace": "gpu-webhook",
    "labels": {"app.kubernetes.io/managed-by": "Helm"},
    "annotations": {"meta.helm.sh/release-name": "gpu-webhook", "meta.helm.sh/release-namespace": "gpu-webhook"},
}  # fmt: skip


def upgrade_against(cluster: ChartCluster, tmp_path: Path) -> list[dict[str, Any]]:
    """``helm template --dry-run=server``: helm asks the (loopback) cluster, and the chart's
    ``lookup`` of its Secret gets what the cluster holds, as on ``helm upgrade``."""
    done = run_helm(
        "template", "--dry-run=server", "--disable-openapi-validation",
        "--kubeconfig", str(cluster.kubeconfig(tmp_path)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _secret_and_bundles(objs: Any) -> tuple[dict[str, str], set[str]]:
    (secret,) = kind(objs, "Secret")
    bundles = {
        w["clientConfig"]["caBundle"]
        for k in WEBHOOK_KINDS
        for o in kind(objs, k)
        for w in o["webhooks"]
    }
    return secret["data"], bundles


def test_a_first_install_makes_a_pair_the_renewal_job_keeps(tmp_path: Path) -> None:
    with chart_cluster() as cluster:
        first, bundles = _secret_and_bundles(upgrade_against(cluster, tmp_path))
    assert f"GET {SECRET_PATH}" in cluster.requests  # the chart looked, and found nothing
    assert bundles == {first["ca.crt"]}
    pair = certs.ServingPair(**{k.replace(".", "_"): base64.b64decode(v) for k, v in first.items()})
    report = certs.inspect(pair, required=certs.service_names("gpu-webhook", "gpu-webhook"))
    assert report.problems == ()  # `certs install`, the renewal job, keeps this pair


def test_an_upgrade_keeps_the_certificates_the_cluster_holds(tmp_path: Path) -> None:
    installed, _ = _secret_and_bundles(rendered({}))
    with chart_cluster() as cluster:
        cluster.objects[SECRET_PATH] = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {**RELEASED, "name": "gpu-webhook-tls"}, "data": installed,
        }  # fmt: skip
        again, bundles = _secret_and_bundles(upgrade_against(cluster, tmp_path))
    assert again == installed
    assert bundles == {installed["ca.crt"]}


def test_a_stored_secret_without_its_key_is_replaced_whole(tmp_path: Path) -> None:
    installed, _ = _secret_and_bundles(rendered({}))
    with chart_cluster() as cluster:
        cluster.objects[SECRET_PATH] = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {**RELEASED, "name": "gpu-webhook-tls"},
            "data": {k: v for k, v in installed.items() if k != "tls.key"},
        }  # fmt: skip
        again, bundles = _secret_and_bundles(upgrade_against(cluster, tmp_path))
    assert again["ca.crt"] != installed["ca.crt"]
    assert set(again) == {"ca.crt", "tls.crt", "tls.key"}
    assert bundles == {again["ca.crt"]}


def test_the_secret_mode_trusts_the_ca_given() -> None:
    objs = rendered({"certs": {"mode": "secret", "secret": {"name": "mine", "caBundle": CA_PEM}}})
    assert not kind(objs, "Secret")
    assert not kind(objs, "CronJob")
    bundles = {
        w["clientConfig"]["caBundle"]
        for k in WEBHOOK_KINDS
        for o in kind(objs, k)
        for w in o["webhooks"]
    }
    assert {base64.b64decode(b).decode() for b in bundles} == {CA_PEM}
    volumes = kind(objs, "Deployment")[0]["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "tls")["secret"]["secretName"] == "mine"


def sync_chart(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync-chart"), "--root", str(root), *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_chart_holds_current_copies_of_its_sources() -> None:
    done = sync_chart(ROOT, "--check")
    assert done.returncode == 0, done.stdout


def _repository_copy(tmp_path: Path) -> Path:
    for part in ("deploy", "rules"):
        shutil.copytree(ROOT / part, tmp_path / part)
    return tmp_path


@pytest.mark.parametrize(
    ("edit", "stale"),
    [
        pytest.param("deploy/base/webhooks.yaml", "files/webhooks.yaml", id="webhooks"),
        pytest.param("deploy/base/rbac.yaml", "files/rbac/base.yaml", id="rbac"),
        pytest.param("rules/00-settings.yaml", "files/rules/00-settings.yaml", id="rules"),
    ],
)  # fmt: skip
def test_a_stale_copy_fails_saying_run_sync_chart_and_the_script_refreshes_it(
    tmp_path: Path, edit: str, stale: str
) -> None:
    root = _repository_copy(tmp_path)
    with (root / edit).open("a") as source:
        source.write("# edited\n")
    done = sync_chart(root, "--check")
    assert done.returncode == 1
    assert stale in done.stdout
    assert "run scripts/sync-chart" in done.stdout
    assert sync_chart(root).returncode == 0
    assert sync_chart(root, "--check").returncode == 0
    assert (root / "deploy/helm/gpu-webhook" / stale).read_text().endswith("# edited\n")


MONITORING = {
    "servicemonitor.yaml": {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "gpu-webhook", "labels": {"app.kubernetes.io/name": "gpu-webhook"}},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "gpu-webhook"}},
                 "endpoints": [{"port": "metrics", "path": "/metrics"}]},
    },
    "prometheusrule.yaml": {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "gpu-webhook"},
        "spec": {"groups": [{"name": "gpu-webhook", "rules": [{"alert": "GPUWebhookDown", "expr": "up == 0"}]}]},
    },
}  # fmt: skip


def test_monitoring_renders_from_the_copies_of_deploy_monitoring_when_enabled(
    tmp_path: Path,
) -> None:
    """A tiny deploy/monitoring fixture, synced into a copy of the chart as the lead's
    scripts/sync-chart will sync the real one."""
    root = _repository_copy(tmp_path)
    source = root / "deploy" / "monitoring"
    (source / "dashboards").mkdir(parents=True, exist_ok=True)
    for name, obj in MONITORING.items():
        (source / name).write_text(yaml.safe_dump(obj))
    (source / "dashboards" / "gpu-webhook.json").write_text('{"title": "GPU webhook"}\n')
    assert sync_chart(root).returncode == 0
    chart = root / "deploy" / "helm" / "gpu-webhook"
    off = template(chart=chart)
    assert not [o for o in off if o["apiVersion"].startswith("monitoring.coreos.com/")]
    on = template({"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                               "dashboards": {"enabled": True}}}, chart=chart, namespace="platform")  # fmt: skip
    (monitor,) = kind(on, "ServiceMonitor")
    assert monitor["spec"] == MONITORING["servicemonitor.yaml"]["spec"]
    assert monitor["metadata"]["namespace"] == "platform"
    (rule,) = kind(on, "PrometheusRule")
    assert rule["spec"] == MONITORING["prometheusrule.yaml"]["spec"]
    (dashboard,) = [
        o for o in kind(on, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpu-webhook.json"]) == {"title": "GPU webhook"}
    assert validation_error(dashboard) is None


def test_monitoring_enabled_without_its_copies_renders_nothing_but_the_rest(tmp_path: Path) -> None:
    """Before deploy/monitoring exists (or in a chart without its copies) the switches are harmless."""
    chart = tmp_path / "gpu-webhook"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "files" / "monitoring", ignore_errors=True)
    everything = {
        "metrics": {
            k: {"enabled": True} for k in ("serviceMonitor", "prometheusRule", "dashboards")
        }
    }
    objs = template(everything, chart=chart)
    assert sorted(o["kind"] for o in objs) == sorted(o["kind"] for o in template(chart=chart))


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    found = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key != "resources":
            found += _leaves(value, f"{path}.")
        else:
            found.append(path)
    return found


def test_the_chart_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    named = {
        name
        for cell in re.findall(r"^\| `([^|]+)` \|", readme, re.M)
        for name in cell.split("`, `")
    }
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(_leaves(values)) - named == set()


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gpupolicies.gpu-webhook.io"},
    "spec": {
        "group": "gpu-webhook.io",
        "names": {"kind": "GPUPolicy", "plural": "gpupolicies", "singular": "gpupolicy"},
        "scope": "Cluster",
        "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip


def _base_crds() -> dict[str, dict[str, Any]]:
    crds = [yaml.safe_load(p.read_text()) for p in (ROOT / "deploy/base/crds").glob("*.yaml")]
    assert crds
    return {c["metadata"]["name"]: c for c in crds}


def test_every_crd_of_deploy_base_is_a_template_helm_upgrades_and_uninstall_keeps() -> None:
    """The chart renders every file scripts/gen-crds writes (no fixed list), as templates, not
    from crds/ (which Helm installs once and never upgrades), labelled as the release's and
    kept on uninstall (their schemas are tested against every rule file in
    tests/deploy/test_crds.py)."""
    assert not (CHART / "crds").exists()
    installed = {c["metadata"]["name"]: c for c in kind(rendered({}), "CustomResourceDefinition")}
    base = _base_crds()
    assert set(installed) == set(base)
    for name, crd in installed.items():
        metadata = crd["metadata"]
        assert {k: v for k, v in crd.items() if k != "metadata"} == {
            k: v for k, v in base[name].items() if k != "metadata"
        }
        assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert metadata["labels"]["app.kubernetes.io/instance"] == "gpu-webhook"


def test_a_crd_file_gen_crds_adds_is_rendered_without_a_template_change(tmp_path: Path) -> None:
    chart = tmp_path / "gpu-webhook"
    shutil.copytree(CHART, chart)
    (chart / "files" / "crds" / "zz-new.yaml").write_text(
        yaml.safe_dump(CRD | {"metadata": {"name": "news.gpu-webhook.io"}})
    )
    names = {c["metadata"]["name"] for c in kind(template(chart=chart), "CustomResourceDefinition")}
    assert names == set(_base_crds()) | {"news.gpu-webhook.io"}


def test_crds_install_false_renders_no_crd_and_the_rest_unchanged() -> None:
    objs, without = rendered({}), rendered({"crds": {"install": False}})
    assert not kind(without, "CustomResourceDefinition")
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert [(o["kind"], o["metadata"]["name"]) for o in without] == [
        n for n in names if n[0] != "CustomResourceDefinition"
    ]


def _names(objs: Any, of: str) -> set[str]:
    return {o["metadata"]["name"] for o in kind(objs, of)}


@pytest.mark.parametrize(
    ("values", "release", "namespace"),
    [
        pytest.param({}, "gpu-webhook", "gpu-webhook", id="defaults"),
        pytest.param({"fullnameOverride": "gpu-policy"}, "gpu-webhook", "gpu-webhook", id="renamed"),
        pytest.param({"audit": {"enabled": True}}, "team", "platform", id="other-release-and-namespace"),
    ],
)  # fmt: skip
def test_every_name_an_object_refers_to_is_an_object_of_the_release(
    values: dict[str, Any], release: str, namespace: str
) -> None:
    objs = template(values, release=release, namespace=namespace)
    (service,) = kind(objs, "Service")
    (secret,) = kind(objs, "Secret")
    accounts = _names(objs, "ServiceAccount")
    for hook in (h for k in WEBHOOK_KINDS for o in kind(objs, k) for h in o["webhooks"]):
        assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
        assert hook["clientConfig"]["service"]["namespace"] == namespace
    (deployment,) = kind(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] in accounts
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert volumes["rules"]["configMap"]["name"] in _names(objs, "ConfigMap")
    labels = deployment["spec"]["template"]["metadata"]["labels"].items()
    selectors = [deployment["spec"]["selector"]["matchLabels"]]
    selectors += [o["spec"]["selector"]["matchLabels"] for o in kind(objs, "PodDisruptionBudget")]
    selectors += [o["spec"]["podSelector"]["matchLabels"] for o in kind(objs, "NetworkPolicy")]
    assert all(selector.items() <= labels for selector in selectors)
    for binding in kind(objs, "ClusterRoleBinding") + kind(objs, "RoleBinding"):
        role_kind = binding["roleRef"]["kind"]
        assert binding["roleRef"]["name"] in _names(objs, role_kind), binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert (subject["name"], subject["namespace"]) in {(a, namespace) for a in accounts}
    (job,) = kind(objs, "CronJob")
    job_pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job_pod["serviceAccountName"] in accounts
    args = dict(
        a.removeprefix("--").split("=", 1) for a in job_pod["containers"][0]["args"] if "=" in a
    )
    assert args["secret"] == secret["metadata"]["name"]
    assert args["namespace"] == namespace
    assert args["webhook-config"] in _names(objs, "MutatingWebhookConfiguration")
    assert args["service"] == service["metadata"]["name"]
    pair = certs.ServingPair(
        **{k.replace(".", "_"): base64.b64decode(v) for k, v in secret["data"].items()}
    )
    required = certs.service_names(service["metadata"]["name"], namespace)
    assert certs.inspect(pair, required=required).problems == ()
    certs_role = next(
        r for r in kind(objs, "Role") if any("secrets" in rule["resources"] for rule in r["rules"])
    )
    assert certs_role["rules"][0]["resourceNames"] == [secret["metadata"]["name"]]


# The chart as released before its CRDs moved out of crds/ (issue 44): deploy/helm/gpu-webhook
# at commit fc672ce, packaged by `helm package` (tests/deploy/chart/README). Its WorkloadKind
# CRD predates `scale`. Installed by a real helm into the loopback cluster, its CRDs are what
# Helm's crds/ makes: applied once, with no release labels or annotations.
PREVIOUS = ROOT / "tests" / "deploy" / "chart" / "gpu-webhook-0.1.0-fc672ce.tgz"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
NEW_SINCE_THE_PREVIOUS_CHART = {
    "gpunamespacepolicies.gpu-webhook.io",
    "gpupolicyexceptions.gpu-webhook.io",
}
OWNERSHIP_ERROR = re.compile(
    r'CustomResourceDefinition "[a-z]+\.gpu-webhook\.io" in namespace "" exists and cannot be '
    r"imported into the current release: invalid ownership metadata; label validation error: "
    r'missing key "app.kubernetes.io/managed-by": must be set to "Helm"'
)


def helm_in(cluster: ChartCluster, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """helm against the loopback cluster, release gpu-webhook in namespace gpu-webhook."""
    return subprocess.run(
        [helm(), *args, "--namespace", "gpu-webhook", "--kubeconfig", str(cluster.kubeconfig(tmp_path))],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def upgrade(cluster: ChartCluster, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return helm_in(cluster, tmp_path, "upgrade", "gpu-webhook", str(CHART),
                   "--disable-openapi-validation", *flags)  # fmt: skip


def crd_writes(cluster: ChartCluster, since: int) -> dict[str, list[Write]]:
    found: dict[str, list[Write]] = {}
    for write in cluster.writes[since:]:
        if write.path.startswith(CRDS):
            found.setdefault(write.path.removeprefix(CRDS), []).append(write)
    return found


@pytest.fixture
def previous(tmp_path: Path) -> Iterator[ChartCluster]:
    """A cluster where `helm install` of the previous chart has run."""
    with chart_cluster() as cluster:
        done = helm_in(cluster, tmp_path, "install", "gpu-webhook", str(PREVIOUS),
                       "--disable-openapi-validation")  # fmt: skip
        assert done.returncode == 0, done.stderr
        yield cluster


def test_the_previous_chart_leaves_older_crds_that_name_no_release(previous: ChartCluster) -> None:
    crds = {p.removeprefix(CRDS): o for p, o in previous.objects.items() if p.startswith(CRDS)}
    # The kinds added since (issue 44's namespaced ones) come with the upgrade.
    assert set(crds) == set(_base_crds()) - NEW_SINCE_THE_PREVIOUS_CHART
    for crd in crds.values():
        assert "app.kubernetes.io/managed-by" not in crd["metadata"].get("labels", {})
        assert "meta.helm.sh/release-name" not in crd["metadata"].get("annotations", {})
    older = crds["workloadkinds.gpu-webhook.io"]["spec"]["versions"][0]["schema"]
    assert "scale" not in older["openAPIV3Schema"]["properties"]["spec"]["properties"]


def test_a_plain_upgrade_from_it_is_refused_before_anything_is_written(
    previous: ChartCluster, tmp_path: Path
) -> None:
    """Helm checks ownership (pkg/action/upgrade.go performUpgrade, existingResourceConflict)
    before it writes its release record or runs any hook: no pre-upgrade hook could adopt."""
    before = len(previous.writes)
    done = upgrade(previous, tmp_path)
    assert done.returncode == 1
    assert OWNERSHIP_ERROR.search(done.stderr), done.stderr
    assert previous.writes[before:] == []


def test_take_ownership_adopts_the_crds_and_applies_the_new_schema(
    previous: ChartCluster, tmp_path: Path
) -> None:
    before = len(previous.writes)
    done = upgrade(previous, tmp_path, "--take-ownership")
    assert done.returncode == 0, done.stderr
    sent = crd_writes(previous, before)
    base = _base_crds()
    assert set(sent) == set(base)
    for name, (write,) in sent.items():
        # Helm 4 applies server-side (the previous release was installed so): the whole object.
        assert (write.method, write.content_type, write.dry_run) == ("PATCH", APPLY_PATCH, False)
        assert write.body["spec"] == base[name]["spec"]
        assert write.body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert write.body["metadata"]["annotations"] == {
            "helm.sh/resource-policy": "keep",
            "meta.helm.sh/release-name": "gpu-webhook",
            "meta.helm.sh/release-namespace": "gpu-webhook",
        }
    stored = previous.objects[CRDS + "workloadkinds.gpu-webhook.io"]["spec"]["versions"][0]
    assert "scale" in stored["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    # Adopted once: the next upgrade needs no flag.
    again = upgrade(previous, tmp_path)
    assert again.returncode == 0, again.stderr


def test_crds_labelled_as_the_releases_are_adopted_by_a_plain_upgrade(
    previous: ChartCluster, tmp_path: Path
) -> None:
    """Helm before 3.17 has no --take-ownership: docs/deploy.md's kubectl label and annotate."""
    for path, obj in previous.objects.items():
        if path.startswith(CRDS):
            obj["metadata"].setdefault("labels", {}).update(RELEASED["labels"])
            obj["metadata"].setdefault("annotations", {}).update(RELEASED["annotations"])
    before = len(previous.writes)
    done = upgrade(previous, tmp_path)
    assert done.returncode == 0, done.stderr
    assert set(crd_writes(previous, before)) == set(_base_crds())


def test_neither_crds_install_false_nor_uninstall_deletes_the_crds(
    previous: ChartCluster, tmp_path: Path
) -> None:
    """Deleting a CRD deletes every GPUPolicy and rule object with it: both keep them."""
    assert upgrade(previous, tmp_path, "--take-ownership").returncode == 0
    before = len(previous.writes)
    done = upgrade(previous, tmp_path, "--set", "crds.install=false")
    assert done.returncode == 0, done.stderr
    assert crd_writes(previous, before) == {}
    done = helm_in(previous, tmp_path, "uninstall", "gpu-webhook")
    assert done.returncode == 0, done.stderr
    deleted = {w.path for w in previous.writes[before:] if w.method == "DELETE"}
    assert "/apis/apps/v1/namespaces/gpu-webhook/deployments/gpu-webhook" in deleted
    assert not [p for p in deleted if p.startswith(CRDS)]
    assert {p.removeprefix(CRDS) for p in previous.objects if p.startswith(CRDS)} == set(
        _base_crds()
    )
