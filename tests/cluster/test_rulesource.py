"""Rule objects of a live cluster, replayed: discovery, list and watch through the pod's
watcher to a worker, a cluster without the CRDs, a kind it may not read, and the status
that the Lease holder writes."""

from __future__ import annotations

import datetime as dt
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.feeding import fed_worker, live_source
from tests.cluster.replayserver import Body, ReplayServer, eventually, fixture, status_body
from tests.cluster.ruleobjects import POLICIES, event, gpu_policy, serve_policies
from tests.policyvalues import golden_cases
from tests.running import kubeconfig
from webhook.cluster.apiclient import ApiClient, ApiEndpoint, ApiError
from webhook.cluster.reflector import Backoff
from webhook.cluster.sources.rulesource import (
    CLUSTER_MATCH,
    DISCOVERY_PATH,
    RuleObjectCache,
    RuleObjectWatch,
    StatusWriter,
    desired_status,
    list_rule_objects,
)
from webhook.cluster.watcherprocess import WatcherProcess
from webhook.files.ruleobjects import RuleObject, Verdict

ROOT = Path(__file__).resolve().parents[2]
MAX_FOUR = {"validate": [{"maxGPUsPerPod": 4}]}
TYPO = {"validate": [{"maxGPUsPerPd": 4}]}


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    yield server
    server.stop()


def watcher(replay: ReplayServer, tmp: Path, *, rules: Path | None = None) -> WatcherProcess:
    process = WatcherProcess(
        kubeconfig=kubeconfig(tmp, replay.url),
        log_level="warning",
        backoff=Backoff(initial_seconds=0.05, cap_seconds=0.2),
        status_rules=None if rules is None else str(rules),
        lease_namespace="gpu-webhook",
    )
    process.start()
    return process


def names(objects: tuple[RuleObject, ...] | None) -> list[tuple[str, int]] | None:
    return None if objects is None else [(o.name, o.generation) for o in objects]


def test_a_worker_sees_each_rule_object_as_it_is_added_changed_and_deleted(
    replay: ReplayServer, tmp_path: Path
) -> None:
    step = [threading.Event() for _ in range(3)]
    changed = gpu_policy("team-a", {"validate": [{"maxGPUsPerPod": 2}]}, generation=2, rv="12")
    serve_policies(
        replay,
        [gpu_policy("team-a", MAX_FOUR)],
        [
            step[0],
            event("ADDED", gpu_policy("team-b", MAX_FOUR, rv="11")),
            step[1],
            event("MODIFIED", changed),
            step[2],
            event("DELETED", changed),
        ],
    )
    process = watcher(replay, tmp_path)
    try:
        with fed_worker(process) as worker:
            eventually(lambda: names(worker.rule_objects()) == [("team-a", 1)], timeout=30)
            step[0].set()
            eventually(lambda: names(worker.rule_objects()) == [("team-a", 1), ("team-b", 1)])
            step[1].set()
            eventually(lambda: names(worker.rule_objects()) == [("team-a", 2), ("team-b", 1)])
            step[2].set()
            eventually(lambda: names(worker.rule_objects()) == [("team-b", 1)])
            (kept,) = worker.rule_objects() or ()
            assert kept.body["metadata"] == {"name": "team-b"}  # no uid, managedFields
    finally:
        process.stop()
    watches = [r for r in replay.collection_requests(POLICIES) if r.query.get("watch")]
    assert [r.query["resourceVersion"] for r in watches] == ["10"]


def test_a_cluster_without_the_crds_has_no_rule_objects_and_is_ready(
    replay: ReplayServer, tmp_path: Path
) -> None:
    process = watcher(replay, tmp_path)
    try:
        with fed_worker(process) as worker:
            eventually(worker.ready, timeout=30)
            assert worker.rule_objects() == ()
    finally:
        process.stop()
    assert not replay.collection_requests(POLICIES)


def test_a_kind_it_may_not_read_counts_as_none(replay: ReplayServer, tmp_path: Path) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    forbidden = status_body(403, "Forbidden", 'gpupolicies.gpu-webhook.io is forbidden: User "x"')
    replay.collection_lists[POLICIES] = deque([Body(forbidden, 403)])
    process = watcher(replay, tmp_path)
    try:
        with fed_worker(process) as worker:
            eventually(lambda: worker.rule_objects() == (), timeout=30)
    finally:
        process.stop()


def test_the_lease_holder_writes_each_objects_status_through_the_subresource(
    replay: ReplayServer, tmp_path: Path
) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR), gpu_policy("team-b", TYPO)], [])
    process = watcher(replay, tmp_path, rules=ROOT / "rules")
    status = f"{POLICIES}/team-b/status"
    try:
        (write,) = eventually(lambda: replay.written(status), timeout=30)
        eventually(lambda: replay.written(f"{POLICIES}/team-a/status"))
    finally:
        process.stop()
    assert write.method == "PUT"
    assert write.body["metadata"] == {"name": "team-b", "resourceVersion": "10"}
    ready, stalled = write.body["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "Invalid")
    # What Flux's wait (kstatus) reads as failed: it does not read Ready.
    assert (stalled["type"], stalled["status"]) == ("Stalled", "True")
    assert stalled["message"] == ready["message"]
    assert ready["message"].startswith(
        'spec.validate[0]: unknown check "maxGPUsPerPd" (did you mean "maxGPUsPerPod"?)'
    )
    assert write.body["status"]["observedGeneration"] == 1
    leases = "/apis/coordination.k8s.io/v1/namespaces/gpu-webhook/leases"
    assert replay.written(leases)[0].body["metadata"]["name"] == "gpu-webhook-policy-status"


def test_a_status_already_right_is_not_written_again(replay: ReplayServer) -> None:
    cache = RuleObjectCache()
    cache.set_served(["GPUPolicy"])
    obj = RuleObject.of(gpu_policy("team-a", MAX_FOUR))
    cache.replace("GPUPolicy", [(obj, {})])
    client = ApiClient(ApiEndpoint(host=replay.url))
    writer = StatusWriter(client, cache)
    writer.write({obj.key: Verdict(1)})
    (written,) = replay.written(f"{POLICIES}/team-a/status")
    cache.apply("MODIFIED", obj, written.body["status"])  # as the watch brings it back
    writer.write({obj.key: Verdict(1)})
    writer.write({obj.key: Verdict(2)})  # judged a newer version than the one seen: wait
    client.close()
    assert writer.written == 1
    assert written.body["status"]["checks"] == "maxGPUsPerPod"


def listed(replay: ReplayServer, client: ApiClient) -> RuleObjectCache:
    """A cache holding the GPUPolicies as the replayed API server lists them (so that it
    knows them too, and answers their status writes as the real one does)."""
    cache = RuleObjectCache()
    cache.set_served(["GPUPolicy"])
    cache.replace("GPUPolicy", [(o, {}) for o in list_rule_objects(client)])
    return cache


def test_the_replayed_api_server_refuses_a_stale_status_write_as_the_real_one_does(
    replay: ReplayServer,
) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    client = ApiClient(ApiEndpoint(host=replay.url))
    path = f"{POLICIES}/team-a/status"
    try:
        list_rule_objects(client)
        status = {"observedGeneration": 1}
        body = {**gpu_policy("team-a", MAX_FOUR), "status": status}
        answer = client.send("PUT", path, body)
        assert answer["metadata"]["resourceVersion"] == "11"
        assert (answer["status"], answer["metadata"]["generation"]) == (status, 1)
        with pytest.raises(ApiError) as stale:
            client.send("PUT", path, body)  # resourceVersion 10 again
        unconditional = {**body, "metadata": {"name": "team-a"}}
        with pytest.raises(ApiError) as unversioned:
            client.send("PUT", path, unconditional)
    finally:
        client.close()
    assert stale.value.code == 409
    assert str(stale.value) == (
        '409 Conflict: Operation cannot be fulfilled on gpupolicies.gpu-webhook.io "team-a": '
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    assert unversioned.value.code == 422


def test_a_status_is_written_once_though_the_watch_has_not_brought_it_back_yet(
    replay: ReplayServer,
) -> None:
    """The race of issue 42: a second step before the watch echoes the first write saw the
    object still without its status and PUT it again with the old resourceVersion."""
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    client = ApiClient(ApiEndpoint(host=replay.url))
    try:
        cache = listed(replay, client)
        writer = StatusWriter(client, cache)
        key = ("GPUPolicy", "team-a")
        writer.write({key: Verdict(1)})
        writer.write({key: Verdict(1)})  # no watch event in between
    finally:
        client.close()
    (written,) = replay.written(f"{POLICIES}/team-a/status")
    assert written.body["metadata"]["resourceVersion"] == "10"
    assert writer.written == 1
    seen = cache.current(key)
    assert seen is not None
    assert seen[0].resource_version == "11"
    assert seen[1] == written.body["status"]


def test_a_status_write_refused_as_stale_waits_for_the_newer_version(
    replay: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    client = ApiClient(ApiEndpoint(host=replay.url))
    path = f"{POLICIES}/team-a/status"
    key = ("GPUPolicy", "team-a")
    try:
        cache = listed(replay, client)
        # Someone else (a replica that held the Lease before) writes first.
        newer = client.send("PUT", path, {**gpu_policy("team-a", MAX_FOUR), "status": {}})
        writer = StatusWriter(client, cache)
        writer.write({key: Verdict(1)})
        assert writer.written == 0  # 409: the newer version is judged when it arrives
        cache.apply("MODIFIED", RuleObject.of(newer), {})  # the watch brings it
        writer.write({key: Verdict(1)})
    finally:
        client.close()
    assert writer.written == 1
    sent = [w.body["metadata"]["resourceVersion"] for w in replay.written(path)]
    assert sent == ["10", "10", "11"]
    assert "cannot write the status" not in caplog.text


def test_tools_list_the_rule_objects_once(replay: ReplayServer) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    client = ApiClient(ApiEndpoint(host=replay.url))
    try:
        assert names(list_rule_objects(client)) == [("team-a", 1)]
        replay.routes[DISCOVERY_PATH] = deque(
            [Body(status_body(404, "NotFound", "the server could not find"), 404)]
        )
        assert list_rule_objects(client) == ()
    finally:
        client.close()


def test_the_in_process_live_source_keeps_the_rule_objects_too(replay: ReplayServer) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    source = live_source(replay)
    source.start()
    try:
        eventually(lambda: names(source.rule_objects()) == [("team-a", 1)], timeout=30)
    finally:
        source.stop()


def test_broken_rule_files_stop_the_statuses_not_the_watcher(
    replay: ReplayServer, tmp_path: Path
) -> None:
    broken = tmp_path / "rules"
    broken.mkdir()
    (broken / "00.yaml").write_text("apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolcy\n")
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    process = watcher(replay, tmp_path, rules=broken)
    try:
        with fed_worker(process) as worker:
            eventually(lambda: names(worker.rule_objects()) == [("team-a", 1)], timeout=30)
            eventually(worker.ready)
        assert process.restarts == 0
        assert replay.written(f"{POLICIES}/team-a/status") == []
    finally:
        process.stop()


def test_crds_installed_after_the_server_are_picked_up_without_a_restart(
    replay: ReplayServer,
) -> None:
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    installed_later = replay.routes[DISCOVERY_PATH]
    installed_later.appendleft(Body(status_body(404, "NotFound", "the server could not find"), 404))
    cache = RuleObjectCache()
    client = ApiClient(ApiEndpoint(host=replay.url))
    watch = RuleObjectWatch(
        client=client,
        cache=cache,
        backoff=lambda: Backoff(initial_seconds=0.01, cap_seconds=0.05),
        rediscover_seconds=0.5,
    )
    stop = threading.Event()
    thread = watch.thread(stop)
    thread.start()
    try:
        eventually(lambda: cache.objects() == ())  # no CRDs yet: no rule objects
        eventually(lambda: names(cache.objects()) == [("team-a", 1)])
    finally:
        stop.set()
        client.close()
        thread.join(5)
    discoveries = replay.collection_requests(DISCOVERY_PATH)
    assert len(discoveries) >= 2


def test_the_transition_time_moves_only_when_ready_does() -> None:
    obj = RuleObject.of(gpu_policy("team-a", MAX_FOUR))
    then = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)
    first = desired_status(obj, Verdict(1), {}, now=then)
    later = then + dt.timedelta(hours=1)
    assert desired_status(obj, Verdict(1), first, now=later) == first
    broken = desired_status(obj, Verdict(2, ("spec: bad",)), first, now=later)
    assert [c["lastTransitionTime"] for c in broken["conditions"]] == ["2026-12-01T11:00:00Z"] * 2
    assert broken["observedGeneration"] == 2


def test_a_relist_of_the_scripted_objects_does_not_undo_a_write_the_server_took(
    replay: ReplayServer,
) -> None:
    """The scripted list is the cluster before the write: served again, it must not make
    the replayed server forget the write and take a stale resourceVersion after all."""
    serve_policies(replay, [gpu_policy("team-a", MAX_FOUR)], [])
    client = ApiClient(ApiEndpoint(host=replay.url))
    path = f"{POLICIES}/team-a/status"
    body = {**gpu_policy("team-a", MAX_FOUR), "status": {}}
    try:
        list_rule_objects(client)
        client.send("PUT", path, body)
        list_rule_objects(client)  # the same scripted list, resourceVersion 10
        with pytest.raises(ApiError) as stale:
            client.send("PUT", path, body)
    finally:
        client.close()
    assert stale.value.code == 409


def test_the_status_says_when_a_policy_value_matches_nothing_in_the_cluster(
    replay: ReplayServer, tmp_path: Path
) -> None:
    (case,) = [c for c in golden_cases() if c.name == "product"]  # the nodes of the replay
    # Its namespace is none of the replayed cluster's: that would be a second line.
    spec = {k: v for k, v in case.document["spec"].items() if k != "match"}
    serve_policies(replay, [gpu_policy("vision", spec), gpu_policy("fine", MAX_FOUR)], [])
    process = watcher(replay, tmp_path, rules=ROOT / "rules")

    def matched(name: str) -> dict[str, Any] | None:
        for write in replay.written(f"{POLICIES}/{name}/status"):
            for condition in write.body["status"]["conditions"]:
                if condition["type"] == CLUSTER_MATCH:
                    return dict(condition)
        return None

    try:
        typo = eventually(lambda: matched("vision"), timeout=30)
        fine = eventually(lambda: matched("fine"), timeout=30)
    finally:
        process.stop()
    assert (typo["status"], typo["reason"], typo["message"]) == ("False", "UnmetValues", case.says)
    assert (fine["status"], fine["reason"]) == ("True", "ValuesMet")
