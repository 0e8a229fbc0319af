"""``gpu-webhook explain``: a live Pending pod (its nodes, namespace and FailedScheduling
events from a loopback replay server), a file with an inventory, and refusals."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import RULES
from tests.cluster.listpages import list_pages
from tests.cluster.replayserver import Body, ReplayServer, status_body
from tests.cluster.ruleobjects import gpu_policy, serve_policies
from tests.running import kubeconfig
from webhook.cli import main

CASES = Path(__file__).resolve().parents[1] / "reports" / "explain"
INVENTORY = CASES / "inventory.yaml"
NODES = yaml.safe_load(INVENTORY.read_text())["items"]
SCHEDULER_SAYS = (
    "0/8 nodes are available: 1 node(s) had untolerated taint {dedicated: research}, 1 node(s) "
    "had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable, 5 "
    "Insufficient nvidia.com/gpu. preemption: 0/8 nodes are available: 8 Preemption is not "
    "helpful for scheduling."
)


def _live_pod() -> dict[str, Any]:
    pod = yaml.safe_load((CASES / "more-gpus-than-any-node" / "object.yaml").read_text())
    pod["metadata"] |= {"uid": "u-1", "resourceVersion": "77"}
    pod["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    return pod


def _event(message: str, last: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"big.{count}", "namespace": "team-a"},
        "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": "big", "uid": "u-1"},
        "reason": "FailedScheduling",
        "message": message,
        "type": "Warning",
        "count": count,
        "lastTimestamp": last,
        "source": {"component": "default-scheduler"},
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ReplayServer, str]]:
    replay = ReplayServer().start()
    (page,) = list_pages("NodeList", "v1", NODES, page_size=500)
    replay.lists.append(Body(page))
    events = [
        _event(
            "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.", "2026-11-30T11:00:00Z", 3
        ),
        _event(SCHEDULER_SAYS, "2026-11-30T12:00:00Z", 14),
    ]
    (events_page,) = list_pages("EventList", "v1", events[::-1], page_size=500)
    replay.routes.update(
        {
            "/api/v1/namespaces/team-a/pods/big": deque([Body(json.dumps(_live_pod()).encode())]),
            "/api/v1/namespaces/team-a": deque(
                [Body(json.dumps({"metadata": {"name": "team-a", "labels": {}}}).encode())]
            ),
            "/api/v1/namespaces/team-a/events": deque([Body(events_page)]),
        }
    )
    yield replay, kubeconfig(tmp_path, replay.url)
    replay.stop()


def test_a_live_pending_pod_is_explained_with_the_schedulers_last_message(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    code = main(
        ["explain", "pod", "big", "-n", "team-a", "--kubeconfig", config, "--rules", str(RULES)]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("Pod team-a/big (Pending)\n")
    assert "no: 2 Insufficient nvidia.com/gpu (requests 16, a node here has 8)" in out
    assert out.endswith(
        "Scheduler, last FailedScheduling (2026-11-30T12:00:00Z, 14 times):\n"
        f'  "{SCHEDULER_SAYS}"\n'
    )
    # Already created through the webhook: nothing more to change.
    assert "Webhook on create: DENIED by builtin/capacity\n" in out
    assert "+++ mutated" not in out
    (events,) = [r for r in replay.requests if r.path.endswith("/events")]
    assert events.query["fieldSelector"] == (
        "involvedObject.kind=Pod,involvedObject.name=big,reason=FailedScheduling,"
        "involvedObject.uid=u-1"
    )


def test_json_output_carries_the_classes_the_webhook_and_the_scheduler(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = cluster
    main(
        [
            "explain",
            "pod/big",
            "-n",
            "team-a",
            "--kubeconfig",
            config,
            "--rules",
            str(RULES),
            "-o",
            "json",
        ]
    )
    (data,) = json.loads(capsys.readouterr().out)
    assert data["phase"] == "Pending"
    assert data["webhook"]["allowed"] is False
    assert data["scheduler"]["count"] == 14
    (template,) = data["templates"]
    assert template["requests"] == {"nvidia.com/gpu": 16}
    assert {c["product"] for c in template["classes"]} >= {"NVIDIA-A100-SXM4-80GB", "Tesla-T4"}


def test_a_bound_pod_is_explained_as_bound_to_its_node(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    pod = _live_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    pod["spec"]["nodeName"] = "a100-0"
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
    }
    replay.routes["/api/v1/namespaces/team-a/pods/big"] = deque([Body(json.dumps(pod).encode())])
    replay.routes["/api/v1/namespaces/team-a/events"] = deque(
        [Body(list_pages("EventList", "v1", [], page_size=500)[0])]
    )

    code = main(
        ["explain", "pod", "big", "-n", "team-a", "--kubeconfig", config, "--rules", str(RULES)]
    )

    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(
        "Pod team-a/big (Pending)\n  bound to node a100-0: the scheduler has placed it; below "
        "is how a new copy of this pod would be judged\n"
    )
    assert "no FailedScheduling event" not in out  # it is not waiting for the scheduler


def test_a_pod_that_does_not_exist_exits_2(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    replay, config = cluster
    replay.routes["/api/v1/namespaces/team-a/pods/gone"] = deque(
        [Body(status_body(404, "NotFound", 'pods "gone" not found'), 404)]
    )
    assert main(["explain", "pod", "gone", "-n", "team-a", "--kubeconfig", config]) == 2
    assert 'pod "gone" not found in namespace "team-a"' in capsys.readouterr().err


def test_a_file_is_explained_against_an_inventory_file(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explain", "-f", str(CASES / "fits" / "object.yaml"), "--inventory", str(INVENTORY)]
    assert main([*args, "--rules", str(RULES)]) == 0
    assert capsys.readouterr().out == (CASES / "fits" / "expected.txt").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "say what to explain", id="nothing"),
        pytest.param(["deployment", "x"], "say what to explain", id="not-a-pod"),
        pytest.param(["-f", str(INVENTORY)], "-f needs --inventory", id="file-without-inventory"),
        pytest.param(
            ["pod", "x", "--inventory", str(INVENTORY)],
            "--inventory goes with -f",
            id="live-with-inventory",
        ),
        pytest.param(
            ["-f", "/dev/null", "--inventory", str(INVENTORY)],
            "/dev/null: is a character device, not a regular file",
            id="a-device",
        ),
    ],
)
def test_unusable_requests_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "--rules", str(RULES), *args]) == 2
    assert message in capsys.readouterr().err


def test_an_empty_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")

    assert (
        main(["explain", "--rules", str(RULES), "-f", str(empty), "--inventory", str(INVENTORY)])
        == 2
    )
    assert f"{empty}: no objects: the input is empty" in capsys.readouterr().err


def test_the_cli_docs_show_a_real_explain_output() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    golden = (CASES / "more-gpus-than-any-node" / "expected.txt").read_text()
    assert golden in readme


def _explain_case(case: str, inventory: str) -> int:
    """``explain`` of a golden case's object against one of the shared inventories."""
    cases = Path(__file__).resolve().parents[1] / "cases"
    return main(
        [
            "explain",
            "-f",
            str(cases / case / "object.yaml"),
            "--inventory",
            str(cases / "_inventories" / f"{inventory}.yaml"),
            "--rules",
            str(RULES),
        ]
    )


def test_explain_lists_the_pools_and_whether_each_could_take_the_pod(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _explain_case("pool-karpenter-taint-not-tolerated-denied", "karpenter-aws")
    out = capsys.readouterr().out
    assert code == 1
    assert "Node pools (nodes that could exist):" in out
    assert "pool h100 (Karpenter on AWS, p5.48xlarge: 8 x NVIDIA H100 80GB" in out
    assert "excluded: requirements, labels or taints" in out


@pytest.mark.parametrize(
    ("case", "nap"),
    [
        pytest.param(
            "gke-auto-provisioning-selected-accelerator-too-many-denied",
            "too small: no instance type holds the whole pod",
            id="accelerator-selected",
        ),
        pytest.param(
            "gke-auto-provisioning-nothing-selected-warns",
            "may take it (size unknown)",
            id="nothing-selected",
        ),
    ],
)
def test_explain_judges_gke_auto_provisioning_as_the_webhook_does(
    capsys: pytest.CaptureFixture[str], case: str, nap: str
) -> None:
    _explain_case(case, "gke-sized")
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.lstrip().startswith("pool node auto-"))
    assert line.endswith(nap)
    assert "pool l4-serving (GKE ComputeClass, g2-standard-96: 8 x NVIDIA L4 24GB" in out


@pytest.mark.parametrize(
    ("case", "inventory", "verdict"),
    [
        pytest.param(
            "pool-karpenter-min-values-too-few-types-hold-the-pod-warns",
            "karpenter-min-values",
            "excluded: 1 distinct node.kubernetes.io/instance-type hold the pod, and its "
            "minValues asks for 3",
            id="min-values",
        ),
        pytest.param(
            "pool-karpenter-at-its-limits-now-warns",
            "karpenter-reservations-usage",
            "fits (p5.48xlarge), but the pool is at its limits now (16 of its 16 "
            "nvidia.com/gpu in use)",
            id="at-its-limits-now",
        ),
    ],
)
def test_explain_says_what_a_pool_decides_as_the_webhook_does(
    capsys: pytest.CaptureFixture[str], case: str, inventory: str, verdict: str
) -> None:
    _explain_case(case, inventory)
    assert any(line.endswith(verdict) for line in capsys.readouterr().out.splitlines())


def test_a_live_pod_is_explained_with_the_clusters_rule_objects(
    cluster: tuple[ReplayServer, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """explain judges with the GPUPolicy objects, as the server does (issue 33)."""
    replay, config = cluster
    serve_policies(replay, [gpu_policy("cluster-four", {"validate": [{"maxGPUsPerPod": 4}]})], [])
    main(["explain", "pod", "big", "-n", "team-a", "--kubeconfig", config, "--rules", str(RULES)])
    assert "cluster-four/maxGPUsPerPod" in capsys.readouterr().out
