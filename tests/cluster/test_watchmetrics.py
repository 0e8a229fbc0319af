"""The cluster view's series per source, as a reflector keeps them: there at 0 as soon as
the reflector exists, its last sync moved by every answer of the API server, its errors
counted per failed request, and active only while it runs."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.cluster.replayserver import Body, ReplayServer, Stream, eventually, fixture, status_body
from webhook.cluster.apiclient import ApiClient, ApiEndpoint, ApiError
from webhook.cluster.reflector import Backoff, Reflector
from webhook.cluster.sources.devicesource import GROUP_VERSION_PATH, PATHS, DeviceCache, DeviceWatch
from webhook.cluster.watchmetrics import source_name

NODES = "/api/v1/nodes"


class Names:
    """A handler that keeps the names it is given."""

    def __init__(self) -> None:
        self.lists = 0

    def parse(self, obj: Mapping[str, Any]) -> str:
        return str(obj["metadata"]["name"])

    def replace(self, items: list[str], resource_version: str) -> None:
        self.lists += 1

    def apply(self, kind: str, item: str, resource_version: str) -> None:
        pass

    def progress(self, resource_version: str) -> None:
        pass

    def failed(self, error: ApiError) -> None:
        pass


def sample(name: str, source: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"source": source})


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.mark.parametrize(
    ("path", "source"),
    [
        pytest.param(NODES, "nodes", id="core"),
        pytest.param("/apis/resource.k8s.io/v1/resourceslices", "resourceslices", id="dra"),
        pytest.param("/apis/karpenter.sh/v1/nodepools/", "nodepools", id="trailing-slash"),
    ],
)
def test_a_source_is_named_by_its_resource(path: str, source: str) -> None:
    assert source_name(path) == source


def test_a_reflectors_series_exist_at_zero_before_it_runs(replay: ReplayServer) -> None:
    client = ApiClient(ApiEndpoint(host=replay.url))
    Reflector(client=client, path="/apis/example.com/v1/gadgets", handler=Names())
    assert sample("gpu_webhook_watch_errors_total", "gadgets") == 0
    assert sample("gpu_webhook_watch_active", "gadgets") == 0
    assert sample("gpu_webhook_watch_last_sync_timestamp_seconds", "gadgets") == 0
    client.close()


def test_a_failed_list_counts_an_error_and_the_next_list_a_sync(replay: ReplayServer) -> None:
    hold = threading.Event()
    replay.lists.append(Body(status_body(500, "InternalError", "etcd is unhappy"), 500))
    replay.lists.append(Body(fixture("node-list.json")))
    replay.watches.append(Stream([hold], end="hold"))
    client = ApiClient(ApiEndpoint(host=replay.url))
    handler = Names()
    reflector = Reflector(
        client=client, path=NODES, handler=handler, backoff=Backoff(initial_seconds=0.01)
    )
    errors = sample("gpu_webhook_watch_errors_total", "nodes") or 0
    started = time.time()
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,))
    thread.start()
    try:
        eventually(lambda: handler.lists == 1)
        assert sample("gpu_webhook_watch_errors_total", "nodes") == errors + 1
        synced = sample("gpu_webhook_watch_last_sync_timestamp_seconds", "nodes") or 0
        assert started <= synced <= time.time()
        assert sample("gpu_webhook_watch_active", "nodes") == 1
    finally:
        stop.set()
        hold.set()
        client.close()
        thread.join(timeout=10)
    assert sample("gpu_webhook_watch_active", "nodes") == 0


def test_a_failing_dra_discovery_counts_an_error_for_every_dra_source(
    replay: ReplayServer,
) -> None:
    replay.routes[GROUP_VERSION_PATH] = deque([Body(status_body(503, "Unavailable", "busy"), 503)])
    client = ApiClient(ApiEndpoint(host=replay.url))
    cache = DeviceCache()
    watch = DeviceWatch(
        client=client,
        handlers=cache.handler,
        on_served=cache.set_served,
        backoff=lambda: Backoff(initial_seconds=0.01, cap_seconds=0.05),
    )
    sources = [source_name(path) for path in PATHS.values()]
    before = {s: sample("gpu_webhook_watch_errors_total", s) or 0 for s in sources}
    stop = threading.Event()
    thread = watch.thread(stop)
    thread.start()
    try:
        eventually(
            lambda: all(sample("gpu_webhook_watch_errors_total", s) > before[s] for s in sources)
        )
    finally:
        stop.set()
        client.close()
        thread.join(timeout=10)
