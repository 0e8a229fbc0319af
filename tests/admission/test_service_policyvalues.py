"""Rule values nothing in the cluster has (issue 42), at every entry point of the server: the
log of a start and of a reload (files and objects), the metric, ``/validate``'s warning on a
policy object and the object's ``ClusterMatch`` status condition all say the golden case's
sentence (``tests/cases/_policyvalues``), which ``rules lint`` prints too."""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from tests.builders import review
from tests.policyvalues import CASE_PARAMS, Case
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.cluster.sources.rulesource import (
    CLUSTER_MATCH,
    ClusterSight,
    desired_status,
    object_findings,
)
from webhook.files.rulefiles import RuleStore
from webhook.files.ruleobjects import RuleObject, Verdict
from webhook.serving.reloader import Reloader

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "rules" / "00-settings.yaml"


class CaseSource(StaticInventorySource):
    """The case's inventory file, and its namespaces as a live watcher would know them."""

    def __init__(self, case: Case) -> None:
        super().__init__(str(case.inventory))
        self.names = frozenset(case.namespaces) if case.namespaces is not None else None

    def namespaces(self) -> dict[str, dict[str, str]] | None:
        return None if self.names is None else {name: {} for name in self.names}


def policy_object(case: Case) -> dict[str, object]:
    return {**case.document, "metadata": {"name": case.policy_name, "generation": 1, "uid": "u"}}


def settings_only(tmp_path: Path) -> Path:
    """A rule directory with the shipped settings alone (a directory holds a document)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(SETTINGS, rules / "00-settings.yaml")
    return rules


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("rule value matches nothing in the cluster")
    ]


def unmeetable(source: str) -> float | None:
    return REGISTRY.get_sample_value("gpu_webhook_rules_unmeetable", {"source": source})


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_validate_warns_on_a_policy_object_with_the_golden_sentence_and_stores_it(
    case: Case,
) -> None:
    service = AdmissionService(rules=RuleStore(str(ROOT / "rules")), inventory=CaseSource(case))
    body = review(policy_object(case))

    outcome = service.review(parse_review(json.dumps(body)), mutate=False)

    response = outcome.body["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [case.says]


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_serve_logs_a_rule_file_with_the_golden_sentence_and_counts_it_when_it_cannot_be_met(
    case: Case, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")
    rules = settings_only(tmp_path)
    reloader = Reloader(AdmissionService(rules=RuleStore(str(rules)), inventory=CaseSource(case)))
    reloader.tick()
    assert logged(caplog) == []

    shutil.copy(case.directory / "rules" / "policy.yaml", rules / "50-team.yaml")
    reloader.tick()
    reloader.tick()  # said once, not at every tick

    source = str(rules / "50-team.yaml")
    assert logged(caplog) == [
        f"rule value matches nothing in the cluster: rule {case.policy_name} ({source}): "
        f"{case.says}"
    ]
    assert unmeetable(source) == (1.0 if case.blocking else None)

    (rules / "50-team.yaml").unlink()
    reloader.tick()
    assert unmeetable(source) in (0.0, None)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_serve_logs_a_policy_object_as_the_object_and_its_status_says_the_same(
    case: Case, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")
    rules = settings_only(tmp_path)
    obj = RuleObject.of(policy_object(case), kind="GPUPolicy")
    store = RuleStore(str(rules), objects=lambda: [obj])
    source = CaseSource(case)
    reloader = Reloader(AdmissionService(rules=store, inventory=source))

    reloader.tick()

    named = f"GPUPolicy object {case.policy_name}"
    assert logged(caplog) == [
        f"rule value matches nothing in the cluster: rule {case.policy_name} ({named}): {case.says}"
    ]
    assert unmeetable(named) == (1.0 if case.blocking else None)
    sight = ClusterSight(case.view(), source.names)
    found = object_findings(store.current.policy, sight)
    status = desired_status(
        obj,
        Verdict(1),
        {},
        now=dt.datetime(2026, 12, 6, tzinfo=dt.UTC),
        unmet=found[obj.key],
    )
    condition = next(c for c in status["conditions"] if c["type"] == CLUSTER_MATCH)
    assert (condition["status"], condition["reason"]) == ("False", "UnmetValues")
    assert condition["message"] == case.says


def test_a_policy_object_whose_values_the_cluster_has_gets_clustermatch_true() -> None:
    obj = RuleObject.of(
        {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicy",
            "metadata": {"name": "a100", "generation": 3},
            "spec": {"validate": [{"allowedProducts": ["NVIDIA-A100-*"]}]},
        },
        kind="GPUPolicy",
    )
    status = desired_status(
        obj, Verdict(3), {}, now=dt.datetime(2026, 12, 6, tzinfo=dt.UTC), unmet=()
    )

    condition = next(c for c in status["conditions"] if c["type"] == CLUSTER_MATCH)
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "True",
        "ValuesMet",
        3,
    )


def test_no_clustermatch_condition_while_the_cluster_cannot_be_seen() -> None:
    obj = RuleObject.of(
        {"kind": "GPUPolicy", "metadata": {"name": "a", "generation": 1}, "spec": {}},
        kind="GPUPolicy",
    )
    status = desired_status(obj, Verdict(1), {}, now=dt.datetime(2026, 12, 6, tzinfo=dt.UTC))

    assert [c["type"] for c in status["conditions"]] == ["Ready"]
