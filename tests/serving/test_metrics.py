"""The server's metrics: every label set an alert or a panel reads is created at 0 before
the first review, the serving certificate's expiry is set whenever a certificate loads, the
reload loop reports rejected rule files, and docs/server.md lists every metric."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from tests.builders import ROOT, RULES, team_policies
from tests.cluster.ruleobjects import gpu_policy
from webhook.admission.service import AdmissionService
from webhook.cluster import conditionsync, watchmetrics
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.files.rulefiles import RuleStore, load_policy
from webhook.files.ruleobjects import RuleObject
from webhook.serving import metrics
from webhook.serving.reloader import Reloader
from webhook.serving.tls import ReloadingContext


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


@pytest.fixture(scope="module", autouse=True)
def initialised() -> None:
    metrics.initialise(load_policy(str(RULES)))


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
@pytest.mark.parametrize("kind", ["Pod", "Deployment", "other"])
@pytest.mark.parametrize("decision", ["allowed", "denied", "error"])
def test_every_decision_of_every_known_kind_is_counted_from_zero(
    endpoint: str, kind: str, decision: str
) -> None:
    found = value(
        "gpu_webhook_requests_total",
        endpoint=endpoint,
        kind=kind,
        operation="CREATE",
        decision=decision,
    )
    assert found is not None
    assert found >= 0


@pytest.mark.parametrize(
    ("rule", "action"),
    [
        pytest.param("builtin/capacity", "deny", id="a built-in check at its action"),
        pytest.param("builtin/capacity", "warn", id="capacity warns when it cannot know"),
        pytest.param("builtin/sharedGPURequest", "warn", id="a warn check"),
    ],
)
def test_findings_of_every_check_exist_before_the_first_review(rule: str, action: str) -> None:
    assert value("gpu_webhook_findings_total", endpoint="mutate", rule=rule, action=action) == 0


def test_findings_of_rule_checks_are_named_as_the_engine_names_them() -> None:
    policy = load_policy(str(RULES))
    labels = metrics.finding_labels(policy)
    for rule in policy.rules:
        for check in rule.checks:
            assert (f"{rule.name}/{check.kind}", check.action) in labels


@pytest.mark.parametrize("result", ["success", "failure"])
def test_both_reload_results_exist_before_any_reload(result: str) -> None:
    assert value("gpu_webhook_rule_reloads_total", result=result) is not None


@pytest.mark.parametrize("code", ["400", "413", "415"])
def test_refusals_exist_before_any_call_is_refused(code: str) -> None:
    assert value("gpu_webhook_malformed_requests_total", endpoint="validate", code=code) is not None


def test_a_loaded_certificate_reports_when_it_expires(tmp_path: Path) -> None:
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=7), tmp_path)
    heard: list[float] = []
    tls = ReloadingContext(tmp_path / "tls.crt", tmp_path / "tls.key", on_load=heard.append)
    tls.context()
    (expiry,) = heard
    days = (expiry - dt.datetime.now(dt.UTC).timestamp()) / 86400
    assert 6.9 < days <= 7
    tls.context()
    assert len(heard) == 1, "unchanged files are not loaded again"
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    tls.context()
    assert len(heard) == 2
    assert heard[1] > expiry


def test_the_reload_loop_reports_rejected_rule_files_until_they_are_fixed(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    reloader = Reloader(AdmissionService(rules=RuleStore(str(rules)), inventory=None))
    reloader.tick()
    assert value("gpu_webhook_rule_files_rejected") == 0
    failures = value("gpu_webhook_rule_reloads_total", result="failure") or 0
    (rules / "99-broken.yaml").write_text("kind: [\n")
    reloader.tick()
    assert value("gpu_webhook_rule_files_rejected") == 1
    assert value("gpu_webhook_rule_reloads_total", result="failure") == failures + 1
    (rules / "99-broken.yaml").unlink()
    reloader.tick()
    assert value("gpu_webhook_rule_files_rejected") == 0


def exported_names() -> list[str]:
    """Every metric the server and its watcher define, as a scrape names it."""
    source = watchmetrics._metrics()
    wrappers = [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]
    wrappers += [source.errors, source.last_sync, source.active]
    wrappers += [conditionsync._metrics().syncs]
    # prometheus_client keeps a counter's name without the _total it exposes.
    return [f"{m._name}_total" if m._type == "counter" else m._name for m in wrappers]


@pytest.mark.parametrize("name", exported_names())
def test_docs_server_md_lists_every_metric(name: str) -> None:
    assert f"`{name}`" in (ROOT / "docs" / "server.md").read_text()


def not_in_force(kind: str, name: str) -> float | None:
    labels = {"kind": kind, "name": name}
    return REGISTRY.get_sample_value("gpu_webhook_rule_objects_not_in_force", labels)


def test_the_reload_loop_names_each_rule_object_not_in_force_until_it_is(tmp_path: Path) -> None:
    """As rule files rejected have a gauge, so do rule objects whose Ready is False."""
    objects: list[RuleObject] = []
    store = RuleStore(str(RULES), objects=lambda: tuple(objects))
    reloader = Reloader(AdmissionService(rules=store, inventory=None))
    broken = {"validate": [{"maxGPUsPerPd": 1}]}
    objects.append(RuleObject.of(gpu_policy("not-yet", broken)))
    reloader.tick()
    assert not_in_force("GPUPolicy", "not-yet") == 1
    objects[0] = RuleObject.of(
        gpu_policy("not-yet", {"validate": [{"maxGPUsPerPod": 1}]}, generation=2)
    )
    reloader.tick()
    assert not_in_force("GPUPolicy", "not-yet") == 0
    objects[0] = RuleObject.of(gpu_policy("not-yet", broken, generation=3))
    reloader.tick()
    assert not_in_force("GPUPolicy", "not-yet") == 1
    objects.clear()  # deleted
    reloader.tick()
    assert not_in_force("GPUPolicy", "not-yet") == 0


def test_the_rule_objects_gauge_names_a_bounded_number_of_objects() -> None:
    many = [("GPUPolicy", f"p{i}") for i in range(metrics.NAMED_RULE_OBJECTS + 5)]
    metrics.rule_objects_not_in_force(many)
    named = {
        s.labels["name"]
        for m in REGISTRY.collect()
        for s in m.samples
        if s.name == "gpu_webhook_rule_objects_not_in_force"
    }
    assert len(named - {"_other"}) <= metrics.NAMED_RULE_OBJECTS
    assert not_in_force("GPUPolicy", "_other") >= 5
    metrics.rule_objects_not_in_force([])
    assert not_in_force("GPUPolicy", "_other") == 0


def test_exception_uses_are_counted_by_namespace_and_name_in_a_bounded_number_of_series() -> None:
    """Issue 44: one series per exception in force, at most MAX_EXCEPTION_SERIES of them."""
    tally = metrics.ReviewTally(batch=1_000_000)
    many = [f"team-{i}/waiver" for i in range(metrics.MAX_EXCEPTION_SERIES + 5)]
    before = REGISTRY.get_sample_value(
        "gpu_webhook_policy_exceptions_applied_total", {"namespace": "other", "exception": "other"}
    )
    for exception in [*many, "team-0/waiver"]:
        tally.add(
            endpoint="validate",
            kind="Pod",
            operation="CREATE",
            verdict="allowed",
            seconds=0.001,
            exceptions=[exception],
        )
    tally.flush()

    def count(namespace: str, name: str) -> float | None:
        return REGISTRY.get_sample_value(
            "gpu_webhook_policy_exceptions_applied_total",
            {"namespace": namespace, "exception": name},
        )

    assert count("team-0", "waiver") == 2
    assert count(f"team-{metrics.MAX_EXCEPTION_SERIES}", "waiver") is None
    assert count("other", "other") == (before or 0) + 5


def test_each_exception_in_force_is_counted_from_zero(tmp_path: Path) -> None:
    metrics.initialise(load_policy(str(team_policies(tmp_path))))
    assert (
        REGISTRY.get_sample_value(
            "gpu_webhook_policy_exceptions_applied_total",
            {"namespace": "team-a", "exception": "big-train"},
        )
        == 0
    )
