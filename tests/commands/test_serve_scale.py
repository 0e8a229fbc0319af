"""``gpu-webhook serve --kubeconfig`` (real gunicorn, TLS, two workers as deployed) judges a
``kubectl scale`` (issue 41, item 5): the review is an UPDATE of ``<kind>/scale`` carrying
an ``autoscaling/v1`` Scale; the worker reads the parent from a loopback server replaying
the API server and denies a count over ``maxGPUsPerWorkload``, allows one within it, and
allows with a warning the scale of a workload it cannot read. The workers live through it
(same pids, under the deployment's memory limit) and keep answering pods."""

from __future__ import annotations

import json
import shutil
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import RULES, pod, review, scale_review
from tests.cluster.replayserver import Body, ReplayServer, Stream, eventually, fixture
from tests.cluster.test_liveobjects_scale import path_of
from tests.commands.test_serve_live import stop_and_check_the_watchers_stopped
from tests.running import Server, dev_certs, kubeconfig, post, reviews_answered, rss_kib
from tests.scaling import LIMIT, deployment
from tests.serving.test_memory import container_memory_limit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory, replay: ReplayServer) -> Iterator[Server]:
    hold = threading.Event()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    replay.watches.extend(Stream([hold], end="hold") for _ in range(4))
    tmp = tmp_path_factory.mktemp("scale")
    rules = tmp / "rules"
    shutil.copytree(RULES, rules)
    (rules / "90-team-limit.yaml").write_text(LIMIT)
    server = Server(
        tmp=tmp,
        cert_dir=dev_certs(tmp / "certs"),
        rules=rules,
        inventory=None,
        workers=2,
        extra=("--kubeconfig", kubeconfig(tmp, replay.url)),
    )
    eventually(lambda: server.health("/readyz")[0] == 200, timeout=30)
    server.first_workers = set(server.workers())  # type: ignore[attr-defined]
    yield server
    Server.close_clients()
    hold.set()
    stop_and_check_the_watchers_stopped(server)


def validate(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = post(server.connection(), "/validate", body)
    assert status == 200, answer
    response: dict[str, Any] = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    return response


def served(replay: ReplayServer, parent: dict[str, Any]) -> None:
    replay.routes[path_of(parent, "deployments")] = deque([Body(json.dumps(parent).encode())])


def test_a_scale_over_the_workload_limit_is_denied_over_tls(
    live_server: Server, replay: ReplayServer
) -> None:
    parent = deployment("over")
    served(replay, parent)

    response = validate(
        live_server, scale_review(parent, 16, old_replicas=1, resource="deployments")
    )

    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "[team-quotas/maxGPUsPerWorkload]" in message
    assert "Deployment team-a/over scaled to 16 replicas (spec.replicas)" in message
    assert "request 128 GPUs; at most 64" in message


@pytest.mark.parametrize(
    ("name", "replicas", "warnings"),
    [
        # 2 x 8 GPUs: within the limit and the 16 GPUs of the replayed nodes.
        pytest.param("within", 2, None, id="within-the-limit-and-the-cluster"),
        pytest.param(
            "wide",
            8,
            ["builtin/clusterCapacity: workload needs 64 nvidia.com/gpu, cluster has 16"],
            id="past-the-cluster-s-gpus-warned-as-its-update-would-be",
        ),
    ],
)
def test_a_scale_within_the_workload_limit_is_allowed_over_tls(
    live_server: Server, replay: ReplayServer, name: str, replicas: int, warnings: Any
) -> None:
    parent = deployment(name)
    served(replay, parent)

    response = validate(
        live_server, scale_review(parent, replicas, old_replicas=1, resource="deployments")
    )

    assert response["allowed"] is True
    assert response.get("warnings") == warnings


def test_a_scale_of_a_workload_the_server_cannot_read_is_allowed_with_a_warning_naming_it(
    live_server: Server,
) -> None:
    parent = deployment("unserved")  # no route: the replayed API server answers 404

    response = validate(
        live_server, scale_review(parent, 100, old_replicas=1, resource="deployments")
    )

    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert "did not judge this scale of Deployment team-a/unserved to 100 replicas" in warning
    assert "deployments.apps team-a/unserved was not found" in warning


def test_the_workers_live_through_the_scales_and_keep_answering_pods(live_server: Server) -> None:
    status, answer = post(live_server.connection(), "/mutate", review(pod(gpus=1)))

    assert (status, answer["response"]["allowed"]) == (200, True)
    assert reviews_answered(live_server, count=5, timeout=1.0) == [200] * 5
    assert set(live_server.workers()) == live_server.first_workers  # type: ignore[attr-defined]
    pids = [live_server.process.pid, *live_server.workers()]
    assert sum(rss_kib(pid) for pid in pids) * 1024 < container_memory_limit()
