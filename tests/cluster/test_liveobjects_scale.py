"""A ``scale`` review (issue 41) reads the workload it scales from the API server, here a
loopback server replaying it: the parent answers a GET at the version the review names,
and the service judges the new count against it; a parent the server cannot give (404,
403, an answer later than the review's budget) leaves the scale allowed, with a warning
that names what could not be read."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import scale_review
from tests.cluster.replayserver import Body, ReplayServer, status_body
from tests.scaling import LIMIT, NAMESPACE, deployment, gpu_template, pytorchjob
from webhook.admission.lookups import LOOKUP_BUDGET_SECONDS
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.cluster.apiclient import ApiEndpoint
from webhook.cluster.liveobjects import LiveObjects, workload_path
from webhook.engine.evaluation.request import Resource
from webhook.files.rulefiles import RuleStore


def path_of(obj: dict[str, Any], resource: str) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    return workload_path(Resource(group, version, resource, obj["metadata"]["name"]), NAMESPACE)


def on_api_server(replay: ReplayServer, obj: dict[str, Any], resource: str) -> str:
    path = path_of(obj, resource)
    replay.routes[path] = deque([Body(json.dumps(obj).encode())])
    return path


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.fixture
def service(tmp_path: Path, replay: ReplayServer) -> Iterator[AdmissionService]:
    (tmp_path / "limit.yaml").write_text(LIMIT)
    reader = LiveObjects(ApiEndpoint(host=replay.url))
    yield AdmissionService(rules=RuleStore(str(tmp_path)), cluster=reader)
    reader.close()


def answer(service: AdmissionService, body: dict[str, Any]) -> dict[str, Any]:
    outcome = service.review(parse_review(json.dumps(body)), mutate=False)
    response: dict[str, Any] = outcome.body["response"]
    return response


def gets(replay: ReplayServer, path: str) -> int:
    return sum(1 for r in replay.requests if r.path == path)


@pytest.mark.parametrize(
    ("replicas", "allowed"),
    [pytest.param(8, True, id="to-64-gpus-allowed"), pytest.param(9, False, id="to-72-denied")],
)
def test_a_deployment_scale_is_judged_on_the_deployment_read_from_the_api_server(
    service: AdmissionService, replay: ReplayServer, replicas: int, allowed: bool
) -> None:
    parent = deployment("serve")
    path = on_api_server(replay, parent, "deployments")

    response = answer(
        service, scale_review(parent, replicas, old_replicas=1, resource="deployments")
    )

    assert response["allowed"] is allowed, response
    assert gets(replay, path) == 1
    assert path == "/apis/apps/v1/namespaces/team-a/deployments/serve"
    if not allowed:
        message = response["status"]["message"]
        assert "[team-quotas/maxGPUsPerWorkload]" in message
        assert "Deployment team-a/serve scaled to 9 replicas (spec.replicas)" in message
        assert "request 72 GPUs" in message


def test_an_elastic_pytorchjob_scaled_past_its_maximum_is_judged_on_its_worker_replicas(
    service: AdmissionService, replay: ReplayServer
) -> None:
    parent = pytorchjob("elastic", most=4)  # 32 GPUs counted at creation
    on_api_server(replay, parent, "pytorchjobs")

    response = answer(
        service,
        scale_review(
            parent,
            16,
            old_replicas=1,
            resource="pytorchjobs",
            selector="training.kubeflow.org/job-name=elastic",
        ),
    )

    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "scaled to 16 replicas (spec.pytorchReplicaSpecs.Worker.replicas)" in message
    assert "request 128 GPUs" in message


@pytest.mark.parametrize(
    ("answer_body", "says"),
    [
        pytest.param(
            Body(status_body(404, "NotFound", 'deployments.apps "gone" not found'), 404),
            "deployments.apps team-a/gone was not found",
            id="not-found",
        ),
        pytest.param(
            Body(status_body(403, "Forbidden", "cannot get resource deployments"), 403),
            "reading deployments.apps team-a/gone was forbidden (the webhook's ClusterRole "
            "needs get on deployments)",
            id="forbidden",
        ),
        pytest.param(
            Body(json.dumps(deployment("gone")).encode(), delay_seconds=LOOKUP_BUDGET_SECONDS + 2),
            "deployments.apps team-a/gone could not be read",
            id="later-than-the-budget",
        ),
    ],
)
def test_a_scale_whose_parent_the_api_server_does_not_give_is_allowed_with_a_warning(
    service: AdmissionService, replay: ReplayServer, answer_body: Body, says: str
) -> None:
    parent = deployment("gone")
    replay.routes[path_of(parent, "deployments")] = deque([answer_body])

    response = answer(service, scale_review(parent, 100, old_replicas=1, resource="deployments"))

    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert "did not judge this scale of Deployment team-a/gone to 100 replicas" in warning
    assert says in warning


def test_a_scale_is_never_answered_from_the_memo_of_another_object_s_scale(
    service: AdmissionService, replay: ReplayServer
) -> None:
    """Two Scales equal but for their names ask about two different workloads."""
    small, large = deployment("small"), deployment("large")
    large["spec"]["template"] = gpu_template(16)
    on_api_server(replay, small, "deployments")
    on_api_server(replay, large, "deployments")

    first = answer(service, scale_review(small, 5, old_replicas=1, resource="deployments"))
    second = answer(service, scale_review(large, 5, old_replicas=1, resource="deployments"))

    assert (first["allowed"], second["allowed"]) == (True, False)
