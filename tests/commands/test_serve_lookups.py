"""``gpu-webhook serve --kubeconfig`` (real gunicorn, TLS, the pod's watcher) reads a claim
created a moment before its pod from the API server when its watch has not delivered it
(issue 31), against a loopback server replaying the API server: the watch lists the DRA
objects of ``tests/cases/_inventories/dra.yaml``, and the claim answers a GET only."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.builders import review
from tests.cluster.replayserver import ReplayServer, Stream, eventually
from tests.cluster.test_liveobjects import claim, claim_pod, dra_replay, gets, on_api_server
from tests.commands.test_serve_live import stop_and_check_the_watchers_stopped
from tests.running import Server, live_inventory_server, post

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    server = dra_replay()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory, replay: ReplayServer) -> Iterator[Server]:
    hold = threading.Event()
    replay.watches.extend(Stream([hold], end="hold") for _ in range(4))
    server = live_inventory_server(tmp_path_factory.mktemp("lookups"), replay.url)
    eventually(lambda: server.health("/readyz")[0] == 200, timeout=30)
    yield server
    hold.set()
    stop_and_check_the_watchers_stopped(server)


def test_a_pod_s_claim_not_yet_watched_is_read_and_judged_by_the_server(
    live_server: Server, replay: ReplayServer
) -> None:
    path = on_api_server(replay, claim("made-with-its-pod", 20))

    status, answer = post(
        live_server.connection(), "/mutate", review(claim_pod("made-with-its-pod"))
    )

    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False, response
    assert "[builtin/deviceClaims]" in response["status"]["message"]
    assert gets(replay, path) >= 1


def test_a_claim_that_fits_is_admitted_without_the_missing_claim_warning(
    live_server: Server, replay: ReplayServer
) -> None:
    on_api_server(replay, claim("fits-with-its-pod", 2))

    status, answer = post(
        live_server.connection(), "/mutate", review(claim_pod("fits-with-its-pod"))
    )

    assert status == 200
    response = answer["response"]
    assert response["allowed"] is True, response
    assert not any("missingClaim" in w for w in response.get("warnings") or []), response
