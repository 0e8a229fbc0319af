"""The match conditions as deployed: the kustomize overlay holds what the command prints
for the shipped rules, kustomize and the chart render them onto the two webhooks, and what
they render is valid Kubernetes (the schemas of kubernetes-validate's latest version)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_chart import rendered
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
