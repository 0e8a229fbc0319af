"""The live inventory, fed by a loopback server that replays the API server's own bytes.

Every test asserts on what the engine would see (``snapshot()``, ``status()``,
``namespace_labels``), never on the cache's internals.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.replayserver import (
    FIXTURES,
    Body,
    ReplayServer,
    Stream,
    eventually,
    fixture,
    fixture_lines,
    status_body,
)
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources.inventorysource import (
    ApiEndpoint,
    KubeconfigError,
    LiveInventorySource,
    StaticInventorySource,
    api_endpoint_from_kubeconfig,
)
from webhook.engine.resources.inventory import Inventory, Placement

GPU = "nvidia.com/gpu"
TOLERATES_GPU = {"tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
WATCH = fixture_lines("watch-stream.jsonl")  # ADDED, MODIFIED x4, DELETED, BOOKMARK x2


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    yield replay
    replay.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def live(server: ReplayServer, clock: FakeClock) -> Iterator[LiveInventorySource]:
    source = make_source(server, clock)
    yield source
    source.stop()


def make_source(server: ReplayServer, clock: FakeClock, **options: object) -> LiveInventorySource:
    settings: dict[str, object] = {
        "clock": clock,
        "backoff": lambda: Backoff(initial_seconds=0.01, cap_seconds=0.05),
        "publish_interval_seconds": 0.01,
        "watch_timeout_seconds": lambda: 30,
    }
    return LiveInventorySource(api=ApiEndpoint(host=server.url), **(settings | options))  # type: ignore[arg-type]


def node_names(inventory: Inventory | None) -> set[str]:
    return set() if inventory is None else {n.name for n in inventory.nodes}


def snapshot_version(live: LiveInventorySource) -> str:
    snapshot = live.snapshot()
    return "" if snapshot is None else snapshot.resource_version


def largest_gpus_of(snapshot: Inventory) -> int:
    return snapshot.largest(GPU, Placement.of(TOLERATES_GPU)).amount


def largest_gpus(live: LiveInventorySource) -> int:
    snapshot = live.snapshot()
    return 0 if snapshot is None else snapshot.largest(GPU, Placement.of(TOLERATES_GPU)).amount


def test_the_first_list_makes_the_source_ready_with_every_node(
    server: ReplayServer, live: LiveInventorySource, clock: FakeClock
) -> None:
    gate = threading.Event()
    listed = threading.Event()  # the list is answered once the test has looked before it
    server.lists.append(Body(fixture("node-list.json"), gate=listed))
    server.watches.append(Stream([gate], end="hold"))
    assert live.status().age_seconds is None
    live.start()
    clock.now += 5
    status = live.status()
    assert (live.ready(), live.snapshot(), status.synced, status.stale) == (
        False,
        None,
        False,
        False,
    )
    assert status.age_seconds == pytest.approx(5), "waiting since start"
    listed.set()
    eventually(live.ready)
    assert node_names(live.snapshot()) == {"cpu-0", "gpu-a100-0", "gpu-h100-mig-0", "gpu-t4-0"}
    assert largest_gpus(live) == 8
    status = live.status()
    assert (status.synced, status.stale, status.resource_version, status.node_count) == (
        True,
        False,
        "217",
        4,
    )


def test_the_watch_resumes_from_the_list_resource_version_with_bookmarks(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    live.start()
    watch = eventually(server.watch_requests)[0]
    assert watch.path == "/api/v1/nodes"
    assert watch.query["resourceVersion"] == "217"
    assert watch.query["allowWatchBookmarks"] == "true"
    assert watch.query["timeoutSeconds"] == "30"


def test_a_paged_list_follows_the_continue_token(server: ReplayServer, clock: FakeClock) -> None:
    server.lists.extend(
        [Body(fixture("node-list-page1.json")), Body(fixture("node-list-page2.json"))]
    )
    live = make_source(server, clock, page_size=2)
    try:
        live.start()
        eventually(live.ready)
        assert len(node_names(live.snapshot())) == 4
        first, second = server.list_requests()
        assert first.query == {"limit": "2"}
        assert (
            second.query["continue"]
            == json.loads(fixture("node-list-page1.json"))["metadata"]["continue"]
        )
    finally:
        live.stop()


def test_added_modified_and_deleted_nodes_reach_the_snapshots_in_order(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    gates = [threading.Event() for _ in range(3)]
    added, gpus16, cordoned, relabelled, tainted, deleted, *bookmarks = WATCH
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(
        Stream(
            [
                added,
                gpus16,
                gates[0],
                cordoned,
                gates[1],
                relabelled,
                tainted,
                gates[2],
                deleted,
                *bookmarks,
            ],
            end="hold",
        )
    )
    live.start()
    # The new A100 node, given 16 GPUs, is now the largest node.
    eventually(lambda: largest_gpus(live) == 16)
    assert "gpu-a100-1" in node_names(live.snapshot())
    gates[0].set()
    # Cordoned: it no longer counts, the 8-GPU node is the largest again.
    eventually(lambda: largest_gpus(live) == 8)
    gates[1].set()
    eventually(lambda: snapshot_version(live) == "383")
    snapshot = live.snapshot()
    assert snapshot is not None
    t4 = next(n for n in snapshot.nodes if n.name == "gpu-t4-0")
    assert t4.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert any(t.key == "dedicated" and t.effect == "NoExecute" for t in t4.taints)
    gates[2].set()
    eventually(lambda: "gpu-a100-1" not in node_names(live.snapshot()))
    eventually(lambda: live.status().resource_version == "385")
    assert live.status().node_count == 4


def test_a_snapshot_already_read_never_changes(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    added, gpus16 = WATCH[:2]
    server.lists.append(Body(fixture("node-list.json")))
    gate = threading.Event()
    server.watches.append(Stream([gate, added, gpus16], end="hold"))
    live.start()
    eventually(live.ready)
    before = live.snapshot()
    assert before is not None
    gate.set()
    eventually(lambda: largest_gpus(live) == 16)
    assert len(before) == 4
    assert before.largest(GPU, Placement.of(TOLERATES_GPU)).amount == 8


def test_bookmarks_keep_the_inventory_fresh_and_silence_makes_it_stale(
    server: ReplayServer, clock: FakeClock
) -> None:
    bookmark = WATCH[-1]
    earlier = bookmark.replace(b'"resourceVersion":"385"', b'"resourceVersion":"300"')
    gate = threading.Event()
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Stream([earlier, gate, bookmark], end="hold"))
    live = make_source(server, clock, max_staleness_seconds=60)
    try:
        live.start()
        eventually(lambda: live.status().resource_version == "300")
        assert not live.status().stale
        assert live.stale_seconds() is None
        clock.now += 61
        status = live.status()
        assert status.stale
        assert status.age_seconds == pytest.approx(61)
        assert live.stale_seconds() == pytest.approx(61)
        gate.set()
        eventually(lambda: not live.status().stale)
        assert live.status().resource_version == "385"
        assert live.status().synced
    finally:
        live.stop()


def test_a_410_gone_makes_the_source_list_again(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    added = WATCH[0]
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Stream(fixture_lines("watch-410.jsonl"), end="close"))
    relisted = json.loads(fixture("node-list.json"))
    relisted["metadata"]["resourceVersion"] = "400"
    relisted["items"] = relisted["items"][:2]
    server.lists.append(Body(json.dumps(relisted).encode()))
    server.watches.append(Stream([added], end="hold"))
    live.start()
    eventually(lambda: live.status().relists == 1)
    eventually(lambda: node_names(live.snapshot()) == {"cpu-0", "gpu-a100-0", "gpu-a100-1"})
    assert [r.query["resourceVersion"] for r in server.watch_requests()] == ["217", "400"]


def test_a_connection_dropped_mid_stream_resumes_the_watch_without_a_list(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    added, gpus16, cordoned = WATCH[:3]
    server.lists.append(Body(fixture("node-list.json")))
    half = gpus16[: len(gpus16) // 2]
    server.watches.append(Stream([added, half], end="drop"))
    server.watches.append(Stream([gpus16, cordoned], end="hold"))
    live.start()
    eventually(lambda: snapshot_version(live) == "381")
    assert [r.query["resourceVersion"] for r in server.watch_requests()] == ["217", "379"]
    assert len(server.list_requests()) == 1
    assert live.status().relists == 0
    assert largest_gpus(live) == 8  # the new node is cordoned


def test_a_watch_ended_by_the_server_is_opened_again_from_where_it_was(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Stream(WATCH[:1], end="close"))
    live.start()
    eventually(lambda: len(server.watch_requests()) == 2)
    assert server.watch_requests()[1].query["resourceVersion"] == "379"
    eventually(lambda: "gpu-a100-1" in node_names(live.snapshot()))


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(Body(fixture("list-403.json"), 403), "Forbidden", id="forbidden"),
        pytest.param(
            Body(status_body(500, "InternalError", "etcd is down"), 500),
            "etcd is down",
            id="server-error",
        ),
        pytest.param(Body(b"<html>bad gateway</html>", 502), "bad gateway", id="not-json"),
    ],
)
def test_a_failed_list_is_reported_and_retried_until_it_succeeds(
    server: ReplayServer, clock: FakeClock, answer: Body, message: str
) -> None:
    gate = threading.Event()
    server.lists.append(answer)
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Stream([gate], end="hold"))
    # A retry slow enough that a loaded machine still sees the error before it clears.
    live = make_source(server, clock, backoff=lambda: Backoff(initial_seconds=1, cap_seconds=1))
    try:
        live.start()
        eventually(lambda: len(server.list_requests()) >= 1 and live.status().last_error)
        assert message in live.status().last_error
        eventually(live.ready)
        assert len(node_names(live.snapshot())) == 4
        eventually(lambda: live.status().last_error == "")
        assert len(server.list_requests()) == 2
    finally:
        live.stop()


def test_the_error_message_of_a_failed_list_names_the_cause(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    server.lists.extend([Body(fixture("list-403.json"), 403)] * 50)
    live.start()
    error = eventually(lambda: live.status().last_error)
    assert "403 Forbidden" in error
    assert "cannot list resource" in error
    assert not live.ready()
    assert live.status().synced is False


def test_a_failed_watch_is_retried_from_the_same_resource_version(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Body(status_body(500, "InternalError", "try later"), 500))
    server.watches.append(Stream(WATCH[:1], end="hold"))
    live.start()
    eventually(lambda: "gpu-a100-1" in node_names(live.snapshot()))
    assert [r.query["resourceVersion"] for r in server.watch_requests()] == ["217", "217"]
    assert len(server.list_requests()) == 1


def test_a_list_slower_than_the_request_timeout_is_abandoned_and_retried(
    server: ReplayServer, clock: FakeClock
) -> None:
    server.lists.append(Body(fixture("node-list.json"), delay_seconds=1.0))
    server.lists.append(Body(fixture("node-list.json"), delay_seconds=0.05))
    live = make_source(server, clock, request_timeout_seconds=0.3)
    try:
        live.start()
        error = eventually(lambda: live.status().last_error)
        assert "timed out" in error
        eventually(live.ready)
        assert live.status().node_count == 4
    finally:
        live.stop()


def test_stop_ends_an_idle_watch_promptly(server: ReplayServer, clock: FakeClock) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    live = make_source(server, clock)
    live.start()
    eventually(server.watch_requests)
    live.stop(timeout_seconds=3)
    assert not [t for t in threading.enumerate() if t.name.startswith("inventory-")]
    assert live.snapshot() is not None


def test_namespace_labels_are_known_once_namespaces_are_listed(
    server: ReplayServer, clock: FakeClock
) -> None:
    namespaces = json.loads(fixture("namespace-list.json"))
    gate = threading.Event()
    server.lists.append(Body(fixture("node-list.json")))
    listed = threading.Event()  # namespaces answered once the nodes alone are seen not ready
    server.namespace_lists.append(Body(fixture("namespace-list.json"), gate=listed))
    server.watches.append(Stream([gate], end="hold"))
    live = make_source(server, clock, watch_namespaces=True)
    try:
        live.start()
        eventually(lambda: live.snapshot() is not None)
        assert not live.ready()
        listed.set()
        eventually(live.ready)
        kube_system = next(i for i in namespaces["items"] if i["metadata"]["name"] == "kube-system")
        assert live.namespace_labels("kube-system") == kube_system["metadata"]["labels"]
        assert live.namespace_labels("no-such-namespace") is None
        assert live.status().namespace_count == len(namespaces["items"])
        assert {r.path for r in server.list_requests()} == {"/api/v1/nodes", "/api/v1/namespaces"}
    finally:
        live.stop()


def test_namespaces_are_unknown_when_not_watched(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    live.start()
    eventually(live.ready)
    assert live.namespace_labels("default") is None
    assert live.status().namespace_count is None


def test_a_static_source_is_ready_at_once_and_never_stale(tmp_path: object) -> None:
    source = StaticInventorySource(str(FIXTURES / "kubectl-get-nodes.yaml"))
    source.start()
    assert source.ready()
    snapshot = source.snapshot()
    assert len(snapshot) == 4
    status = source.status()
    assert (status.synced, status.stale, status.node_count) == (True, False, 4)
    assert source.stale_seconds() is None
    assert source.namespace_labels("default") is None
    source.stop()


def test_a_burst_of_events_is_published_as_few_whole_snapshots(
    server: ReplayServer, clock: FakeClock
) -> None:
    added = json.loads(WATCH[0])
    burst = [WATCH[0]]
    for gpus in range(1, 201):
        added["type"] = "MODIFIED"
        added["object"]["metadata"]["resourceVersion"] = str(1000 + gpus)
        added["object"]["status"] = {"allocatable": {GPU: str(gpus)}}
        burst.append(json.dumps(added).encode() + b"\n")
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Stream(burst, end="hold"))
    live = make_source(server, clock, publish_interval_seconds=0.3)
    seen: list[Inventory] = []
    try:
        live.start()
        deadline = time.monotonic() + 5
        while largest_gpus(live) != 200 and time.monotonic() < deadline:
            snapshot = live.snapshot()
            if snapshot is not None and (not seen or seen[-1] is not snapshot):
                seen.append(snapshot)
            time.sleep(0.001)
        final = live.snapshot()
        assert final is not None
        assert largest_gpus_of(final) == 200
        assert final.resource_version == "1200"
        if seen[-1] is not final:
            seen.append(final)
        # The first list's snapshot, then one or two for 201 events, not one per event.
        assert 2 <= len(seen) <= 3
    finally:
        live.stop()


def test_in_cluster_configuration_uses_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("token-1")
    ca.write_text("not checked until a connection is made")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    endpoint = api_endpoint_from_kubeconfig(None)
    assert endpoint.host == "https://10.96.0.1:443"
    assert endpoint.ca_file == str(ca)
    assert endpoint.authorization is not None
    assert endpoint.authorization() == "bearer token-1"


def test_an_unusable_certificate_authority_is_a_configuration_error(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not a certificate")
    with pytest.raises(KubeconfigError, match="TLS settings"):
        LiveInventorySource(api=ApiEndpoint(host="https://127.0.0.1:6443", ca_file=str(ca)))


def test_an_object_that_cannot_be_read_is_skipped_and_the_watch_goes_on(
    server: ReplayServer, live: LiveInventorySource
) -> None:
    broken = json.loads(WATCH[0])
    broken["object"]["metadata"]["name"] = "broken-0"
    broken["object"]["status"] = ["not", "an", "object"]
    server.lists.append(Body(fixture("node-list.json")))
    server.watches.append(Stream([json.dumps(broken).encode() + b"\n", WATCH[0]], end="hold"))
    live.start()
    eventually(lambda: "gpu-a100-1" in node_names(live.snapshot()))
    assert "broken-0" not in node_names(live.snapshot())
    assert len(server.list_requests()) == 1
