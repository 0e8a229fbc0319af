"""``gpu-webhook serve --kubeconfig``: the live node inventory behind real admissions, fed by
a loopback server replaying the API server's recorded node list."""

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import RULES, pod, review
from tests.cluster.replayserver import Body, ReplayServer, Stream, fixture
from tests.running import Server, kubeconfig, post
from webhook.certs import DEV_HOSTS, generate, write
from webhook.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("live")
    write(
        generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=1),
        tmp / "certs",
    )
    replay = ReplayServer().start()
    hold = threading.Event()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    replay.watches.extend(Stream([hold], end="hold") for _ in range(4))
    server = Server(
        tmp=tmp,
        cert_dir=tmp / "certs",
        rules=RULES,
        inventory=None,
        workers=1,
        extra=("--kubeconfig", kubeconfig(tmp, replay.url)),
    )
    yield server
    hold.set()
    assert server.stop() == 0, server.log.read_text()
    replay.stop()


def test_the_server_is_ready_once_the_first_list_is_in(live_server: Server) -> None:
    assert live_server.health("/readyz")[0] == 200


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
    write(
        generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=1),
        tmp_path / "certs",
    )
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
