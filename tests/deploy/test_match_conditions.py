"""The match conditions as deployed: the kustomize overlay holds what the command prints
for the shipped rules, kustomize and the chart render them onto the two webhooks, and what
they render is valid Kubernetes (the schemas of kubernetes-validate's latest version)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_chart import rendered, run_helm
from tests.deploy.test_manifests import one
from tests.deploy.test_manifests import render as kustomize
from tests.kubeschema import validation_error
from webhook.engine.evaluation.matchconditions import MAX_CONDITIONS, MUTATING, VALIDATING

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy/overlays/match-conditions/match-conditions.yaml"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _conditions(objs: Any) -> dict[str, Any]:
    return {
        w["name"]: w.get("matchConditions")
        for o in objs
        if o["kind"] in WEBHOOK_KINDS
        for w in o["webhooks"]
    }


def test_the_overlay_holds_what_the_command_prints_for_the_shipped_rules() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "rules", "match-conditions", "--rules", "rules",
         "--tainted-gpu-nodes"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout == OVERLAY.read_text(encoding="utf-8"), (
        "stale: run gpu-webhook rules match-conditions --rules rules --tainted-gpu-nodes "
        "> deploy/overlays/match-conditions/match-conditions.yaml, then scripts/sync-chart"
    )


@pytest.mark.parametrize(
    "objs",
    [
        pytest.param(lambda: kustomize("overlays/match-conditions"), id="kustomize"),
        pytest.param(lambda: rendered({"matchConditions": {"enabled": True}}), id="chart"),
    ],
)
def test_both_webhooks_get_their_condition_and_the_policy_webhook_none(objs: Any) -> None:
    objects = objs()
    conditions = _conditions(objects)
    assert [c["name"] for c in conditions[MUTATING]] == ["may-touch-gpus"]
    assert [c["name"] for c in conditions[VALIDATING]] == ["may-touch-gpus"]
    assert conditions["validate-policies.gpu-webhook.io"] is None
    assert all(len(c) <= MAX_CONDITIONS for c in conditions.values() if c)
    for obj in objects:
        if obj["kind"] in WEBHOOK_KINDS:
            assert validation_error(obj) is None


def test_the_chart_renders_none_unless_enabled() -> None:
    assert all(c is None for c in _conditions(rendered({})).values())


# --- the runtime sync (serve --sync-match-conditions) ---------------------------------------

SYNC = "gpu-webhook-match-conditions"
SYNC_ENV = "GPU_WEBHOOK_SYNC_MATCH_CONDITIONS"


def _env(objs: Any) -> dict[str, Any]:
    (container,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def _sync_rules(objs: Any, role: str = SYNC) -> dict[str, list[dict[str, Any]]]:
    return {
        o["kind"]: o["rules"]
        for o in objs
        if o["kind"] in ("ClusterRole", "Role") and o["metadata"]["name"] == role
    }


def _granted(name: str, lease: str = SYNC) -> dict[str, list[dict[str, Any]]]:
    return {
        "ClusterRole": [
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                "resourceNames": [name],
                "verbs": ["get", "patch"],
            }
        ],
        "Role": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [lease],
                "verbs": ["get", "update"],
            },
        ],
    }


def _sorted(rules: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {k: [{f: sorted(v) for f, v in r.items()} for r in rs] for k, rs in rules.items()}


def test_the_sync_overlay_turns_it_on_with_exactly_its_rbac_and_no_static_conditions() -> None:
    objs = kustomize("overlays/match-conditions-sync")
    assert _env(objs)[SYNC_ENV] == "true"
    assert _sorted(_sync_rules(objs)) == _sorted(_granted("gpu-webhook"))
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        (subject,) = one(objs, binding, SYNC)["subjects"]
        assert subject == {
            "kind": "ServiceAccount",
            "name": "gpu-webhook",
            "namespace": "gpu-webhook",
        }
    assert all(c is None for c in _conditions(objs).values())


def test_the_base_and_the_static_overlay_neither_sync_nor_may_patch_their_configurations() -> None:
    for name in ("base", "overlays/match-conditions"):
        objs = kustomize(name)
        assert SYNC_ENV not in _env(objs)
        assert _sync_rules(objs) == {}


def test_the_chart_value_renders_the_flag_the_release_name_and_the_rbac_and_no_conditions() -> None:
    objs = rendered({"matchConditions": {"sync": True}, "fullnameOverride": "gpu-policy"})
    env = _env(objs)
    assert (env[SYNC_ENV], env["GPU_WEBHOOK_WEBHOOK_CONFIGURATION"]) == ("true", "gpu-policy")
    # The configurations are renamed with the release; the Lease keeps its name.
    rules = _sync_rules(objs, "gpu-policy-match-conditions")
    assert _sorted(rules) == _sorted(_granted("gpu-policy"))
    assert all(c is None for c in _conditions(objs).values())
    assert SYNC_ENV not in _env(rendered({}))


@pytest.mark.parametrize(
    ("values", "said"),
    [
        pytest.param({"matchConditions": {"enabled": True, "sync": True}}, "choose one", id="both"),
        pytest.param(
            {
                "matchConditions": {"sync": True},
                "inventory": {"source": "configMap", "configMap": "n"},
            },
            "matchConditions.sync needs inventory.source cluster",
            id="static-inventory",
        ),
    ],
)
def test_the_chart_refuses_a_sync_it_cannot_keep(values: dict[str, Any], said: str) -> None:
    done = run_helm("template", values=values)
    assert done.returncode != 0
    assert said in done.stderr, done.stderr
