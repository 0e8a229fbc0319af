"""Pod-level resources and in-place resizes through real gunicorn over TLS, two workers as
deployed, under the deployment's memory limit (issue 35): the memoryLimit rule keeps its
limits within a pod's own ``spec.resources``, 900Ti of pod-level memory is judged against
the nodes, and ``pods/resize`` (the whole Pod, old and new, as kube-apiserver sends it for
the subresource: KEP-1287) is judged against the rule, while ordinary reviews keep being
answered by the same workers."""

from __future__ import annotations

import copy

import pytest

from tests.builders import INVENTORY, patched, pod, review
from tests.rulesets import memory_limit, rules_dir
from tests.running import Server, post, reviews_answered
from tests.serving.test_memory import container_memory_limit, pod_rss
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

MEMORY_RULE = memory_limit("64Gi")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("podapis")
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    rules = rules_dir(tmp, MEMORY_RULE)
    running = Server(tmp=tmp, cert_dir=tmp, rules=rules, inventory=INVENTORY)
    running.wait_for_fresh_workers(set(), 2)
    yield running
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()


def with_pod_level(obj: dict, **resources: dict) -> dict:
    out = copy.deepcopy(obj)
    out["spec"]["resources"] = resources
    return out


def memory_limit_of(obj: dict) -> str | None:
    return obj["spec"]["containers"][0]["resources"].get("limits", {}).get("memory")


def resized(obj: dict, memory: str | None) -> dict:
    out = copy.deepcopy(obj)
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    if memory is None:
        limits.pop("memory")
    else:
        limits["memory"] = memory
    return out


def test_pod_level_resources_and_resizes_are_judged_by_the_same_workers_under_the_limit(server):
    workers = set(server.workers())
    conn = server.connection()

    # A pod-level limit below the rule's 64Gi: the container's limit is lowered to it.
    small = with_pod_level(pod(gpus=1), requests={"memory": "16Gi"}, limits={"memory": "16Gi"})
    status, body = post(conn, "/mutate", review(small))
    assert status == 200
    assert body["response"]["allowed"] is True
    created = patched(copy.deepcopy(small), body["response"])
    assert memory_limit_of(created) == "16Gi"

    # Two GPU containers whose 64Gi each the pod-level request cannot hold: left out.
    two = pod(gpus=1)
    two["spec"]["containers"].append(copy.deepcopy(two["spec"]["containers"][0]) | {"name": "b"})
    both = with_pod_level(two, limits={"memory": "64Gi"})
    status, body = post(conn, "/mutate", review(both))
    assert status == 200
    assert body["response"]["allowed"] is True
    assert "memoryLimit" in " ".join(body["response"]["warnings"])
    for container in patched(copy.deepcopy(both), body["response"])["spec"]["containers"]:
        assert "memory" not in container["resources"]["limits"]

    # 900Ti of pod-level memory fits no node: the scheduler reads it in place of the sum.
    huge = with_pod_level(pod(gpus=1), requests={"memory": "900Ti"}, limits={"memory": "900Ti"})
    status, body = post(conn, "/validate", review(huge))
    assert status == 200
    assert body["response"]["allowed"] is False
    assert "900Ti" in body["response"]["status"]["message"]

    # In-place resizes of the pod created with the rule's 64Gi.
    running = pod(gpus=1)
    status, body = post(conn, "/mutate", review(running))
    running = patched(running, body["response"])
    assert memory_limit_of(running) == "64Gi"
    for memory, allowed in (("256Gi", False), (None, False), ("32Gi", True)):
        update = review(resized(running, memory), operation="UPDATE", old=running)
        update["request"]["subResource"] = update["request"]["requestSubResource"] = "resize"
        status, body = post(conn, "/validate", update)
        assert status == 200, body
        assert body["response"]["allowed"] is allowed, (memory, body["response"])
        if not allowed:
            assert "memoryLimit" in body["response"]["status"]["message"]

    assert reviews_answered(server, count=6, timeout=5) == [200] * 6
    assert set(server.workers()) == workers, "a worker was replaced"
    total, _ = pod_rss(server)
    assert total < container_memory_limit()
