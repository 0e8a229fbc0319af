"""``gpu-webhook serve --kubeconfig``: the live node inventory behind real admissions, fed by
a loopback server replaying the API server's recorded node list, through the pod's one
inventory watcher."""

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import RULES, pod, review
from tests.cluster.replayserver import Body, ReplayServer, Stream, eventually, fixture
from tests.running import Server, dev_certs, live_inventory_server, post
from webhook.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()


def watcher_pids(server: Server) -> list[int]:
    """The watcher processes the server's master started, from its JSON log lines."""
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if line[:1] == "{"]
    return [line["pid"] for line in lines if line["msg"] == "inventory watcher started"]


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_and_check_the_watchers_stopped(server: Server) -> None:
    assert server.stop() == 0, server.log.read_text()
    pids = watcher_pids(server)
    assert pids, "the master logs the watcher it starts"
    assert not [pid for pid in pids if running(pid)], "the watcher stops with the server"


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory, replay: ReplayServer) -> Iterator[Server]:
    hold = threading.Event()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    replay.watches.extend(Stream([hold], end="hold") for _ in range(4))
    server = live_inventory_server(tmp_path_factory.mktemp("live"), replay.url)
    yield server
    hold.set()
    stop_and_check_the_watchers_stopped(server)


def node_lists(replay: ReplayServer) -> list[object]:
    return [r for r in replay.list_requests() if r.path == "/api/v1/nodes"]


def denies_sixteen_gpus_for_lack_of_a_node(server: Server) -> bool:
    status, answer = post(server.connection(), "/mutate", review(pod(gpus=16)))
    response = answer["response"]
    return status == 200 and "gpu-a100-0, has 8" in response["status"]["message"]


def test_the_server_is_ready_once_the_first_list_is_in(live_server: Server) -> None:
    assert live_server.health("/readyz")[0] == 200


def test_two_workers_cost_the_api_server_one_list_and_one_watch_of_nodes(
    live_server: Server, replay: ReplayServer
) -> None:
    nodes = [r for r in replay.requests if r.path == "/api/v1/nodes"]
    assert [bool(r.query.get("watch")) for r in nodes] == [False, True]


def test_capacity_checks_use_the_live_nodes(live_server: Server) -> None:
    conn = live_server.connection()
    status, answer = post(conn, "/mutate", review(pod(gpus=16)))
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert "gpu-a100-0, has 8" in response["status"]["message"]
    status, answer = post(conn, "/mutate", review(pod(gpus=8)))
    assert answer["response"]["allowed"] is True


def test_an_unusable_kubeconfig_stops_serve_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    dev_certs(tmp_path / "certs")
    code = main(
        [
            "serve",
            "--cert-dir",
            str(tmp_path / "certs"),
            "--rules",
            str(RULES),
            "--kubeconfig",
            str(broken),
        ]
    )
    assert code == 2
    assert "cluster configuration is not usable" in capsys.readouterr().err


def test_a_watcher_that_dies_is_started_again_while_the_workers_keep_serving(
    tmp_path: Path,
) -> None:
    replay = ReplayServer().start()
    replay.lists.extend(Body(fixture("node-list.json")) for _ in range(2))
    replay.namespace_lists.extend(Body(fixture("namespace-list.json")) for _ in range(2))
    server = live_inventory_server(tmp_path, replay.url)
    try:
        (first,) = watcher_pids(server)
        os.kill(first, signal.SIGKILL)
        eventually(lambda: len(watcher_pids(server)) == 2, timeout=30)
        eventually(lambda: len(node_lists(replay)) == 2, timeout=30)
        assert server.process.poll() is None, "the master keeps running"
        assert server.health("/readyz")[0] == 200
        assert denies_sixteen_gpus_for_lack_of_a_node(server)
    finally:
        stop_and_check_the_watchers_stopped(server)
        replay.stop()


def test_the_server_logs_each_exempted_namespace_that_does_not_exist(
    live_server: Server,
) -> None:
    """Issue 41: the shipped rules exempt the GPU stack's namespaces by name; the recorded
    cluster has only kube-system of them, and whoever creates another escapes the checks."""
    eventually(lambda: "an exemption a namespace creator could take" in live_server.log.read_text())
    lines = [
        json.loads(line) for line in live_server.log.read_text().splitlines() if line[:1] == "{"
    ]
    said = {
        line["msg"].split("exempts namespace ")[1].split(",")[0]
        for line in lines
        if line["msg"].startswith("an exemption a namespace creator could take")
    }
    assert said == {
        "gpu-operator",
        "nvidia-device-plugin",
        "nvidia-dra-driver-gpu",
        "nvidia-gpu-operator",
    }
    assert all(line["level"] == "warning" for line in lines if "exempts namespace" in line["msg"])
