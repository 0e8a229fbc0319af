"""``gpu-webhook serve --kubeconfig`` with GPUPolicy objects served by a replayed API server:
a policy added is enforced within seconds, a broken version is refused at /validate and
reported in its status while the last good one stays in force, deletion lifts the rule,
and a restarted server enforces what the cluster holds before it is ready."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import pod, review
from tests.cluster.replayserver import Body, ReplayServer, eventually, fixture
from tests.cluster.ruleobjects import POLICIES, event, gpu_policy, serve_policies
from tests.running import Server, live_inventory_server, post

pytestmark = pytest.mark.slow
ONE_GPU = {"validate": [{"maxGPUsPerPod": 1, "message": "ask for one GPU"}]}
TYPO = {"validate": [{"maxGPUsPerPd": 1}]}
LINT = 'spec.validate[0]: unknown check "maxGPUsPerPd" (did you mean "maxGPUsPerPod"?)'


def replay_with(items: list[dict[str, Any]], events: list[bytes | threading.Event]) -> ReplayServer:
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    serve_policies(replay, items, events)
    return replay


def two_gpus(server: Server) -> set[bool]:
    """Whether a 2-GPU pod is allowed, asked four times on fresh connections, so of both
    workers (each reloads on its own tick: during a change they may differ)."""
    answers = [post(server.connection(), "/mutate", review(pod(gpus=2))) for _ in range(4)]
    return {a[1]["response"]["allowed"] for a in answers}


def two_gpus_allowed(server: Server) -> bool:
    return two_gpus(server) == {True}


def two_gpus_denied(server: Server) -> bool:
    return two_gpus(server) == {False}


def validate_object(server: Server, obj: dict[str, Any], *, operation: str) -> dict[str, Any]:
    body = review(obj, operation=operation)
    body["request"]["namespace"] = ""  # cluster-scoped
    body["request"]["resource"] = {
        "group": "gpu-webhook.io",
        "version": "v1alpha1",
        "resource": "gpupolicies",
    }
    status, answer = post(server.connection(), "/validate", body)
    assert status == 200
    response: dict[str, Any] = answer["response"]
    return response


def not_in_force(server: Server) -> list[float]:
    """The scraped gpu_webhook_rule_objects_not_in_force of GPUPolicy one-gpu."""
    status, text = server.health("/metrics")
    assert status == 200
    series = 'gpu_webhook_rule_objects_not_in_force{kind="GPUPolicy",name="one-gpu"}'
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series)]


@pytest.fixture
def steps() -> list[threading.Event]:
    return [threading.Event() for _ in range(3)]


@pytest.fixture
def served(steps: list[threading.Event]) -> Iterator[ReplayServer]:
    broken = gpu_policy("one-gpu", TYPO, generation=2, rv="12")
    replay = replay_with(
        [],
        [
            steps[0],
            event("ADDED", gpu_policy("one-gpu", ONE_GPU, rv="11")),
            steps[1],
            event("MODIFIED", broken),
            steps[2],
            event("DELETED", broken),
        ],
    )
    yield replay
    for step in steps:
        step.set()
    replay.stop()


def test_a_policy_object_is_enforced_kept_while_broken_and_lifted_when_deleted(
    tmp_path: Path, served: ReplayServer, steps: list[threading.Event]
) -> None:
    server = live_inventory_server(tmp_path, served.url)
    try:
        assert two_gpus_allowed(server)
        steps[0].set()  # kubectl apply of one-gpu
        eventually(lambda: two_gpus_denied(server), timeout=30)
        _, answer = post(server.connection(), "/mutate", review(pod(gpus=2)))
        assert "ask for one GPU" in answer["response"]["status"]["message"]
        status = f"{POLICIES}/one-gpu/status"
        first = eventually(lambda: served.written(status), timeout=30)[0]
        # Ready True, and ClusterMatch True once the watcher has listed the nodes (issue 42).
        assert [(c["type"], c["status"]) for c in first.body["status"]["conditions"]] in (
            [("Ready", "True")],
            [("Ready", "True"), ("ClusterMatch", "True")],
        )
        assert not_in_force(server) == []  # in force: never named

        refused = validate_object(
            server, gpu_policy("one-gpu", TYPO, generation=2), operation="UPDATE"
        )
        assert refused["allowed"] is False
        assert refused["status"]["message"].startswith(f"GPUPolicy one-gpu: {LINT}")

        steps[1].set()  # stored anyway (the webhook was down, say)
        broken = eventually(lambda: served.written(status)[1:], timeout=30)[0]
        ready, _stalled = broken.body["status"]["conditions"]
        assert (ready["status"], broken.body["status"]["observedGeneration"]) == ("False", 2)
        assert ready["message"].startswith(LINT)
        assert ready["message"].endswith("(generation 1 stays in force)")
        assert broken.body["status"]["inForce"] == {"generation": 1, "spec": ONE_GPU}
        assert two_gpus_denied(server), "the last good version stays in force"
        # What GPUWebhookRuleObjectNotInForce reads, from every worker.
        eventually(lambda: not_in_force(server) == [1.0], timeout=30)

        steps[2].set()  # kubectl delete
        eventually(lambda: two_gpus_allowed(server), timeout=30)
        eventually(lambda: not_in_force(server) == [0.0], timeout=30)
    finally:
        assert server.stop() == 0, server.log.read_text()
    assert "rule object GPUPolicy one-gpu is not in force" in server.log.read_text()


def test_a_valid_object_is_allowed_at_validate(tmp_path: Path, served: ReplayServer) -> None:
    server = live_inventory_server(tmp_path, served.url)
    try:
        answer = validate_object(server, gpu_policy("team-a", ONE_GPU), operation="CREATE")
        assert answer["allowed"] is True
    finally:
        server.stop()


def test_a_restarted_server_enforces_the_cluster_policies_before_it_is_ready(
    tmp_path: Path,
) -> None:
    replay = replay_with([gpu_policy("one-gpu", ONE_GPU)], [])
    try:
        for turn in ("first", "restarted"):
            server = live_inventory_server(tmp_path / turn, replay.url)
            try:
                assert two_gpus_denied(server), turn
            finally:
                assert server.stop() == 0
            replay.lists.append(Body(fixture("node-list.json")))
            replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    finally:
        replay.stop()


def test_a_restarted_server_keeps_in_force_what_a_broken_objects_status_kept(
    tmp_path: Path,
) -> None:
    broken = gpu_policy("one-gpu", TYPO, generation=2)
    broken["status"] = {"observedGeneration": 2, "inForce": {"generation": 1, "spec": ONE_GPU}}
    replay = replay_with([broken], [])
    try:
        server = live_inventory_server(tmp_path, replay.url)
        try:
            assert two_gpus_denied(server)
        finally:
            assert server.stop() == 0
    finally:
        replay.stop()
