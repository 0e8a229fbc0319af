"""PolicyReports written into a cluster: created, updated, left alone when unchanged,
deleted when stale, retried on conflict; others' reports untouched; a clear error when the
CRD is missing. Every report the writer sends validates against the real CRD."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import RULES, pod
from tests.cluster.conftest import FakeApiServer, Request
from tests.reports.reportschema import assert_valid_report
from webhook.cluster.apiclient import ApiClient, ApiEndpoint
from webhook.cluster.reportwriter import BASE, CRD_MISSING, CrdMissing, ReportWriter
from webhook.engine.evaluation.request import NO_INVENTORY
from webhook.files.rulefiles import load_policy
from webhook.reports.audit import Audit
from webhook.reports.policyreport import policy_reports

POLICY = load_policy(str(RULES))
TEAM_A = f"{BASE}/namespaces/team-a/policyreports/gpu-webhook-audit"
TEAM_B = f"{BASE}/namespaces/team-b/policyreports/gpu-webhook-audit"
CLUSTER = f"{BASE}/clusterpolicyreports/gpu-webhook-audit"


def serve_crds(api: FakeApiServer) -> None:
    api.objects[BASE] = {
        "kind": "APIResourceList",
        "metadata": {},
        "resources": [{"name": "policyreports"}, {"name": "clusterpolicyreports"}],
    }
    api.collections |= {f"{BASE}/policyreports", f"{BASE}/clusterpolicyreports"}
    api.namespaces |= {"team-a", "team-b"}


@pytest.fixture
def writer(fake_api: FakeApiServer) -> Iterator[ReportWriter]:
    serve_crds(fake_api)
    client = ApiClient(ApiEndpoint(host=fake_api.url))
    yield ReportWriter(client)
    client.close()


def reports(*namespaces: str, gpus: int = 1, now: float = 1_796_000_000.0) -> list[dict[str, Any]]:
    audit = Audit(policy=POLICY, inventory=NO_INVENTORY)
    for namespace in namespaces:
        obj = pod(gpus=gpus, requests_only=True, name=f"p-{namespace}")
        obj["metadata"]["namespace"] = namespace
        audit.add(obj)
    return policy_reports(audit.entries(), policy=POLICY, now=now)


def sent_bodies(api: FakeApiServer) -> list[dict[str, Any]]:
    return [r.body for r in api.writes() if r.method in ("POST", "PUT")]


def test_the_first_audit_creates_every_report_valid_against_the_crd(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    result = writer.write(reports("team-a", "team-b"))
    assert sorted(result.created) == [
        "ClusterPolicyReport gpu-webhook-audit",
        "PolicyReport team-a/gpu-webhook-audit",
        "PolicyReport team-b/gpu-webhook-audit",
    ]
    assert {TEAM_A, TEAM_B, CLUSTER} <= fake_api.objects.keys()
    for body in sent_bodies(fake_api):
        assert_valid_report(body)


def test_an_unchanged_audit_writes_nothing_even_with_new_timestamps(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    writer.write(reports("team-a"))
    before = len(fake_api.writes())
    result = writer.write(reports("team-a", now=1_796_003_600.0))
    assert len(result.unchanged) == 2
    assert len(fake_api.writes()) == before


def test_changed_results_update_with_the_version_read(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    writer.write(reports("team-a"))
    version = fake_api.objects[TEAM_A]["metadata"]["resourceVersion"]
    result = writer.write(reports("team-a", gpus=2))
    assert result.updated == ["PolicyReport team-a/gpu-webhook-audit"]
    (put,) = [r for r in fake_api.writes() if r.method == "PUT"]
    assert put.body["metadata"]["resourceVersion"] == version
    assert_valid_report(put.body)
    assert "requests nvidia.com/gpu: 2" in fake_api.objects[TEAM_A]["results"][0]["message"]


def test_a_namespace_with_nothing_to_report_loses_its_stale_report(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    writer.write(reports("team-a", "team-b"))
    result = writer.write(reports("team-a"))
    assert result.deleted == ["PolicyReport team-b/gpu-webhook-audit"]
    assert TEAM_B not in fake_api.objects
    assert TEAM_A in fake_api.objects


def test_reports_of_other_tools_are_never_touched(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    kyverno = f"{BASE}/namespaces/team-b/policyreports/kyverno-polr"
    fake_api.put_object(
        kyverno,
        {
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": "PolicyReport",
            "metadata": {
                "name": "kyverno-polr",
                "namespace": "team-b",
                "labels": {"app.kubernetes.io/managed-by": "kyverno"},
            },
            "results": [],
        },
    )
    writer.write(reports("team-a"))
    assert kyverno in fake_api.objects
    assert not [r for r in fake_api.writes() if r.path == kyverno]


def test_a_conflicting_update_is_read_again_and_retried(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    writer.write(reports("team-a"))
    raced = []

    def someone_else_writes_first(req: Request) -> None:
        if req.method == "PUT" and req.path == TEAM_A and not raced:
            raced.append(req)
            current = copy.deepcopy(fake_api.objects[TEAM_A])
            current["metadata"]["annotations"] = {"touched-by": "someone"}
            fake_api.put_object(TEAM_A, current)  # bumps resourceVersion: this PUT gets 409

    fake_api.intercept = someone_else_writes_first  # type: ignore[assignment]
    result = writer.write(reports("team-a", gpus=2))
    assert result.updated == ["PolicyReport team-a/gpu-webhook-audit"]
    puts = [r for r in fake_api.writes() if r.method == "PUT" and r.path == TEAM_A]
    assert len(puts) == 2
    assert (
        puts[1].body["metadata"]["resourceVersion"] != puts[0].body["metadata"]["resourceVersion"]
    )


def test_a_report_created_meanwhile_is_updated_instead(
    fake_api: FakeApiServer, writer: ReportWriter
) -> None:
    def another_replica_created_it(req: Request) -> None:
        if req.method == "POST" and req.path.endswith("/namespaces/team-a/policyreports"):
            fake_api.intercept = None
            fake_api.put_object(TEAM_A, {**req.body, "results": []})
            return (
                409,
                {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"},
            )  # type: ignore[return-value]
        return None

    fake_api.intercept = another_replica_created_it  # type: ignore[assignment]
    result = writer.write(reports("team-a"))
    assert "PolicyReport team-a/gpu-webhook-audit" in result.updated
    assert fake_api.objects[TEAM_A]["results"][0]["rule"] == "requestsWithoutLimits"


def test_a_cluster_without_the_crd_gets_a_clear_message(fake_api: FakeApiServer) -> None:
    client = ApiClient(ApiEndpoint(host=fake_api.url))
    try:
        with pytest.raises(CrdMissing) as missing:
            ReportWriter(client).write(reports("team-a"))
    finally:
        client.close()
    assert str(missing.value) == CRD_MISSING
    assert "docs/deploy.md" in CRD_MISSING
    assert fake_api.writes() == []
