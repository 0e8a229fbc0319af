"""The steps the DRA, autoscaler and rule-object watches share, against a replayed API
server: a group version not served names no resources, a forbidden collection is told from
a readable one, and discovery is asked again until it answers."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator

import pytest

from tests.cluster.replayserver import Body, ReplayServer, status_body
from webhook.cluster.apiclient import ApiClient, ApiEndpoint, ApiError
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources.kindwatch import KindWatch, list_readable, served_resources

GROUP_VERSION = "/apis/example.io/v1"
WIDGETS = f"{GROUP_VERSION}/widgets"
DISCOVERY = json.dumps(
    {"kind": "APIResourceList", "resources": [{"name": "widgets"}, "not-a-resource"]}
).encode()
FORBIDDEN = Body(status_body(403, "Forbidden", 'widgets is forbidden: cannot list "widgets"'), 403)
UNAVAILABLE = Body(status_body(503, "ServiceUnavailable", "etcd is unhappy"), 503)
WIDGET_LIST = json.dumps(
    {"kind": "WidgetList", "metadata": {"resourceVersion": "7"}, "items": [{"metadata": {}}]}
).encode()


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.fixture
def client(replay: ReplayServer) -> Iterator[ApiClient]:
    api = ApiClient(ApiEndpoint(host=replay.url))
    yield api
    api.close()


def test_a_group_version_lists_the_resources_it_serves(
    replay: ReplayServer, client: ApiClient
) -> None:
    replay.routes[GROUP_VERSION] = deque([Body(DISCOVERY)])

    assert served_resources(client, GROUP_VERSION) == {"widgets"}


def test_a_group_version_not_served_serves_no_resources(client: ApiClient) -> None:
    assert served_resources(client, GROUP_VERSION) == frozenset()


@pytest.mark.parametrize(
    ("answer", "listed"),
    [
        pytest.param(Body(WIDGET_LIST), [{"metadata": {}}], id="readable"),
        pytest.param(FORBIDDEN, None, id="forbidden"),
    ],
)
def test_a_forbidden_collection_lists_as_none(
    replay: ReplayServer, client: ApiClient, answer: Body, listed: object
) -> None:
    replay.routes[WIDGETS] = deque([answer])

    assert list_readable(client, WIDGETS, parse=dict) == listed
    assert KindWatch(client=client).readable(WIDGETS) is (listed is not None)


def test_another_error_is_no_reason_to_call_a_collection_unreadable(
    replay: ReplayServer, client: ApiClient
) -> None:
    replay.routes[WIDGETS] = deque([UNAVAILABLE])

    assert KindWatch(client=client).readable(WIDGETS) is True
    with pytest.raises(ApiError):
        list_readable(client, WIDGETS, parse=dict)


def test_discovery_is_asked_again_until_it_answers(replay: ReplayServer, client: ApiClient) -> None:
    replay.routes[GROUP_VERSION] = deque([UNAVAILABLE, UNAVAILABLE, Body(DISCOVERY)])
    watch = KindWatch(client=client, backoff=lambda: Backoff(initial_seconds=0.01))

    served = watch.discover(
        threading.Event(), lambda: served_resources(client, GROUP_VERSION), what="widget"
    )

    assert served == {"widgets"}
    assert len(replay.collection_requests(GROUP_VERSION)) == 3


def test_discovery_ends_once_stopped(client: ApiClient) -> None:
    stop = threading.Event()
    stop.set()

    assert KindWatch(client=client).discover(stop, lambda: 1, what="widget") is None
