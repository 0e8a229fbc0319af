"""The audit: objects judged as a CREATE, owned objects folded into their owners, and
every PolicyReport it writes valid against the real CRD's schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import CASES, INVENTORY, RULES, deployment, pod, team_policies
from tests.reports.reportschema import assert_valid_report
from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView
from webhook.files.inventoryfile import load_inventory, load_inventory_file
from webhook.files.rulefiles import load_policy
from webhook.reports.audit import Audit, render_text
from webhook.reports.policyreport import MAX_RESULTS, policy_reports

POLICY = load_policy(str(RULES))
NODES = InventoryView(load_inventory(str(INVENTORY)))
NOW = 1_796_000_000.25


def owned(obj: dict[str, Any], owner: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "controller": controller,
        }
    ]
    return obj


def named(
    obj: dict[str, Any], name: str, *, uid: str = "", namespace: str = "default"
) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"] |= {"name": name, "namespace": namespace}
    if uid:
        obj["metadata"]["uid"] = uid
    return obj


def replica_set(template: dict[str, Any], name: str, uid: str) -> dict[str, Any]:
    rs = named(deployment(template), name, uid=uid)
    rs["kind"] = "ReplicaSet"
    return rs


def audit_of(*objects: dict[str, Any], inventory: InventoryView = NODES) -> Audit:
    audit = Audit(policy=POLICY, inventory=inventory)
    audit.add_all((o, "test") for o in objects)
    return audit


def test_a_deployments_replica_set_and_pods_fold_into_one_line() -> None:
    template = pod(gpus=16)
    deploy = named(deployment(template, replicas=3), "train", uid="d-1")
    rs = owned(replica_set(template, "train-5d8f", "rs-1"), deploy)
    pods = [owned(named(template, f"train-5d8f-{i}"), rs) for i in range(3)]
    audit = audit_of(deploy, rs, *pods)
    (entry,) = audit.entries()
    assert (entry.ref.kind, entry.ref.name, entry.verdict) == ("Deployment", "train", "deny")
    assert dict(entry.folded) == {"ReplicaSet": 1, "Pod": 3}
    summary = audit.summary()
    assert (summary.objects, summary.folded, summary.verdicts["deny"]) == (5, 4, 1)


@pytest.mark.parametrize(
    "order",
    [
        pytest.param("pods-first", id="pods-listed-before-owners"),
        pytest.param("owners-first", id="owners-listed-before-pods"),
    ],
)
def test_folding_does_not_depend_on_the_order_objects_arrive(order: str) -> None:
    template = pod(gpus=1)
    deploy = named(deployment(template), "web", uid="d-2")
    rs = owned(replica_set(template, "web-1", "rs-2"), deploy)
    pods = [owned(named(template, f"web-1-{i}"), rs) for i in range(2)]
    objects = [*pods, rs, deploy] if order == "pods-first" else [deploy, rs, *pods]
    (entry,) = audit_of(*objects).entries()
    assert entry.ref.name == "web"
    assert dict(entry.folded) == {"ReplicaSet": 1, "Pod": 2}


def test_objects_without_uids_fold_by_namespace_kind_and_name() -> None:
    template = pod(gpus=1)
    job = named(template, "batch-1")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch-1", "namespace": "default"},
        "spec": {"template": {"metadata": {}, "spec": template["spec"]}},
    }
    child = owned(named(template, "batch-1-x"), job)
    (entry,) = audit_of(job, child).entries()
    assert (entry.ref.kind, dict(entry.folded)) == ("Job", {"Pod": 1})


def test_a_pod_whose_owner_is_not_audited_stands_alone() -> None:
    operator = {
        "apiVersion": "example.com/v1",
        "kind": "Trainer",
        "metadata": {"name": "t", "uid": "x"},
    }
    child = owned(named(pod(gpus=2, requests_only=True), "t-0"), operator)
    (entry,) = audit_of(child).entries()
    assert (entry.ref.kind, entry.verdict, entry.rules) == (
        "Pod",
        "deny",
        ("builtin/requestsWithoutLimits",),
    )


def test_cpu_only_pods_that_pass_are_counted_not_kept() -> None:
    audit = audit_of(*(named(pod(gpus=None), f"cpu-{i}") for i in range(50)))
    assert audit.entries() == []
    summary = audit.summary()
    assert (summary.objects, summary.reported, summary.verdicts["pass"]) == (50, 0, 50)


DRA_ONLY = load_inventory_file(str(CASES / "_inventories" / "dra-driver-only.yaml")).view()


def _asking(resources: dict[str, Any] | None = None, claims: list[Any] | None = None) -> Any:
    obj = named(pod(gpus=None), "p")
    obj["spec"]["containers"][0]["resources"] = {"limits": resources or {}}
    obj["spec"]["tolerations"] = [{"operator": "Exists"}]
    if claims:
        obj["spec"]["resourceClaims"] = claims
    return obj


@pytest.mark.parametrize(
    ("obj", "gpu"),
    [
        pytest.param(
            _asking({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}),
            True,
            id="the implicit name of a GPU device class",
        ),
        pytest.param(
            _asking({"deviceclass.resource.kubernetes.io/multinic": 1}),
            False,
            id="the implicit name of a NIC class",
        ),
    ],
)
def test_a_passing_pod_is_a_gpu_pod_when_a_gpu_device_class_serves_what_it_asks(
    obj: dict[str, Any], gpu: bool
) -> None:
    entries = audit_of(obj, inventory=DRA_ONLY).entries()
    assert [e.gpu for e in entries] == ([True] if gpu else [])
    assert all(e.verdict == "pass" for e in entries)


GH200_MIG = load_inventory_file(str(CASES / "_inventories" / "dra-gh200-mig-1g12gb.yaml")).view()


@pytest.mark.parametrize(
    ("inventory", "device_class"),
    [
        pytest.param(DRA_ONLY, "gpu.nvidia.com", id="a class gpuDeviceClasses names"),
        pytest.param(
            GH200_MIG,
            "mig-1g-12gb.gpu.nvidia.com",
            id="a class that is a GPU class by the GPU resource it serves",
        ),
    ],
)
def test_a_passing_pod_with_a_gpu_claim_is_a_gpu_pod(
    inventory: InventoryView, device_class: str
) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }
    assert inventory.devices is not None
    view = InventoryView(inventory.snapshot, devices=inventory.devices.with_claims([template]))
    obj = _asking(claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    entries = audit_of(obj, inventory=view).entries()
    assert [(e.gpu, e.verdict) for e in entries] == [(True, "pass")]


def test_kinds_without_pod_templates_pass_and_are_counted_as_check_counts_them() -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    audit = audit_of(config)
    summary = audit.summary()
    assert (summary.objects, summary.reported, summary.verdicts) == (1, 0, {"pass": 1})
    assert audit.entries() == []


def test_the_table_has_one_line_per_owner_and_a_summary() -> None:
    template = pod(gpus=16)
    deploy = named(deployment(template, replicas=2), "train", uid="d-3", namespace="team-a")
    pods = [owned(named(template, f"p{i}", namespace="team-a"), deploy) for i in range(2)]
    fine = named(pod(gpus=1), "fine", namespace="team-b")
    audit = audit_of(deploy, *pods, fine)
    text = render_text(audit.entries(), audit.summary())
    lines = text.splitlines()
    assert lines[0].split() == ["NAMESPACE", "KIND", "NAME", "DECISION", "RULES", "INCLUDES"]
    assert lines[1].split()[:4] == ["team-a", "Deployment", "train", "deny"]
    assert "builtin/capacity" in lines[1]
    assert lines[1].endswith("2 Pod")
    assert lines[2].split() == ["team-b", "Pod", "fine", "pass", "-", "-"]
    assert lines[-1] == (
        "4 objects audited, 2 folded into their owners: 1 denied, 0 warned, 0 audit only, 1 passed"
    )


def _reports(audit: Audit, errors: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return policy_reports(audit.entries(), policy=POLICY, now=NOW, errors=errors)


def test_policy_reports_are_per_namespace_and_valid_against_the_crd() -> None:
    deny = named(pod(gpus=2, requests_only=True), "bad", namespace="team-a")
    fine = named(pod(gpus=1), "fine", namespace="team-b")
    reports = _reports(audit_of(deny, fine), errors=("cannot list pytorchjobs: 403",))
    for report in reports:
        assert_valid_report(report)
    kinds = [(r["kind"], r["metadata"].get("namespace")) for r in reports]
    assert kinds == [
        ("PolicyReport", "team-a"),
        ("PolicyReport", "team-b"),
        ("ClusterPolicyReport", None),
    ]
    (fail,) = reports[0]["results"]
    assert fail["policy"] == "builtin"
    assert fail["rule"] == "requestsWithoutLimits"
    assert (fail["result"], fail["severity"]) == ("fail", "high")
    assert fail["resources"] == [
        {"apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "bad"}
    ]
    assert fail["timestamp"] == {"seconds": 1_796_000_000, "nanos": 250_000_000}
    assert reports[0]["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert reports[1]["results"][0]["result"] == "pass"
    assert reports[2]["results"][0]["result"] == "error"


def test_a_rule_documents_file_is_named_in_its_results(tmp_path: Any) -> None:
    (tmp_path / "rules.yaml").write_text(
        """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: small-pods}
spec:
  validate:
  - maxGPUsPerPod: 2
    action: audit
"""
    )
    policy = load_policy(str(tmp_path))
    audit = Audit(policy=policy, inventory=NO_INVENTORY)
    audit.add(pod(gpus=4))
    (report, _) = policy_reports(audit.entries(), policy=policy, now=NOW)
    assert_valid_report(report)
    (audited, skipped) = report["results"]
    assert (audited["policy"], audited["rule"], audited["result"]) == (
        "small-pods",
        "maxGPUsPerPod",
        "fail",
    )
    assert audited["severity"] == "low"
    assert audited["properties"]["document"] == f"{tmp_path / 'rules.yaml'}#1"
    assert (skipped["rule"], skipped["result"]) == ("capacity", "skip")


def test_a_namespace_with_many_results_is_split_into_reports_under_the_size_limit() -> None:
    pods = [named(pod(gpus=1), f"p{i}") for i in range(MAX_RESULTS + 5)]
    reports = _reports(audit_of(*pods))
    names = [r["metadata"]["name"] for r in reports if r["kind"] == "PolicyReport"]
    assert names == ["gpu-webhook-audit", "gpu-webhook-audit-2"]
    assert [len(r["results"]) for r in reports[:2]] == [MAX_RESULTS, 5]
    for report in reports:
        assert_valid_report(report)


def test_a_waived_finding_is_a_skip_that_names_the_exception_and_the_namespace_policy(
    tmp_path: Any,
) -> None:
    """Issue 44: who waived what, in the namespace's PolicyReport. (The audit judges at the
    clock's time: the exception is given no expiry.)"""
    policy = load_policy(str(team_policies(tmp_path)))
    audit = Audit(policy=policy, inventory=NO_INVENTORY)
    labels = {"team": "a", "cost-center": "cc1", "app": "big-train"}
    big = named(pod(gpus=6), "big", namespace="team-a")
    big["metadata"]["labels"] = labels
    audit.add(big)
    (report, _) = policy_reports(audit.entries(), policy=policy, now=NOW)
    assert_valid_report(report)
    waived = [r for r in report["results"] if "exception" in r["properties"]]
    assert [(r["policy"], r["rule"], r["result"]) for r in waived] == [
        ("gpu-limits", "maxGPUsPerPod", "skip"),
        ("team-a/limits", "maxGPUsPerPod", "skip"),
    ]
    assert {r["properties"]["exception"] for r in waived} == {"team-a/big-train"}
    assert waived[1]["message"].startswith("waived by GPUPolicyException team-a/big-train: ")
    assert waived[1]["properties"]["document"].endswith("policies.yaml#3")
