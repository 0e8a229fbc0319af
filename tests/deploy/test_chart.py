"""The Helm chart, rendered by a real helm v4.1.4 (scripts/install-helm puts it in .venv/bin).

What ``helm install`` would create is valid Kubernetes, installs what deploy/base installs
with the same webhook configurations, refuses bad values, keeps its certificates across
upgrades, and is uninstalled webhook configurations first.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chartcluster import ChartCluster, chart_cluster
from tests.deploy.test_manifests import render as kustomize
from tests.kubeschema import validation_error
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
        {"rules": {"defaults": False, "files": {"team.yaml": "kind: GPUSettings\n"}}},
        id="own-rules",
    ),
    pytest.param({"rules": {"existingConfigMap": "corp-gpu-rules"}}, id="existing-rules"),
    pytest.param(
        {"inventory": {"source": "configMap", "configMap": "nodes"}}, id="static-inventory"
    ),
    pytest.param({"audit": {"enabled": True}}, id="audit"),
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
    """What helm install would create, the chart's crds/ included (validated like the rest)."""
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
    for obj in rendered(values):
        annotations = obj["metadata"].get("annotations") or {}
        assert not [a for a in annotations if a.startswith("helm.sh/")], obj["kind"]


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
        rendered({"rules": {"files": {"20-hide-gpus.yaml": "# off\n", "team.yaml": "a: 1\n"}}}),
        "ConfigMap",
    )
    assert mine["data"]["20-hide-gpus.yaml"] == "# off\n"
    assert mine["data"]["team.yaml"] == "a: 1\n"
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
    ],
)  # fmt: skip
def test_the_values_schema_refuses_what_the_chart_cannot_render(
    values: dict[str, Any], said: str
) -> None:
    done = run_helm("template", values=values)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert said in done.stderr, done.stderr


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


def test_the_crds_of_deploy_base_are_installed_by_the_chart() -> None:
    """The chart's crds/ are deploy/base/crds/ (scripts/sync-chart), and helm installs each
    (their schemas are tested against every rule file in tests/deploy/test_crds.py)."""
    installed = {c["metadata"]["name"]: c for c in kind(template({}), "CustomResourceDefinition")}
    base = [
        yaml.safe_load(p.read_text()) for p in sorted((ROOT / "deploy/base/crds").glob("*.yaml"))
    ]
    assert base
    assert installed == {c["metadata"]["name"]: c for c in base}


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
