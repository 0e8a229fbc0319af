"""``serve --sync-match-conditions``: off by default, on by flag or environment, refused
without a cluster (bad values: tests/commands/test_serve.py); and, through a real server and its inventory watcher against the
replayed API server, the conditions of the nodes it sees written into the two webhook
configurations, and ``true`` once an untainted GPU node appears."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import RULES
from tests.cluster.replayserver import Body, ReplayServer, Stream, eventually, fixture
from tests.running import kubeconfig, live_inventory_server
from webhook.cli import build_parser, main
from webhook.cluster.conditionsync import GROUP_PATH, LEASE_NAME
from webhook.commands.serve import settings_from
from webhook.engine.evaluation.matchconditions import match_conditions
from webhook.files.rulefiles import load_policy
from webhook.serving.server import inventory_watcher

ROOT = Path(__file__).resolve().parents[2]
MUTATING = f"{GROUP_PATH}/mutatingwebhookconfigurations/gpu-webhook"
VALIDATING = f"{GROUP_PATH}/validatingwebhookconfigurations/gpu-webhook"
CALL_EVERYTHING = [{"name": "may-touch-gpus", "expression": "true"}]


def _settings(*args: str):  # type: ignore[no-untyped-def]
    return settings_from(build_parser().parse_args(["serve", *args]))


def _watcher_command(*args: str) -> list[str]:
    process = inventory_watcher(_settings(*args))
    assert process is not None
    return process._command()


def test_the_runtime_sync_is_off_by_default(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, "http://127.0.0.1:9")
    assert not _settings().sync_match_conditions
    assert "--sync-match-conditions" not in _watcher_command("--kubeconfig", config)


def test_it_is_turned_on_by_flag_or_environment_for_the_configurations_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = kubeconfig(tmp_path, "http://127.0.0.1:9")
    command = _watcher_command("--kubeconfig", config, "--sync-match-conditions")
    assert command[command.index("--sync-match-conditions") + 1] == "gpu-webhook"
    monkeypatch.setenv("GPU_WEBHOOK_SYNC_MATCH_CONDITIONS", "true")
    monkeypatch.setenv("GPU_WEBHOOK_WEBHOOK_CONFIGURATION", "team-gpu-webhook")
    command = _watcher_command("--kubeconfig", config)
    assert command[command.index("--sync-match-conditions") + 1] == "team-gpu-webhook"


def test_a_sync_without_a_cluster_is_refused_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.files.certs import ensure_dev

    ensure_dev(tmp_path)
    inventory = str(ROOT / "examples" / "inventory.yaml")
    args = ["serve", "--sync-match-conditions", "--cert-dir", str(tmp_path)]
    assert main([*args, "--inventory", inventory]) == 2
    assert "--sync-match-conditions needs the cluster" in capsys.readouterr().err


# --- through a real server ----------------------------------------------------------------


def untainted_gpu_node_added() -> bytes:
    items = json.loads(fixture("node-list.json"))["items"]
    node = copy.deepcopy(next(n for n in items if n["metadata"]["name"] == "gpu-t4-0"))
    node["metadata"] |= {"name": "gpu-t4-untainted", "resourceVersion": "300"}
    node["spec"].pop("taints", None)
    return json.dumps({"type": "ADDED", "object": node}).encode() + b"\n"


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    for doc in yaml.safe_load_all((ROOT / "deploy/base/webhooks.yaml").read_text()):
        server.store(f"{GROUP_PATH}/{doc['kind'].lower()}s/gpu-webhook", doc)
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    yield server
    server.stop()


def held(replay: ReplayServer, path: str) -> list[Any]:
    return [w.get("matchConditions") for w in replay.stored[path]["webhooks"]]


def written(metrics: str) -> float:
    name = 'gpu_webhook_match_condition_syncs_total{result="written"} '
    (line,) = [line for line in metrics.splitlines() if line.startswith(name)]
    return float(line.removeprefix(name))


@pytest.mark.slow
def test_a_served_replica_writes_the_conditions_of_the_nodes_it_sees(
    replay: ReplayServer, tmp_path: Path
) -> None:
    node_added = threading.Event()
    replay.watches.append(Stream([node_added, untainted_gpu_node_added()], end="hold"))
    tainted = match_conditions(load_policy(str(RULES)), tainted_gpu_nodes=True)
    server = live_inventory_server(tmp_path, replay.url, "--sync-match-conditions")
    try:
        wanted = [[c.as_dict() for c in tainted["mutate.gpu-webhook.io"]]]
        eventually(lambda: held(replay, MUTATING) == wanted, timeout=30)
        node_added.set()
        eventually(lambda: held(replay, MUTATING) == [CALL_EVERYTHING], timeout=30)
        eventually(lambda: held(replay, VALIDATING) == [CALL_EVERYTHING, None])
        status, metrics = server.health("/metrics")
        assert status == 200
        # Two writes each for the tainted nodes and for the new one (two more where the
        # first turn came before the nodes were listed, and wrote `true` meanwhile).
        assert written(metrics) in (4.0, 6.0)
    finally:
        assert server.stop() == 0, server.log.read_text()
    leases = "/apis/coordination.k8s.io/v1/namespaces/gpu-webhook/leases"
    assert LEASE_NAME in [w.body["metadata"]["name"] for w in replay.written(leases)]
    patched = {w.path for w in replay.writes if w.method == "PATCH"}
    assert patched == {MUTATING, VALIDATING}
