"""``gpu-webhook rules match-conditions``: the conditions as kustomize patches, in JSON, or
set into a webhook configuration file; unusable input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.rulesets import TEAM_SHM, rules_dir
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_it_prints_one_patch_per_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "match-conditions", "--rules", str(ROOT / "rules")]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    # Without the promise of tainted GPU nodes, every pod template is called.
    assert docs[0]["webhooks"][0]["matchConditions"] == [
        {"name": "may-touch-gpus", "expression": "true"}
    ]


def test_it_sets_them_into_a_webhook_configuration_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["rules", "match-conditions", "--rules", str(ROOT / "rules"), "--tainted-gpu-nodes"]
    assert main([*argv, "-o", "json", "--patch", str(ROOT / "deploy/base/webhooks.yaml")]) == 0
    docs = json.loads(capsys.readouterr().out)
    names = {w["name"]: w.get("matchConditions") for d in docs for w in d["webhooks"]}
    assert names["mutate.gpu-webhook.io"][0]["expression"].startswith("object == null")
    assert names["validate.gpu-webhook.io"][0]["name"] == "may-touch-gpus"
    assert names["validate-policies.gpu-webhook.io"] is None
    assert [d["webhooks"][0]["failurePolicy"] for d in docs] == ["Ignore", "Ignore"]


def test_a_rule_that_acts_on_pods_asking_for_no_gpu_calls_its_namespaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = rules_dir(tmp_path, TEAM_SHM)
    argv = ["rules", "match-conditions", "--rules", str(rules), "--tainted-gpu-nodes"]
    assert main([*argv, "-o", "json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    for doc in docs:
        expression = doc["webhooks"][0]["matchConditions"][0]["expression"]
        assert "request.namespace in ['team-a']" in expression


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        pytest.param(["--rules", "/nonexistent/rules"], "no such directory", id="no-rules"),
        pytest.param(["--patch", "/nonexistent.yaml"], "not a readable YAML file", id="no-file"),
    ],
)
def test_unusable_input_is_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = [] if "--rules" in argv else ["--rules", str(ROOT / "rules")]
    assert main(["rules", "match-conditions", *rules, *argv]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "Traceback" not in err
