"""The server's background audit, one loop step at a time against a loopback API server:
only the Lease holder audits; it audits when due and after a rule change; it writes valid
PolicyReports and exports the findings gauge; without the CRD it says what to install."""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import RULES, deployment, pod
from tests.cluster.conftest import FakeApiServer
from tests.cluster.replayserver import eventually, fixture
from tests.cluster.test_reportwriter import serve_crds
from tests.reports.reportschema import assert_valid_report
from tests.running import kubeconfig
from webhook.cluster.apiclient import ApiClient, ApiEndpoint
from webhook.cluster.lease import Lease, micro_time
from webhook.cluster.reportwriter import BASE
from webhook.files.rulefiles import RuleStore
from webhook.serving.auditor import BackgroundAudit, findings_by_rule

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
TEAM_A = f"{BASE}/namespaces/team-a/policyreports/gpu-webhook-audit"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpu-webhook/leases/gpu-webhook-audit"


def serve_cluster(api: FakeApiServer) -> None:
    """Nodes and namespaces as recorded, API discovery for core and apps, one Deployment
    with its pod that asks for more GPUs than any node has, and one bare CPU pod."""
    for node in json.loads(fixture("node-list.json"))["items"]:
        api.put_object(f"/api/v1/nodes/{node['metadata']['name']}", node)
    for name in ("team-a", "gpu-webhook"):
        api.put_object(f"/api/v1/namespaces/{name}", {"metadata": {"name": name, "labels": {}}})
    api.namespaces |= {"team-a", "gpu-webhook"}
    api.objects["/api/v1"] = {"resources": [{"name": "pods"}, {"name": "nodes"}]}
    api.objects["/apis/apps"] = {"preferredVersion": {"groupVersion": "apps/v1"}}
    api.objects["/apis/apps/v1"] = {"resources": [{"name": "deployments"}]}
    template = pod(gpus=16, name="train")
    train = copy.deepcopy(deployment(template, replicas=2))
    train["metadata"] |= {"name": "train", "namespace": "team-a", "uid": "d-1"}
    api.put_object("/apis/apps/v1/namespaces/team-a/deployments/train", train)
    owned = copy.deepcopy(template)
    owned["metadata"] |= {
        "name": "train-0",
        "namespace": "team-a",
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "train",
                "uid": "d-1",
                "controller": True,
            }
        ],
    }
    api.put_object("/api/v1/namespaces/team-a/pods/train-0", owned)
    cpu = pod(gpus=None, name="web")
    cpu["metadata"]["namespace"] = "team-a"
    api.put_object("/api/v1/namespaces/team-a/pods/web", cpu)


class Clock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def utc(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.seconds)


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    directory = tmp_path / "rules"
    shutil.copytree(RULES, directory)
    return directory


@pytest.fixture
def client(fake_api: FakeApiServer) -> Iterator[ApiClient]:
    serve_cluster(fake_api)
    api = ApiClient(ApiEndpoint(host=fake_api.url))
    yield api
    api.close()


def auditor(
    fake_api: FakeApiServer,
    client: ApiClient,
    rules: Path,
    clock: Clock,
    *,
    identity: str,
    exported: list[Any],
) -> BackgroundAudit:
    lease = Lease(
        client,
        namespace="gpu-webhook",
        name="gpu-webhook-audit",
        identity=identity,
        duration_seconds=300,
        clock=clock.utc,
    )
    return BackgroundAudit(
        endpoint=ApiEndpoint(host=fake_api.url),
        rules=RuleStore(str(rules)),
        lease=lease,
        period_seconds=3600,
        export=exported.append,
        clock=clock.monotonic,
        wall_clock=lambda: 1_796_000_000.0 + clock.seconds,
    )


def test_only_the_lease_holder_audits_and_writes_valid_reports(
    fake_api: FakeApiServer, client: ApiClient, rules: Path
) -> None:
    serve_crds(fake_api)
    clock = Clock()
    exported_a: list[Any] = []
    exported_b: list[Any] = []
    a = auditor(fake_api, client, rules, clock, identity="pod-a", exported=exported_a)
    b = auditor(fake_api, client, rules, clock, identity="pod-b", exported=exported_b)
    a.step()
    b.step()
    assert (a.runs, b.runs) == (1, 0)
    report = fake_api.objects[TEAM_A]
    assert_valid_report(report)
    (capacity,) = [r for r in report["results"] if r["rule"] == "capacity"]
    assert capacity["resources"][0]["name"] == "train"
    assert capacity["properties"]["folded"] == "1 Pod"
    (counts,) = exported_a
    assert counts[("builtin/capacity", "fail")] == 1
    assert exported_b == []


def test_the_holder_audits_again_after_its_period_or_a_rule_change_not_before(
    fake_api: FakeApiServer, client: ApiClient, rules: Path
) -> None:
    serve_crds(fake_api)
    clock = Clock()
    a = auditor(fake_api, client, rules, clock, identity="pod-a", exported=[])
    a.step()
    clock.seconds = 1800
    a.step()
    assert a.runs == 1
    (rules / "30-small-pods.yaml").write_text(
        """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: small-pods}
spec:
  validate:
  - maxGPUsPerPod: 4
    action: audit
"""
    )
    a.step()
    assert a.runs == 2
    policies = {r["policy"] for r in fake_api.objects[TEAM_A]["results"]}
    assert "small-pods" in policies
    clock.seconds = 1800 + 3601
    a.step()
    assert a.runs == 3


def test_a_replica_that_loses_the_lease_zeroes_its_findings(
    fake_api: FakeApiServer, client: ApiClient, rules: Path
) -> None:
    serve_crds(fake_api)
    clock = Clock()
    exported: list[Any] = []
    a = auditor(fake_api, client, rules, clock, identity="pod-a", exported=exported)
    a.step()
    # The API server was unreachable from pod-a for longer than the Lease: pod-b took it.
    clock.seconds = 400
    b = auditor(fake_api, client, rules, clock, identity="pod-b", exported=[])
    b.step()
    a.step()
    assert (a.runs, b.runs) == (1, 1)
    assert exported[-1] == {}


def test_a_long_audit_renews_the_lease_between_pages_and_stops_if_it_is_lost(
    fake_api: FakeApiServer, client: ApiClient, rules: Path
) -> None:
    serve_crds(fake_api)
    clock = Clock()
    a = auditor(fake_api, client, rules, clock, identity="pod-a", exported=[])
    lists = []

    def slow_pages(req: Any) -> None:
        # Each list page takes 150 s on this clock: the Lease (300 s) must be renewed.
        if req.method == "GET" and req.query.get("limit"):
            lists.append(req.path)
            clock.seconds += 150

    fake_api.intercept = slow_pages
    a.step()
    assert a.runs == 1
    renewed = fake_api.objects[LEASE]["spec"]["renewTime"]
    assert renewed > "2026-11-30T12:05:00"  # renewed during the audit, not only at its start
    # Next period, another replica takes the Lease while pod-a lists: pod-a stops and
    # writes nothing.
    clock.seconds += 3600

    def taken_meanwhile(req: Any) -> None:
        slow_pages(req)
        if req.method == "GET" and req.query.get("limit") and len(lists) > 6:
            spec = fake_api.objects[LEASE]["spec"]
            spec |= {"holderIdentity": "pod-b", "renewTime": micro_time(clock.utc())}

    fake_api.intercept = taken_meanwhile
    before = len(fake_api.writes())
    a.step()
    assert a.runs == 1
    assert "another replica took the audit Lease" in a.last_error
    assert [r for r in fake_api.writes()[before:] if "policyreports" in r.path] == []


def test_without_the_crd_the_audit_says_what_to_install(
    fake_api: FakeApiServer, client: ApiClient, rules: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    a = auditor(fake_api, client, rules, clock, identity="pod-a", exported=[])
    with caplog.at_level(logging.ERROR, logger="webhook.audit"):
        a.step()
    assert a.runs == 0
    assert "PolicyReport CRDs" in a.last_error
    assert "docs/deploy.md" in caplog.text


def test_findings_are_counted_by_rule_and_result() -> None:
    reports = [
        {"results": [{"policy": "builtin", "rule": "capacity", "result": "fail"}] * 2},
        {"results": [{"policy": "gpu-webhook", "rule": "admission", "result": "pass"}]},
    ]
    assert findings_by_rule(reports) == {
        ("builtin/capacity", "fail"): 2,
        ("gpu-webhook/admission", "pass"): 1,
    }


@pytest.mark.slow
def test_the_auditor_process_audits_then_gives_the_lease_up_on_sigterm(
    fake_api: FakeApiServer, client: ApiClient, rules: Path, tmp_path: Path
) -> None:
    serve_crds(fake_api)
    config = kubeconfig(tmp_path, fake_api.url)
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook.serving.auditor",
            "--kubeconfig",
            config,
            "--rules",
            str(rules),
            "--lease-namespace",
            "gpu-webhook",
            "--identity",
            "pod-x",
        ],
        env={**os.environ, "PYTHONPATH": str(root)},
        stderr=subprocess.PIPE,
    )
    try:
        eventually(lambda: TEAM_A in fake_api.objects, timeout=60)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert any(line["msg"] == "background audit done" for line in lines)
    lease = fake_api.objects[LEASE]["spec"]
    assert lease["holderIdentity"] == ""


def test_the_findings_gauge_written_by_the_auditor_process_is_served_by_metrics(
    tmp_path: Path,
) -> None:
    """The auditor is a process of its own: its gauge reaches /metrics through the same
    multiprocess files as the workers' metrics; a rule that stopped firing reads 0."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(root)}
    write = (
        "from webhook.serving import metrics\n"
        "metrics.audit_findings({('builtin/capacity', 'fail'): 3, ('small/maxGPUsPerPod', 'fail'): 1})\n"
        "metrics.audit_findings({('builtin/capacity', 'fail'): 2})\n"
    )
    subprocess.run([sys.executable, "-c", write], env=env, check=True, timeout=60)
    read = "from webhook.serving import metrics\nprint(metrics.exposition()[0].decode())\n"
    served = subprocess.run(
        [sys.executable, "-c", read],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    assert 'gpu_webhook_audit_findings{result="fail",rule="builtin/capacity"} 2.0' in served
    assert 'gpu_webhook_audit_findings{result="fail",rule="small/maxGPUsPerPod"} 0.0' in served


def test_the_background_audit_judges_with_the_clusters_rule_objects(
    fake_api: FakeApiServer, client: ApiClient, rules: Path
) -> None:
    """As the server does (issue 33): the GPUPolicy objects, listed at each audit."""
    serve_crds(fake_api)
    fake_api.objects["/apis/gpu-webhook.io/v1alpha1"] = {"resources": [{"name": "gpupolicies"}]}
    fake_api.put_object(
        "/apis/gpu-webhook.io/v1alpha1/gpupolicies/cluster-small-pods",
        {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicy",
            "metadata": {"name": "cluster-small-pods", "generation": 1},
            "spec": {"validate": [{"maxGPUsPerPod": 4, "action": "audit"}]},
        },
    )
    a = auditor(fake_api, client, rules, Clock(), identity="pod-a", exported=[])
    a.step()
    assert a.runs == 1
    policies = {r["policy"] for r in fake_api.objects[TEAM_A]["results"]}
    assert "cluster-small-pods" in policies


def test_the_background_audit_judges_resource_claims_as_the_audit_command_does(
    fake_api: FakeApiServer, client: ApiClient, rules: Path
) -> None:
    """Issue 31: ResourceClaims are judged by serve --audit as by gpu-webhook audit; this
    one names a DeviceClass the cluster does not have."""
    serve_crds(fake_api)
    dra = "/apis/resource.k8s.io/v1"
    fake_api.objects[dra] = {"resources": [{"name": "resourceclaims"}]}
    # Served and empty, as a real API server lists them.
    for plural in ("deviceclasses", "resourceslices", "resourceclaimtemplates", "resourceclaims"):
        fake_api.collections.add(f"{dra}/{plural}")
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "no-class", "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    fake_api.put_object(f"{dra}/namespaces/team-a/resourceclaims/no-class", claim)
    a = auditor(fake_api, client, rules, Clock(), identity="pod-a", exported=[])
    a.step()
    assert a.runs == 1
    results = fake_api.objects[TEAM_A]["results"]
    claimed = [r for r in results if any(o["name"] == "no-class" for o in r["resources"])]
    assert [(r["policy"], r["rule"]) for r in claimed] == [("builtin", "unknownDeviceClass")]
