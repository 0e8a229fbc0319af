"""Claims created a moment before their pod (issue 31) and after it (issue 35), against a
loopback server replaying the API server: the watch feed lists the DRA objects of
``tests/cases/_inventories/dra.yaml``; the claim a review names is on the API server only
(a GET answers it), as when one ``kubectl apply`` creates the claim and its pod together.
The admission service reads it directly, within its budget, and judges with it."""

from __future__ import annotations

import json
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import ROOT, review
from tests.cluster.feeding import live_source
from tests.cluster.replayserver import Body, ReplayServer, eventually, status_body
from tests.cluster.test_devicesource import DRA_FILE, NAMESPACE_LIST, RESOURCES, list_body
from webhook.admission.lookups import LOOKUP_BUDGET_SECONDS
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.cluster.liveobjects import LiveObjects, object_path
from webhook.cluster.sources.inventorysource import ApiEndpoint, LiveInventorySource
from webhook.engine.evaluation.references import RESOURCE_CLAIM, Reference
from webhook.files.rulefiles import RuleStore

NODES = [i for i in yaml.safe_load(DRA_FILE.read_text())["items"] if i["kind"] == "Node"]
NODE_LIST = json.dumps(
    {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": NODES}
).encode()
PODS = "/api/v1/namespaces/default/pods"


def claim(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
    }


def claim_pod(*claims: str, name: str = "trainer") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"claims": [{"name": c} for c in claims]},
                }
            ],
        },
    }


def on_api_server(replay: ReplayServer, obj: dict[str, Any], *, delay: float = 0.0) -> str:
    """``obj`` answers its GET (and is in no list or watch): created a moment ago."""
    ref = Reference(str(obj["kind"]), obj["metadata"]["namespace"], obj["metadata"]["name"])
    path = object_path(ref)
    replay.routes[path] = deque([Body(json.dumps(obj).encode(), delay_seconds=delay)])
    return path


def not_found(replay: ReplayServer, ref: Reference) -> str:
    path = object_path(ref)
    body = status_body(404, "NotFound", f'resourceclaims "{ref.name}" not found')
    replay.routes[path] = deque([Body(body, 404)])
    return path


def dra_replay() -> ReplayServer:
    """A started API server whose lists hold the nodes and DRA objects of ``DRA_FILE``."""
    server = ReplayServer()
    server.dra_served = True
    server.lists.append(Body(NODE_LIST))
    server.namespace_lists.append(Body(NAMESPACE_LIST))
    for kind, resource in RESOURCES.items():
        server.dra_lists[resource] = deque([Body(list_body(kind))])
    return server.start()


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    server = dra_replay()
    yield server
    server.stop()


@pytest.fixture
def live(replay: ReplayServer) -> Iterator[LiveInventorySource]:
    source = live_source(replay)
    source.start()
    eventually(source.ready, timeout=10)
    yield source
    source.stop()


@pytest.fixture
def readers() -> Iterator[list[LiveObjects]]:
    made: list[LiveObjects] = []
    yield made
    for reader in made:
        reader.close()


@pytest.fixture
def service_for(
    replay: ReplayServer, live: LiveInventorySource, readers: list[LiveObjects]
) -> Callable[[Path], AdmissionService]:
    def make(rules: Path) -> AdmissionService:
        readers.append(LiveObjects(ApiEndpoint(host=replay.url)))
        return AdmissionService(rules=RuleStore(str(rules)), inventory=live, cluster=readers[-1])

    return make


def answer(service: AdmissionService, obj: dict[str, Any]) -> dict[str, Any]:
    outcome = service.review(parse_review(json.dumps(review(obj))), mutate=True)
    response: dict[str, Any] = outcome.body["response"]
    return response


def gets(replay: ReplayServer, path: str) -> int:
    return sum(1 for r in replay.requests if r.path == path)


def test_a_claim_on_the_api_server_but_not_yet_in_the_watch_is_read_and_judged(
    replay: ReplayServer,
    live: LiveInventorySource,
    service_for: Callable[[Path], AdmissionService],
) -> None:
    path = on_api_server(replay, claim("just-created", 20))
    assert ("default", "just-created") not in (live.devices() or {}).claims  # type: ignore[union-attr]

    response = answer(service_for(ROOT / "rules"), claim_pod("just-created"))

    # Read once, and judged: no node has 20 GPUs, which the claim could never get.
    assert gets(replay, path) == 1
    assert response["allowed"] is False
    assert "[builtin/deviceClaims]" in response["status"]["message"]
    assert "not found" not in json.dumps(response.get("warnings") or [])


def test_a_claim_read_that_fits_is_allowed_with_no_missing_claim_warning(
    replay: ReplayServer,
    live: LiveInventorySource,
    service_for: Callable[[Path], AdmissionService],
) -> None:
    on_api_server(replay, claim("just-created", 2))

    response = answer(service_for(ROOT / "rules"), claim_pod("just-created"))

    assert response["allowed"] is True
    assert not any("missingClaim" in w for w in response.get("warnings") or []), response


def test_a_claim_the_api_server_does_not_have_either_is_warned_as_before(
    replay: ReplayServer,
    live: LiveInventorySource,
    service_for: Callable[[Path], AdmissionService],
) -> None:
    path = not_found(replay, Reference(RESOURCE_CLAIM, "default", "never-made"))

    response = answer(service_for(ROOT / "rules"), claim_pod("never-made"))

    assert gets(replay, path) == 1
    assert response["allowed"] is True
    assert any("missingClaim" in w for w in response["warnings"]), response


def test_a_slow_api_server_costs_a_review_its_budget_and_no_more(
    replay: ReplayServer,
    live: LiveInventorySource,
    service_for: Callable[[Path], AdmissionService],
) -> None:
    on_api_server(replay, claim("slow", 12), delay=3 * LOOKUP_BUDGET_SECONDS)
    service = service_for(ROOT / "rules")

    started = time.monotonic()
    response = answer(service, claim_pod("slow"))
    took = time.monotonic() - started

    assert took < LOOKUP_BUDGET_SECONDS + 0.5, took
    assert response["allowed"] is True  # not read in time: warned, as without the read
    assert any("missingClaim" in w for w in response["warnings"]), response


@pytest.fixture
def four_per_pod(tmp_path: Path) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    (rules / "95-four-per-pod.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: four-per-pod}\n"
        "spec:\n  validate:\n  - maxGPUsPerPod: 4\n    action: deny\n"
    )
    return rules


def pods_listed(replay: ReplayServer, *pods: dict[str, Any]) -> None:
    body = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "50"}}
    items = [{k: v for k, v in p.items() if k not in ("apiVersion", "kind")} for p in pods]
    replay.routes[PODS] = deque([Body(json.dumps({**body, "items": items}).encode())])


def test_claims_made_after_their_pod_cannot_take_it_over_its_gpu_limit(
    replay: ReplayServer,
    live: LiveInventorySource,
    four_per_pod: Path,
    service_for: Callable[[Path], AdmissionService],
) -> None:
    """Issue 35: a pod naming three claims that do not exist yet is admitted (with
    warnings: it cannot start until they exist); then each 4-GPU claim is judged against it.
    The first brings it to 4 and is admitted; the second would bring it to 8."""
    service = service_for(four_per_pod)
    pod = claim_pod("part-0", "part-1", "part-2")
    for part in ("part-0", "part-1", "part-2"):
        not_found(replay, Reference(RESOURCE_CLAIM, "default", part))
    admitted = answer(service, pod)
    assert admitted["allowed"] is True
    assert sum("missingClaim" in w for w in admitted["warnings"]) == 3

    pods_listed(replay, pod)
    first = answer(service, claim("part-0", 4))
    assert first["allowed"] is True, first

    on_api_server(replay, claim("part-0", 4))  # created: the watch may not have it yet
    second = answer(service, claim("part-1", 4))
    assert second["allowed"] is False
    message = second["status"]["message"]
    assert "[four-per-pod/maxGPUsPerPod]" in message
    assert "pod trainer, which names this ResourceClaim" in message
    assert gets(replay, PODS) == 2


def test_a_claim_that_keeps_its_pod_within_the_limit_is_admitted(
    replay: ReplayServer,
    live: LiveInventorySource,
    four_per_pod: Path,
    service_for: Callable[[Path], AdmissionService],
) -> None:
    """Must not fire: one 4-GPU claim for a pod that names only it."""
    pods_listed(replay, claim_pod("alone", name="solo"))

    response = answer(service_for(four_per_pod), claim("alone", 4))

    assert response["allowed"] is True, response
    assert gets(replay, PODS) == 1
