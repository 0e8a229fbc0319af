"""The audit Lease: one holder, renewed by it, taken over only once expired, and a race
for it won by one replica (the API server's 409 on a stale resourceVersion)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import FakeApiServer, Request
from webhook.cluster.apiclient import ApiClient, ApiEndpoint
from webhook.cluster.lease import Lease

PATH = "/apis/coordination.k8s.io/v1/namespaces/gpu-webhook/leases/gpu-webhook-audit"
T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
def client(fake_api: FakeApiServer) -> Iterator[ApiClient]:
    fake_api.namespaces.add("gpu-webhook")
    api = ApiClient(ApiEndpoint(host=fake_api.url))
    yield api
    api.close()


def lease(client: ApiClient, identity: str, clock: Clock) -> Lease:
    return Lease(
        client,
        namespace="gpu-webhook",
        name="gpu-webhook-audit",
        identity=identity,
        duration_seconds=60,
        clock=clock,
    )


def test_the_first_replica_creates_the_lease_and_the_second_waits(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    clock = Clock()
    a, b = lease(client, "pod-a", clock), lease(client, "pod-b", clock)
    assert a.try_hold()
    assert not b.try_hold()
    spec = fake_api.objects[PATH]["spec"]
    assert spec["holderIdentity"] == "pod-a"
    assert spec["leaseDurationSeconds"] == 60
    assert spec["acquireTime"] == spec["renewTime"] == "2026-11-30T12:00:00.000000Z"


def test_the_holder_renews_and_keeps_it(fake_api: FakeApiServer, client: ApiClient) -> None:
    clock = Clock()
    a, b = lease(client, "pod-a", clock), lease(client, "pod-b", clock)
    assert a.try_hold()
    clock.now += dt.timedelta(seconds=50)
    assert a.try_hold()
    clock.now += dt.timedelta(seconds=50)  # 100 s after taking it, 50 s after renewing
    assert not b.try_hold()
    assert fake_api.objects[PATH]["spec"]["renewTime"] == "2026-11-30T12:00:50.000000Z"


def test_an_expired_lease_is_taken_over_and_counted_as_a_transition(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    clock = Clock()
    a, b = lease(client, "pod-a", clock), lease(client, "pod-b", clock)
    assert a.try_hold()
    clock.now += dt.timedelta(seconds=61)
    assert b.try_hold()
    spec = fake_api.objects[PATH]["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("pod-b", 1)
    assert not a.try_hold()


def test_two_replicas_racing_for_an_expired_lease_cannot_both_win(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    clock = Clock()
    assert lease(client, "pod-a", clock).try_hold()
    clock.now += dt.timedelta(seconds=61)
    b = lease(client, "pod-b", clock)

    def c_takes_it_first(req: Request) -> None:
        if req.method == "PUT" and req.body["spec"]["holderIdentity"] == "pod-b":
            fake_api.intercept = None
            assert lease(client, "pod-c", clock).try_hold()  # its PUT lands before b's

    fake_api.intercept = c_takes_it_first  # type: ignore[assignment]
    assert not b.try_hold()
    assert fake_api.objects[PATH]["spec"]["holderIdentity"] == "pod-c"


def test_a_released_lease_is_free_at_once(fake_api: FakeApiServer, client: ApiClient) -> None:
    clock = Clock()
    a, b = lease(client, "pod-a", clock), lease(client, "pod-b", clock)
    assert a.try_hold()
    a.release()
    assert b.try_hold()


def test_an_api_error_reads_as_not_holding(fake_api: FakeApiServer, client: ApiClient) -> None:
    fake_api.intercept = lambda _req: (403, {"kind": "Status", "code": 403, "message": "forbidden"})
    assert not lease(client, "pod-a", Clock()).try_hold()
