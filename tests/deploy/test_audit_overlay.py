"""``deploy/overlays/audit``: the background audit turned on, with exactly the access it
needs: list every workload kind the engine understands, write its own PolicyReports, hold
one named Lease. The base grants none of it."""

from __future__ import annotations

from tests.deploy.test_manifests import NAMESPACE, one, render
from webhook.engine.kube.workloads import BUILTIN_KINDS

AUDIT = {"app.kubernetes.io/component": "audit"}


def _env(objs):  # type: ignore[no-untyped-def]
    (container,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_overlay_turns_the_audit_on_and_the_base_leaves_it_off():
    assert _env(render("overlays/audit"))["GPU_WEBHOOK_AUDIT"] == "true"
    assert "GPU_WEBHOOK_AUDIT" not in _env(render("base"))


def test_only_the_overlay_grants_access_to_policy_reports_and_the_audit_lease():
    for name in ("base", "overlays/fail-closed", "overlays/cert-manager"):
        rules = [
            rule
            for obj in render(name)
            if obj["kind"] in ("Role", "ClusterRole")
            for rule in obj["rules"]
        ]
        groups = {group for rule in rules for group in rule["apiGroups"]}
        assert "wgpolicyk8s.io" not in groups, name
        named = {n for r in rules if "leases" in r["resources"] for n in r.get("resourceNames", [])}
        # The base's one Lease picks the replica that writes rule objects' status.
        assert named == {"gpu-webhook-policy-status"}, name


def test_the_audit_role_lists_exactly_the_engines_workload_kinds():
    role = one(render("overlays/audit"), "ClusterRole", "gpu-webhook-audit")
    listed = {
        (group, resource)
        for rule in role["rules"]
        if rule["verbs"] == ["list"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert listed == {(k.group, k.resource) for k in BUILTIN_KINDS}


def test_the_audit_writes_only_policy_reports_and_its_own_lease():
    objs = render("overlays/audit")
    role = one(objs, "ClusterRole", "gpu-webhook-audit")
    writes = [r for r in role["rules"] if set(r["verbs"]) - {"list"}]
    assert writes == [
        {
            "apiGroups": ["wgpolicyk8s.io"],
            "resources": ["policyreports", "clusterpolicyreports"],
            "verbs": ["get", "list", "create", "update", "delete"],
        }
    ]
    lease = one(objs, "Role", "gpu-webhook-audit")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["gpu-webhook-audit"],
            "verbs": ["get", "update"],
        },
    ]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = one(objs, kind, "gpu-webhook-audit")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpu-webhook", "namespace": NAMESPACE}
        ]
