"""The ValidatingAdmissionPolicy that closes the namespace-squatting path (issue 41):
only those allowed to ``set`` ``namespaceexemptions.gpu-webhook.io`` may create a namespace
the webhook exempts by name or set, change or remove ``gpu-webhook.io/ignore``.

Its CEL is evaluated with celpy (the API server's is cel-go: the expressions keep to what
both read alike, no optional types), with ``authorizer`` standing in for the API server's
(``k8s.io/apiserver/pkg/cel/library/authz.go``: group, resource, name, check, allowed).
The objects are checked against Kubernetes' own schemas, in deploy/base and in the chart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes

from tests.builders import ROOT, RULES
from tests.deploy.test_chart import kind, template
from tests.deploy.test_manifests import one
from tests.deploy.test_manifests import render as kustomize
from tests.kubeschema import validation_error
from webhook.engine.policy.exemptions import exempted_namespaces
from webhook.files.rulefiles import load_policy

POLICY_FILE = ROOT / "deploy" / "base" / "admission-policies" / "namespace-exemptions.yaml"
NAME = "gpu-webhook-namespace-exemptions"
IGNORE = "gpu-webhook.io/ignore"


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


def policy_of(objs: Any) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"].endswith("-namespace-exemptions")]  # fmt: skip
    return dict(found)


@dataclass
class Authorizer:
    """What the API server's authorizer answers, and every check the policy asked of it."""

    allowed: bool
    asked: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    path: tuple[tuple[str, str], ...] = ()

    def step(self, what: str, value: object) -> Authorizer:
        return Authorizer(self.allowed, self.asked, (*self.path, (what, str(value))))


def _allowed(check: Authorizer) -> celtypes.BoolType:
    check.asked.append(check.path)
    return celtypes.BoolType(check.allowed)


FUNCTIONS = {
    "group": lambda a, v: a.step("group", v),
    "resource": lambda a, v: a.step("resource", v),
    "name": lambda a, v: a.step("name", v),
    "check": lambda a, v: a.step("check", v),
    "allowed": _allowed,
}


@cache
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression), functions=FUNCTIONS)


def admit(
    vap: Mapping[str, Any],
    *,
    operation: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None = None,
    admin: bool = False,
) -> tuple[list[str], Authorizer]:
    """The messages of the validations that fail (none: admitted), as the API server
    evaluates the policy, and the authorizer it asked."""
    authorizer = Authorizer(admin)
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": operation, "name": obj["metadata"]["name"]}),
        "authorizer": authorizer,
    }
    variables: dict[str, Any] = {}
    for variable in vap["spec"]["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(variable["name"])] = _program(
            variable["expression"]
        ).evaluate(activation)
    activation["variables"] = celtypes.MapType(variables)
    failed = []
    for validation in vap["spec"]["validations"]:
        if not _program(validation["expression"]).evaluate(activation):
            failed.append(str(_program(validation["messageExpression"]).evaluate(activation)))
    return failed, authorizer


def namespace(
    name: str, labels: dict[str, str] | None = None, **annotations: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = {k.replace("_", "."): v for k, v in annotations.items()}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


REQUESTER = {"openshift_io/requester": "mallory"}
CASES = [
    # (operation, object, old object, admin, refused with)
    pytest.param("CREATE", namespace("nvidia-dra-driver-gpu"), None, False, "is exempt from the GPU admission webhook by name; only", id="a-user-squats-an-exempted-name"),
    pytest.param("CREATE", namespace("gpu-webhook"), None, False, "by name; only", id="a-user-squats-the-webhooks-namespace"),
    pytest.param("CREATE", namespace("nvidia-dra-driver-gpu"), None, True, None, id="an-admin-creates-it"),
    pytest.param("CREATE", namespace("team-a"), None, False, None, id="a-user-creates-another-name"),
    pytest.param("CREATE", namespace("nvidia-gpu-operator", **REQUESTER), None, True, "cannot be requested as a project", id="a-project-request-for-an-exempted-name"),
    pytest.param("CREATE", namespace("team-a", **REQUESTER), None, True, None, id="a-project-request-for-another-name"),
    pytest.param("CREATE", namespace("team-a", {IGNORE: "true"}), None, False, "the label gpu-webhook.io/ignore exempts namespace team-a", id="a-user-creates-a-labelled-namespace"),
    pytest.param("CREATE", namespace("team-a", {IGNORE: "true"}), None, True, None, id="an-admin-labels-at-creation"),
    pytest.param("CREATE", namespace("team-a", {"team": "a"}), None, False, None, id="other-labels-are-free"),
    pytest.param("UPDATE", namespace("team-a", {IGNORE: "true"}), namespace("team-a"), False, "may set, change or remove it", id="a-namespace-owner-labels-it"),
    pytest.param("UPDATE", namespace("team-a", {IGNORE: "true"}), namespace("team-a", {IGNORE: "false"}), False, "may set, change or remove it", id="a-user-changes-the-value"),
    pytest.param("UPDATE", namespace("team-a"), namespace("team-a", {IGNORE: "true"}), False, "may set, change or remove it", id="a-user-removes-it"),
    pytest.param("UPDATE", namespace("team-a", {IGNORE: "true"}), namespace("team-a"), True, None, id="an-admin-labels-it"),
    pytest.param("UPDATE", namespace("team-a", {IGNORE: "true", "x": "1"}), namespace("team-a", {IGNORE: "true"}), False, None, id="other-label-changes-keep-it"),
    pytest.param("UPDATE", namespace("gpu-operator", {"x": "1"}), namespace("gpu-operator"), False, None, id="an-existing-exempted-namespace-updated"),
]  # fmt: skip


@pytest.mark.parametrize(("operation", "obj", "old", "admin", "refused"), CASES)
def test_the_policy_refuses_every_way_a_non_admin_could_exempt_a_namespace(
    operation: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    admin: bool,
    refused: str | None,
) -> None:
    failed, _ = admit(policy_of(documents()), operation=operation, obj=obj, old=old, admin=admin)
    if refused is None:
        assert failed == []
    else:
        (message,) = failed
        assert refused in message


def test_the_check_asked_is_set_on_namespaceexemptions_by_name_cluster_wide() -> None:
    _, authorizer = admit(policy_of(documents()), operation="CREATE", obj=namespace("gpu-operator"))
    assert (
        ("group", "gpu-webhook.io"),
        ("resource", "namespaceexemptions"),
        ("name", "gpu-operator"),
        ("check", "set"),
    ) in authorizer.asked


def _reserved(vap: Mapping[str, Any]) -> list[str]:
    (variable,) = [v for v in vap["spec"]["variables"] if v["name"] == "reserved"]
    return [str(n) for n in _program(variable["expression"]).evaluate({})]


def test_every_name_exempted_by_name_that_may_not_exist_is_reserved() -> None:
    """The webhooks' namespaceSelector and the shipped rules' exemptions, but kube-system,
    which always exists and no one can create."""
    hooks = [h for o in kustomize("base") if o["kind"].endswith("WebhookConfiguration")
             for h in o["webhooks"] if "namespaceSelector" in h]  # fmt: skip
    by_selector = {
        name
        for hook in hooks
        for term in hook["namespaceSelector"]["matchExpressions"]
        if term["key"] == "kubernetes.io/metadata.name" and term["operator"] == "NotIn"
        for name in term["values"]
    }
    by_rules = set(exempted_namespaces(load_policy(str(RULES))))
    assert set(_reserved(policy_of(documents()))) == (by_selector | by_rules) - {"kube-system"}


def test_the_ignore_label_guarded_is_the_one_the_webhooks_skip() -> None:
    hooks = [h for o in kustomize("base") if o["kind"].endswith("WebhookConfiguration")
             for h in o["webhooks"] if "namespaceSelector" in h]  # fmt: skip
    for hook in hooks:
        keys = {t["key"] for t in hook["namespaceSelector"]["matchExpressions"]}
        assert keys == {"kubernetes.io/metadata.name", IGNORE}


def test_kustomize_installs_the_policy_its_binding_and_the_admins_role_valid_for_kubernetes() -> (
    None
):
    objs = kustomize("base")
    for kind_name in (
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ClusterRole",
    ):
        obj = one(objs, kind_name, NAME)
        assert validation_error(obj) is None, validation_error(obj)
    assert one(objs, "ValidatingAdmissionPolicyBinding", NAME)["spec"] == {
        "policyName": NAME,
        "validationActions": ["Deny"],
    }
    assert one(objs, "ValidatingAdmissionPolicy", NAME)["spec"]["failurePolicy"] == "Fail"
    bound = [
        o
        for o in objs
        if o["kind"].endswith("Binding") and o.get("roleRef", {}).get("name") == NAME
    ]
    assert bound == [], "the admins' role is bound by the cluster's admins, to their own"


@pytest.mark.slow
def test_the_chart_reserves_the_release_namespace_and_its_own_exclusions() -> None:
    objs = template(
        {"excludedNamespaces": ["batch-infra"], "admissionPolicies": {"reservedNamespaces": ["nvidia"]},
         "fullnameOverride": "gpu-policy"},
        namespace="platform",
    )  # fmt: skip
    vap = policy_of(objs)
    assert vap["metadata"]["name"] == "gpu-policy-namespace-exemptions"
    (binding,) = [b for b in kind(objs, "ValidatingAdmissionPolicyBinding")
                  if b["metadata"]["name"].endswith("-namespace-exemptions")]  # fmt: skip
    assert binding["spec"]["policyName"] == "gpu-policy-namespace-exemptions"
    assert "gpu-policy-namespace-exemptions" in [
        r["metadata"]["name"] for r in kind(objs, "ClusterRole")
    ]
    reserved = _reserved(vap)
    assert reserved[0] == "platform"
    assert {"batch-infra", "nvidia"} <= set(reserved)
    assert "gpu-webhook" not in reserved
    assert admit(vap, operation="CREATE", obj=namespace("batch-infra"))[0]
    for obj in (vap, binding):
        assert validation_error(obj) is None


@pytest.mark.slow
def test_the_chart_renders_what_deploy_base_installs_by_default_and_nothing_when_disabled() -> None:
    ours, base = policy_of(template({})), one(kustomize("base"), "ValidatingAdmissionPolicy", NAME)
    assert ours["spec"]["validations"] == base["spec"]["validations"]
    assert _reserved(ours) == _reserved(base)
    off = template({"admissionPolicies": {"enabled": False}})
    assert not [o for o in off if o["kind"].startswith("ValidatingAdmissionPolicy")]
