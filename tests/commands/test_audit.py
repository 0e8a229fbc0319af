"""``gpu-webhook audit`` over files and over a cluster (a loopback server replaying list
pages in the API server's shape): folding, paging, reports, exit codes."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import INVENTORY, RULES, deployment, pod
from tests.cluster.listpages import api_group, discovery, list_bodies
from tests.cluster.replayserver import Body, ReplayServer, fixture, status_body
from tests.cluster.ruleobjects import gpu_policy, serve_policies
from tests.reports.reportschema import assert_valid_report
from tests.running import kubeconfig
from webhook.cli import main
from webhook.commands.audit import ProgressLine

PAGE = "2"


def _with(
    obj: dict[str, Any], name: str, namespace: str, uid: str, owner: dict[str, Any] | None = None
) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"] |= {"name": name, "namespace": namespace, "uid": uid}
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return obj


TEMPLATE = pod(gpus=16)
DEPLOY = _with(deployment(TEMPLATE, replicas=5), "train", "team-a", "d-1")
RS = _with({**DEPLOY, "kind": "ReplicaSet"}, "train-7c9", "team-a", "rs-1", DEPLOY)
PODS = [_with(TEMPLATE, f"train-7c9-{i}", "team-a", f"p-{i}", RS) for i in range(5)]
LONE = _with(pod(gpus=1, requests_only=True), "notebook", "team-b", "p-lone")
CPU = _with(pod(gpus=None), "web", "team-b", "p-cpu")
FINE = _with(pod(gpus=1), "fine", "team-b", "p-fine")


def _files(tmp_path: Path, *objects: dict[str, Any]) -> str:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def _audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["audit", "--rules", str(RULES), *args])
    out, err = capsys.readouterr()
    return code, out, err


# --- files ------------------------------------------------------------------------------


def test_files_are_audited_with_owners_folded_and_exit_1_for_a_denial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, *PODS, RS, DEPLOY, LONE, CPU, FINE)
    code, out, _ = _audit(capsys, "-f", files, "--inventory", str(INVENTORY))
    assert code == 1
    rows = [line.split()[:4] for line in out.splitlines()[1:4]]
    assert rows == [
        ["team-a", "Deployment", "train", "deny"],
        ["team-b", "Pod", "fine", "pass"],
        ["team-b", "Pod", "notebook", "deny"],
    ]
    assert "5 Pod, 1 ReplicaSet" in out
    assert out.splitlines()[-1].startswith(
        "10 objects audited, 6 folded into their owners: 2 denied"
    )


def test_files_that_all_pass_exit_0_and_json_lists_each_reported_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, FINE, CPU)
    code, out, _ = _audit(capsys, "-f", files, "--inventory", str(INVENTORY), "-o", "json")
    assert code == 0
    report = json.loads(out)
    assert report["summary"] | {"errors": []} == {
        "objects": 2,
        "reported": 1,
        "folded": 0,
        "deny": 0,
        "warn": 0,
        "audit": 0,
        "pass": 2,
        "unusable": 0,
        "errors": [],
        "afterAdmission": {"gangFit": 0, "cudaDriver": 0, "gpuQuota": 0},
    }
    assert report["unusable"] == []
    (fine,) = report["results"]
    assert (fine["name"], fine["decision"], fine["gpu"]) == ("fine", "pass", True)
    assert fine["source"] == f"{files}:1"


def test_policyreport_output_is_valid_against_the_crd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, *PODS, RS, DEPLOY, LONE, FINE)
    code, out, _ = _audit(capsys, "-f", files, "--inventory", str(INVENTORY), "-o", "policyreport")
    assert code == 1
    reports = list(yaml.safe_load_all(out))
    assert [(r["kind"], r["metadata"].get("namespace")) for r in reports] == [
        ("PolicyReport", "team-a"),
        ("PolicyReport", "team-b"),
        ("ClusterPolicyReport", None),
    ]
    for report in reports:
        assert_valid_report(report)
    assert "&id" not in out  # no YAML aliases for other tools to trip on


@pytest.mark.parametrize(
    ("args", "names"),
    [
        pytest.param(["--kinds", "Pod"], {"notebook", "fine", "train-7c9-0"}, id="kinds-pod-only"),
        pytest.param(["--kinds", "deployments.apps"], {"train"}, id="kinds-by-plural-and-group"),
        pytest.param(["-n", "team-b"], {"notebook", "fine"}, id="one-namespace"),
    ],
)
def test_kinds_and_namespace_narrow_what_is_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], names: set[str]
) -> None:
    files = _files(tmp_path, DEPLOY, PODS[0], LONE, FINE)
    _, out, _ = _audit(capsys, "-f", files, "-o", "json", *args)
    assert {r["name"] for r in json.loads(out)["results"]} == names


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--kinds", "Widget"], "no kind the webhook understands", id="unknown-kind"),
        pytest.param(
            ["--kinds", "Pod,Deploymnt"],
            "'Deploymnt' is no kind the webhook understands (did you mean Deployment.apps?)",
            id="a-typo-among-good-kinds-with-did-you-mean",
        ),
        pytest.param(
            ["--kinds", "pytorchjob.kubeflow"],
            "did you mean PyTorchJob.kubeflow.org",
            id="a-short-group",
        ),
        pytest.param(
            ["--inventory", "/nonexistent.yaml"], "the inventory is not usable", id="bad-inventory"
        ),
        pytest.param(["--kubeconfig", "k"], "not both", id="files-and-cluster"),
    ],
)
def test_unusable_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    files = _files(tmp_path, FINE)
    code, _, err = _audit(capsys, "-f", files, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_a_file_that_is_not_yaml_exits_2_and_the_rest_is_still_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\n  bad: [indent\n")
    files = _files(tmp_path, LONE)
    code, out, err = _audit(capsys, "-f", files, "-f", str(broken))
    assert code == 2
    assert "broken.yaml" in err
    assert "notebook" in out


# --- a cluster --------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ReplayServer, str]]:
    """A cluster with apps/v1 and batch/v1, the recorded nodes and namespaces, a Deployment
    whose ReplicaSet's five pods come over three pages, and three bare pods."""
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    replay.routes.update(
        {
            "/apis/apps": _deque(Body(api_group("apps", "v1"))),
            "/apis/batch": _deque(Body(api_group("batch", "v1"))),
            "/api/v1": _deque(Body(discovery("v1", ["pods", "replicationcontrollers", "nodes"]))),
            "/apis/apps/v1": _deque(
                Body(
                    discovery(
                        "apps/v1", ["deployments", "replicasets", "statefulsets", "daemonsets"]
                    )
                )
            ),
            "/apis/batch/v1": _deque(Body(discovery("batch/v1", ["jobs", "cronjobs"]))),
            "/apis/apps/v1/deployments": _deque(
                *list_bodies("DeploymentList", "apps/v1", [DEPLOY], page_size=2)
            ),
            "/apis/apps/v1/replicasets": _deque(
                *list_bodies("ReplicaSetList", "apps/v1", [RS], page_size=2)
            ),
            "/api/v1/pods": _deque(
                *list_bodies("PodList", "v1", [*PODS, LONE, CPU, FINE], page_size=3)
            ),
        }
    )
    for path in (
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/api/v1/replicationcontrollers",
        "/apis/batch/v1/jobs",
        "/apis/batch/v1/cronjobs",
    ):
        replay.routes[path] = _deque(*list_bodies("List", "v1", [], page_size=2))
    yield replay, kubeconfig(tmp_path, replay.url)
    replay.stop()


def _deque(*bodies: Body) -> Any:
    from collections import deque

    return deque(bodies)


def test_a_cluster_is_listed_page_by_page_and_pods_fold_into_their_deployment(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    code, out, err = _audit(capsys, "--kubeconfig", config, "-o", "json")
    assert code == 1, err
    report = json.loads(out)
    results = {(r["kind"], r["name"]): r for r in report["results"]}
    assert set(results) == {("Deployment", "train"), ("Pod", "notebook"), ("Pod", "fine")}
    assert results["Deployment", "train"]["folded"] == {"Pod": 5, "ReplicaSet": 1}
    assert results["Deployment", "train"]["rules"] == [
        "builtin/capacity",
        "builtin/clusterCapacity",
    ]
    assert report["summary"]["objects"] == 10
    pod_pages = [r for r in replay.requests if r.path == "/api/v1/pods"]
    assert [r.query.get("limit") for r in pod_pages] == ["500"] * 3
    assert [bool(r.query.get("continue")) for r in pod_pages] == [False, True, True]


def test_a_cluster_audit_reads_the_gpu_quotas_and_counts_what_would_fail_after_admission(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": "team-a", "resourceVersion": "3"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
        "status": {"used": {"requests.nvidia.com/gpu": "0"}},
    }
    replay.quota_lists.append(
        Body(
            json.dumps(
                {
                    "kind": "ResourceQuotaList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "9"},
                    "items": [quota],
                }
            ).encode()
        )
    )
    _, out, err = _audit(capsys, "--kubeconfig", config, "-o", "json")
    report = json.loads(out)
    (train,) = [r for r in report["results"] if r["name"] == "train"]
    assert "builtin/gpuQuota" in train["rules"], err
    assert report["summary"]["afterAdmission"]["gpuQuota"] >= 1
    assert [r.path for r in replay.quota_requests()] == ["/api/v1/resourcequotas"]


def test_a_cluster_audit_writes_valid_policy_reports(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = cluster
    _, out, _ = _audit(capsys, "--kubeconfig", config, "-o", "policyreport")
    reports = list(yaml.safe_load_all(out))
    for report in reports:
        assert_valid_report(report)
    team_a = reports[0]
    assert team_a["metadata"] == {
        "name": "gpu-webhook-audit",
        "labels": {"app.kubernetes.io/managed-by": "gpu-webhook"},
        "namespace": "team-a",
    }
    assert {r["resources"][0]["uid"] for r in team_a["results"]} == {"d-1"}


def test_one_namespace_is_listed_at_its_own_path(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    replay.routes["/api/v1/namespaces/team-b/pods"] = _deque(
        *list_bodies("PodList", "v1", [LONE, CPU, FINE], page_size=5)
    )
    code, out, _ = _audit(
        capsys, "--kubeconfig", config, "-n", "team-b", "--kinds", "Pod", "-o", "json"
    )
    assert code == 1
    assert {r["name"] for r in json.loads(out)["results"]} == {"notebook", "fine"}


def test_a_kind_that_cannot_be_listed_is_an_error_in_the_report_and_exit_2(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    message = 'jobs.batch is forbidden: User "auditor" cannot list resource "jobs"'
    replay.routes["/apis/batch/v1/jobs"] = _deque(Body(status_body(403, "Forbidden", message), 403))
    code, out, err = _audit(capsys, "--kubeconfig", config, "-o", "policyreport")
    assert code == 2
    assert message in err
    cluster_report = list(yaml.safe_load_all(out))[-1]
    assert cluster_report["kind"] == "ClusterPolicyReport"
    (error,) = cluster_report["results"]
    assert error["result"] == "error"
    assert message in error["message"]


def test_an_expired_continue_token_lists_again_without_counting_twice(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    first, *_ = list_bodies("PodList", "v1", [*PODS, LONE, CPU, FINE], page_size=3)
    expired = Body(
        status_body(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result.",
        ),
        410,
    )
    again = list_bodies("PodList", "v1", [*PODS, LONE, CPU, FINE], page_size=3)
    replay.routes["/api/v1/pods"] = _deque(first, expired, *again)
    code, out, _ = _audit(capsys, "--kubeconfig", config, "-o", "json")
    assert code == 1
    report = json.loads(out)
    assert report["summary"]["objects"] == 10
    (train,) = [r for r in report["results"] if r["name"] == "train"]
    assert train["folded"]["Pod"] == 5


def test_a_user_who_may_not_list_nodes_gets_an_audit_without_capacity_checks(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    replay.lists.clear()
    replay.lists.append(Body(fixture("list-403.json"), 403))
    code, out, err = _audit(capsys, "--kubeconfig", config, "-o", "json")
    assert code == 1  # the requests-only notebook is still denied
    assert "notice: cannot list nodes, so capacity checks are skipped" in err
    results = {r["name"]: r for r in json.loads(out)["results"]}
    assert results["train"]["rules"] == []
    assert results["train"]["notices"] == ["capacity checks skipped: no node inventory given"]
    assert results["notebook"]["rules"] == ["builtin/requestsWithoutLimits"]


def test_an_unreachable_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = kubeconfig(tmp_path, "http://127.0.0.1:9")
    code, _, err = _audit(capsys, "--kubeconfig", config)
    assert code == 2
    assert "cannot read the cluster" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_is_redrawn_on_a_terminal_and_absent_in_a_pipe() -> None:
    ticks = iter([1.0, 1.1, 1.5])
    terminal = _Terminal()
    line = ProgressLine(terminal, clock=lambda: next(ticks))
    line("Deployment", 2000)
    line("Pod", 500)  # within 0.2 s of the last draw: skipped
    line("Pod", 12500)
    line.done()
    assert terminal.getvalue().split("\r")[1:] == [
        "audit: listed 2,000 Deployment\x1b[K",
        "audit: listed 2,000 Deployment, 12,500 Pod\x1b[K",
        "\x1b[K",
    ]
    pipe = io.StringIO()
    quiet = ProgressLine(pipe)
    quiet("Pod", 10)
    quiet.done()
    assert pipe.getvalue() == ""


def test_the_cli_docs_show_what_the_audit_of_the_example_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # as the README runs it, so that SOURCE shows relative paths
    code, out, _ = _audit(
        capsys, "-f", "examples/workloads.yaml", "--inventory", "examples/inventory.yaml"
    )
    assert code == 1
    shown = "".join(("   " + line if line.strip() else "") + "\n" for line in out.splitlines())
    assert shown in (root / "docs" / "cli.md").read_text()


def test_a_cluster_audit_judges_with_the_clusters_rule_objects(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPUPolicy objects count as the server counts them (issue 33)."""
    replay, config = cluster
    audit_rule = {"validate": [{"maxGPUsPerPod": 0, "action": "audit"}]}
    serve_policies(replay, [gpu_policy("cluster-no-gpus", audit_rule)], [])
    _, out, _ = _audit(capsys, "--kubeconfig", config, "-o", "json")
    results = {(r["kind"], r["name"]): r for r in json.loads(out)["results"]}
    assert "cluster-no-gpus/maxGPUsPerPod" in results["Deployment", "train"]["rules"]
