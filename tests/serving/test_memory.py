"""The server's memory stays under its container limit under a flood of distinct large pods,
each sent twice (issue 27): the decision memo is bounded in bytes, not in entries alone.

One real gunicorn over TLS, two workers as deployed. Each pod's two copies go over one
kept-alive connection, so both reach the worker that would keep its decision.
"""

from __future__ import annotations

import http.client
import json
import threading

import pytest
import yaml

from tests.builders import INVENTORY, ROOT, RULES, review
from tests.running import Server, rss_kib
from webhook.admission.memo import POD_MEMO_BYTES
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

DEPLOYMENT = ROOT / "deploy" / "base" / "deployment.yaml"
MIB = 1024 * 1024


def container_memory_limit() -> int:
    """The webhook container's memory limit in deploy/base, in bytes."""
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit.removesuffix("Mi")) * MIB


def flood_pod(seed: int, containers: int) -> dict:
    """A pod that can land on a GPU node, of many small containers: the webhook hides the
    GPUs from each, so its patch is many times the pod (about 1.3 MB kept for 55 KB)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"flood-{seed}", "namespace": "default"},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [{"name": f"c{i}-{seed}", "image": "busybox"} for i in range(containers)],
        },
    }


@pytest.fixture
def server(tmp_path):
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    running = Server(tmp=tmp_path, cert_dir=tmp_path, rules=RULES, inventory=INVENTORY)
    running.wait_for_fresh_workers(set(), 2)
    yield running
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()


def pod_rss(server: Server) -> tuple[int, dict[int, int]]:
    """The master's and each worker's resident memory, in bytes."""
    workers = {pid: rss_kib(pid) * 1024 for pid in server.workers()}
    return rss_kib(server.process.pid) * 1024 + sum(workers.values()), workers


def test_a_flood_of_distinct_large_pods_sent_twice_keeps_the_pod_under_its_memory_limit(
    server,
):
    limit = container_memory_limit()
    before, workers_before = pod_rss(server)
    # Two sizes: 1,500 containers (55 KB, about 2 MB counted: over the per-entry cap, never
    # kept) and 600 (22 KB, about 0.8 MB: kept until the byte bound pushes the oldest out).
    # 260 of each size would have kept 260 x 1.3 MB + 260 x 0.5 MB per pod before.
    bodies = [
        json.dumps(review(flood_pod(seed, 1500 if seed % 2 else 600))).encode()
        for seed in range(520)
    ]
    peak = [before]
    statuses: list[object] = []

    def send(share: list[bytes]) -> None:
        conn = server.connection()
        conn.timeout = 30
        for body in share:
            for _ in range(2):
                try:
                    conn.request(
                        "POST", "/mutate", body=body, headers={"Content-Type": "application/json"}
                    )
                    reply = conn.getresponse()
                    reply.read()
                    statuses.append(reply.status)
                except (OSError, http.client.HTTPException) as error:
                    statuses.append(repr(error))
            peak[0] = max(peak[0], pod_rss(server)[0])

    threads = [threading.Thread(target=send, args=(bodies[n::4],)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)

    peak[0] = max(peak[0], pod_rss(server)[0])
    workers_after = pod_rss(server)[1]
    assert statuses == [200] * (2 * len(bodies))
    assert set(workers_after) == set(workers_before), "a worker was replaced"
    assert peak[0] < limit, f"the pod reached {peak[0] / MIB:.0f} MiB of {limit / MIB:.0f}"
    # Each worker grew by about its share of the memo's bound, not by what it was sent.
    share = POD_MEMO_BYTES // len(workers_after)
    for pid, rss in workers_after.items():
        grown = rss - workers_before[pid]
        assert grown < 2 * share, f"worker {pid} grew {grown / MIB:.0f} MiB"
