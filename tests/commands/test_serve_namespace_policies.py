"""``gpu-webhook serve --kubeconfig`` with a team's GPUNamespacePolicy and GPUPolicyException
objects served by a replayed API server (issue 44): listed and watched across namespaces,
merged after the cluster's policies, their status written under their namespace, a widening
refused at /validate in one line, and every use of an exception in the review's audit
annotations and the exceptions metric."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import RULES, pod, review
from tests.cluster.replayserver import Body, ReplayServer, eventually, fixture
from tests.cluster.ruleobjects import API, event, rule_object, serve_rule_objects
from tests.running import Server, dev_certs, kubeconfig, live_inventory_server, post

pytestmark = pytest.mark.slow
NAMESPACED = f"/apis/{API}/namespaces/default"
ONE_GPU = {"validate": [{"maxGPUsPerPod": 1, "message": "default runs one GPU per pod"}]}
WIDER = {**ONE_GPU, "exempt": ["hideGPUs"]}
LET_P = {"checks": ["default/one-gpu/*"], "workloads": {"names": ["p"]}}


def namespace_policy(spec: dict[str, Any], *, generation: int = 1) -> dict[str, Any]:
    return rule_object(
        "GPUNamespacePolicy", "one-gpu", spec, namespace="default", generation=generation
    )


def exception(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return rule_object("GPUPolicyException", name, spec, namespace="default")


def replay_with(
    items: dict[str, list[dict[str, Any]]], events: dict[str, list[bytes | threading.Event]]
) -> ReplayServer:
    replay = ReplayServer().start()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    serve_rule_objects(replay, items, events)
    return replay


def answer(server: Server, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    status, body = post(server.connection(), path, review(obj))
    assert status == 200
    response: dict[str, Any] = body["response"]
    return response


def two_gpus(server: Server) -> set[bool]:
    """Asked of both workers (fresh connections), which reload each on its own tick."""
    return {answer(server, "/mutate", pod(gpus=2))["allowed"] for _ in range(4)}


def status_of(replay: ReplayServer, resource: str, name: str) -> list[dict[str, Any]]:
    writes = replay.written(f"{NAMESPACED}/{resource}/{name}/status")
    return [w.body for w in writes]


def ready(body: dict[str, Any]) -> tuple[str, str, str]:
    condition = body["status"]["conditions"][0]
    return condition["status"], condition["reason"], condition["message"]


@pytest.fixture
def step() -> Iterator[threading.Event]:
    event_ = threading.Event()
    yield event_
    event_.set()


def test_a_namespace_policy_is_enforced_in_its_namespace_and_kept_while_a_widening_is_stored(
    tmp_path: Path, step: threading.Event
) -> None:
    replay = replay_with(
        {"GPUNamespacePolicy": [namespace_policy(ONE_GPU)]},
        {"GPUNamespacePolicy": [step, event("MODIFIED", namespace_policy(WIDER, generation=2))]},
    )
    server = live_inventory_server(tmp_path, replay.url)
    try:
        assert two_gpus(server) == {False}
        denied = answer(server, "/mutate", pod(gpus=2))
        assert "[default/one-gpu/maxGPUsPerPod]" in denied["status"]["message"]
        other = {**pod(gpus=2), "metadata": {"name": "p", "namespace": "team-b"}}
        assert answer(server, "/mutate", other)["allowed"] is True

        first = eventually(lambda: status_of(replay, "gpunamespacepolicies", "one-gpu"), timeout=30)
        assert ready(first[0]) == ("True", "InForce", "in force")
        assert first[0]["status"]["checks"] == "maxGPUsPerPod"
        assert first[0]["metadata"] == {
            "name": "one-gpu",
            "namespace": "default",
            "resourceVersion": "10",
        }

        refused = answer(server, "/validate", namespace_policy(WIDER, generation=2))
        assert refused["allowed"] is False
        assert refused["status"]["message"] == (
            "GPUNamespacePolicy default/one-gpu: spec.exempt: a GPUNamespacePolicy cannot "
            "exempt checks: ask for a GPUPolicyException"
        )

        step.set()  # stored anyway (the webhook was down)
        widened = eventually(
            lambda: [
                body
                for body in status_of(replay, "gpunamespacepolicies", "one-gpu")
                if body["status"]["observedGeneration"] == 2
            ],
            timeout=30,
        )[0]
        status, reason, message = ready(widened)
        assert (status, reason) == ("False", "Invalid")
        assert message.endswith("(generation 1 stays in force)")
        assert two_gpus(server) == {False}, "the last good version stays in force"
    finally:
        assert server.stop() == 0, server.log.read_text()
        replay.stop()


def test_an_exception_outside_the_allowed_namespaces_is_refused_and_never_applies(
    tmp_path: Path,
) -> None:
    replay = replay_with(
        {
            "GPUNamespacePolicy": [namespace_policy(ONE_GPU)],
            "GPUPolicyException": [exception("let-p", LET_P)],
        },
        {},
    )
    server = live_inventory_server(tmp_path, replay.url)
    try:
        assert two_gpus(server) == {False}
        refused = answer(server, "/validate", exception("let-p", LET_P))
        assert refused["status"]["message"] == (
            "GPUPolicyException default/let-p: metadata.namespace: exceptions are not allowed "
            "in namespace default: GPUSettings.exceptionNamespaces must name it"
        )
        written = eventually(lambda: status_of(replay, "gpupolicyexceptions", "let-p"), timeout=30)
        assert ready(written[0])[:2] == ("False", "Invalid")
    finally:
        assert server.stop() == 0, server.log.read_text()
        replay.stop()


def allowing_exceptions(tmp_path: Path) -> Path:
    """The shipped rules, with exceptions allowed in namespace default."""
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    settings = yaml.safe_load((rules / "00-settings.yaml").read_text())
    settings["spec"]["exceptionNamespaces"] = ["default"]
    (rules / "00-settings.yaml").write_text(yaml.safe_dump(settings))
    return rules


def test_an_allowed_exception_waives_its_checks_is_audited_and_counted_until_it_expires(
    tmp_path: Path,
) -> None:
    expired = {**LET_P, "workloads": {"names": ["q"]}, "expires": "2020-01-01T00:00:00Z"}
    replay = replay_with(
        {
            "GPUNamespacePolicy": [namespace_policy(ONE_GPU)],
            "GPUPolicyException": [exception("let-p", LET_P), exception("let-q", expired)],
        },
        {},
    )
    server = Server(
        tmp=tmp_path,
        cert_dir=dev_certs(tmp_path / "certs"),
        rules=allowing_exceptions(tmp_path),
        inventory=None,
        workers=2,
        extra=("--kubeconfig", kubeconfig(tmp_path, replay.url)),
    )
    try:
        eventually(lambda: answer(server, "/validate", pod(gpus=2))["allowed"], timeout=30)
        allowed = answer(server, "/validate", pod(gpus=2))
        assert allowed["auditAnnotations"] == {
            "exception.default-let-p": "GPUPolicyException default/let-p waived "
            "default/one-gpu/maxGPUsPerPod (deny)"
        }
        assert answer(server, "/validate", pod(gpus=2, name="q"))["allowed"] is False

        let_q = eventually(lambda: status_of(replay, "gpupolicyexceptions", "let-q"), timeout=30)
        assert ready(let_q[0]) == (
            "False",
            "Expired",
            "expired at 2020-01-01T00:00:00+00:00: it waives nothing any more",
        )
        let_p = eventually(lambda: status_of(replay, "gpupolicyexceptions", "let-p"), timeout=30)
        assert ready(let_p[0])[:2] == ("True", "InForce")
        counted = (
            'gpu_webhook_policy_exceptions_applied_total{exception="let-p",namespace="default"}'
        )
        eventually(lambda: counted in server.health("/metrics")[1], timeout=30)
    finally:
        assert server.stop() == 0, server.log.read_text()
        replay.stop()
