"""``gpu-webhook inventory`` from a file, from a cluster (a loopback replay server), and
its refusals of unusable input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cluster.replayserver import FIXTURES, Body, ReplayServer, fixture
from tests.running import gpu_webhook, kubeconfig
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]
NODES_YAML = str(FIXTURES / "kubectl-get-nodes.yaml")


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    yield replay
    replay.stop()


def test_the_text_report_shows_classes_largest_nodes_and_problems(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inventory", "--inventory", NODES_YAML]) == 0
    out = capsys.readouterr().out
    assert "4 nodes from" in out
    assert "NVIDIA-H100-80GB-HBM3" in out
    assert "mixed (1g.10gb, 3g.40gb)" in out
    assert "nvidia.com/gpu          8        gpu-a100-0      16     3" in out
    assert "Cordoned: none" in out


def test_the_json_report_has_one_class_per_gpu_product(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inventory", "--inventory", NODES_YAML, "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    classes = {c["product"]: c for c in report["classes"]}
    assert set(classes) == {
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3",
        "Tesla-T4",
        "(no GPU)",
    }
    assert classes["Tesla-T4"]["gpu_resources"] == {"nvidia.com/gpu": 4}
    assert classes["NVIDIA-H100-80GB-HBM3"]["mig_profiles"] == ["1g.10gb", "3g.40gb"]
    largest = {b["resource"]: (b["amount"], b["node"]) for b in report["largest"]}
    assert largest["nvidia.com/gpu"] == (8, "gpu-a100-0")


def test_cordoned_not_ready_and_shared_nodes_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = json.loads(fixture("node-list.json"))
    a100, t4 = nodes["items"][1], nodes["items"][3]
    a100["spec"]["unschedulable"] = True
    t4["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    t4["metadata"]["labels"] |= {
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
    }
    t4["status"]["allocatable"]["nvidia.com/gpu"] = "16"
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(nodes))
    assert main(["inventory", "--inventory", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Cordoned: gpu-a100-0" in out
    assert "Not ready: gpu-t4-0" in out
    assert "time-slicing x4" in out


def test_a_cluster_is_listed_with_the_kubeconfig_credentials(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.extend(
        [Body(fixture("node-list-page1.json")), Body(fixture("node-list-page2.json"))]
    )
    assert (
        main(
            [
                "inventory",
                "--kubeconfig",
                kubeconfig(tmp_path, server.url, token="s3cret"),
                "-o",
                "json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["nodes"] == 4
    assert report["resource_version"] == "217"
    assert server.list_requests()[0].headers["Authorization"] == "Bearer s3cret"


def test_a_forbidden_list_is_an_error_that_names_the_permission(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.append(Body(fixture("list-403.json"), 403))
    assert main(["inventory", "--kubeconfig", kubeconfig(tmp_path, server.url)]) == 2
    err = capsys.readouterr().err
    assert "cannot list nodes: 403 Forbidden" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--inventory", "/nonexistent.yaml"], "no such file", id="missing-file"),
        pytest.param(
            ["--inventory", str(FIXTURES / "namespace-list.json")],
            "holds no Node objects",
            id="not-nodes",
        ),
        pytest.param(
            ["--kubeconfig", "/nonexistent/kubeconfig"], "no such file", id="no-kubeconfig"
        ),
    ],
)
def test_unusable_input_exits_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inventory", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("gpu-webhook inventory: ")


def test_a_broken_kubeconfig_exits_2_without_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: [\n")
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "inventory", "--kubeconfig", str(broken)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "no usable cluster configuration" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_api_server_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path, "http://127.0.0.1:9")
    assert main(["inventory", "--kubeconfig", config, "--timeout", "2"]) == 2
    assert "cannot list nodes" in capsys.readouterr().err


def test_the_report_says_what_one_unit_of_each_gpu_resource_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    inventory = ROOT / "tests" / "cases" / "_inventories" / "mixed-cluster.yaml"
    assert main(["inventory", "--inventory", str(inventory), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    units = {
        (u["product"], u["resource"]): (u["kind"], u["unit"], u["physical_gpus"], u["memory_mib"])
        for c in report["classes"]
        for u in c["units"]
    }
    assert units == {
        ("NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu"): ("whole", "whole GPU", 8, 40960),
        ("Tesla-T4-SHARED", "nvidia.com/gpu"): (
            "shared",
            "shared slot, time-slicing x4",
            4,
            15360,
        ),
        ("NVIDIA-L4-SHARED", "nvidia.com/gpu"): ("shared", "shared slot, mps x4", 2, 23034),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu"): (
            "mig",
            "MIG 1g.5gb slice",
            None,
            4864,
        ),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/mig-1g.10gb"): (
            "mig",
            "MIG 1g.10gb slice",
            None,
            9856,
        ),
        ("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "nvidia.com/mig-3g.40gb"): (
            "mig",
            "MIG 3g.40gb slice",
            None,
            40192,
        ),
    }
    physical = {c["product"]: c["physical_gpus"] for c in report["classes"]}
    assert physical["NVIDIA-H100-80GB-HBM3"] == 8
    assert physical["Tesla-T4-SHARED"] == 4


def _one_node_file(tmp_path: Path, gpus: object) -> Path:
    nodes = yaml.safe_load(Path(NODES_YAML).read_text())
    (a100,) = [n for n in nodes["items"] if n["metadata"]["name"] == "gpu-a100-0"]
    a100["status"]["allocatable"]["nvidia.com/gpu"] = gpus
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump({**nodes, "items": [a100]}))
    return path


def test_one_node_is_counted_in_the_singular(tmp_path: Path) -> None:
    done = gpu_webhook("inventory", "--inventory", _one_node_file(tmp_path, "8"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"1 node from {tmp_path / 'nodes.yaml'}: 1 ready,")


def test_a_gpu_count_that_is_not_a_number_is_reported_not_shown_as_no_gpu(
    tmp_path: Path,
) -> None:
    path = _one_node_file(tmp_path, "eight")
    done = gpu_webhook("inventory", "--inventory", path)
    assert done.returncode == 2
    assert "(no GPU)" not in done.stdout
    assert done.stderr.strip() == (
        f"gpu-webhook inventory: the inventory is not usable: {path}: node gpu-a100-0: "
        'status.allocatable["nvidia.com/gpu"] is "eight", not a quantity (kubectl prints '
        'numbers such as "8")'
    )
    # check and serve read inventory files the same way
    assert gpu_webhook("check", "--inventory", path, NODES_YAML).returncode == 2


# --- nodes that could exist (issue 23) -----------------------------------------------------

POOLS_YAML = str(ROOT / "tests" / "cases" / "_inventories" / "karpenter-aws.yaml")
UNSIZED_YAML = str(ROOT / "tests" / "cases" / "_inventories" / "karpenter-unsized.yaml")


def test_karpenter_pools_are_listed_beside_the_node_classes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inventory", "--inventory", POOLS_YAML]) == 0
    out = capsys.readouterr().out
    assert "Node pools (nodes that could exist)" in out
    assert (
        "pool h100 (Karpenter on AWS, p5.48xlarge: 8 x NVIDIA H100 80GB, p5.4xlarge: 1 x NVIDIA "
        "H100 80GB, scales from 0, limit 64 GPUs)"
    ) in out
    assert "pool general-purpose (Karpenter on AWS, no GPU instance type)" in out


def test_pools_of_unknown_size_are_listed_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inventory", "--inventory", UNSIZED_YAML, "-o", "json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    assert pools["docs-gpu"]["bounded"] is False
    assert (
        pools["docs-gpu"]["reason"]
        == "its instance type p3.16xlarge, p3.8xlarge is not in the catalogue"
    )
    assert "not list" in pools["azure-gpu"]["reason"]


def test_gke_compute_classes_that_keep_to_their_priorities_are_listed_sized(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gke = str(ROOT / "tests" / "cases" / "_inventories" / "gke-sized.yaml")
    assert main(["inventory", "--inventory", gke, "-o", "json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    assert pools["h100-training"] == {
        "name": "h100-training",
        "kind": "GKE ComputeClass",
        "text": "pool h100-training (GKE ComputeClass, a3-highgpu-8g: 8 x NVIDIA H100 80GB, "
        "a3-megagpu-8g: 8 x NVIDIA H100 80GB, scales from 0, no GPU limit)",
        "bounded": True,
        "reason": "",
    }
    assert pools["node auto-provisioning"]["bounded"] is False
