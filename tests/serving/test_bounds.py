"""The third round's worker killers (issue 35, items 1 to 3) against real gunicorn: huge DRA
claim counts, CEL comprehension bombs and ten million GPUs rendered as ``{gpuIndexes}`` get
their answer (a denial naming the bound, a warning that a selector was not evaluated, the
capacity denial) while normal reviews are answered, no worker dies, and the pod stays under
its container memory limit.

One real gunicorn over TLS, two workers as deployed, with the shipped rules plus a rule that
renders ``{gpuIndexes}``, and the DRA inventory of the golden cases.
"""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.builders import RULES, pod, review
from tests.running import Server, post, rss_kib
from tests.serving.test_memory import MIB, container_memory_limit
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

DRA_INVENTORY = Path(__file__).resolve().parents[1] / "cases" / "_inventories" / "dra.yaml"
INDEXES_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: gpu-indexes
spec:
  order: 40
  mutate:
    env:
      gpuContainers:
      - name: GPU_LIST
        value: '{gpuIndexes}'
"""
TEN = "[0,1,2,3,4,5,6,7,8,9]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("bounds")
    rules = tmp / "rules"
    shutil.copytree(RULES, rules)
    (rules / "40-gpu-indexes.yaml").write_text(INDEXES_RULE)
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    running = Server(tmp=tmp, cert_dir=tmp, rules=rules, inventory=DRA_INVENTORY, workers=2)
    running.wait_for_fresh_workers(set(), 2)
    yield running
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()[-3000:]


def claim(name: str, request: dict[str, Any], *, kind: str = "ResourceClaim") -> dict[str, Any]:
    spec = {"devices": {"requests": [{"name": "gpu", **request}]}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec,
    }


def exactly(count: int, *selectors: str) -> dict[str, Any]:
    chosen = [{"cel": {"expression": e}} for e in selectors]
    return {"exactly": {"deviceClassName": "gpu.nvidia.com", "count": count, "selectors": chosen}}


def long_selectors(seed: int) -> dict[str, Any]:
    def selector(r: int, k: int) -> str:
        terms = (
            f"device.attributes['gpu.nvidia.com'].productName == 'p{seed}-{r}-{k}-{i}'"
            for i in range(70)
        )
        return " || ".join(terms)

    obj = claim(f"long-{seed}", exactly(1))
    obj["spec"]["devices"]["requests"] = [
        {"name": f"r{r}", **exactly(1, *(selector(r, k) for k in range(32)))} for r in range(8)
    ]
    return obj


def extended_pod(resource: str, count: str) -> dict[str, Any]:
    obj = pod(gpus=None, name=f"huge-{resource.rsplit('/', 1)[-1]}")
    obj["spec"]["containers"][0]["resources"] = {"limits": {resource: count}}
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    return obj


class Attack:
    """Sends each body from its own thread and connection, all at once; keeps the answers,
    the normal reviews answered meanwhile, and the pod's peak memory."""

    def __init__(self, server: Server, bodies: list[tuple[str, dict[str, Any]]]) -> None:
        self.server = server
        self.bodies = bodies
        self.answers: dict[int, Any] = {}
        self.normal: list[Any] = []
        self.peak = 0

    def run(self) -> None:
        before = set(self.server.workers())
        threads = [
            threading.Thread(target=self._send, args=(n, path, body))
            for n, (path, body) in enumerate(self.bodies)
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            self._normal_review()
            self.peak = max(self.peak, self._rss())
        for thread in threads:
            thread.join()
        self._normal_review()
        assert set(self.server.workers()) == before, "a worker was replaced"
        limit = container_memory_limit()
        assert self.peak < limit, f"the pod reached {self.peak / MIB:.0f} MiB"

    def _send(self, n: int, path: str, body: dict[str, Any]) -> None:
        conn = self.server.connection()
        conn.timeout = 30
        try:
            status, answer = post(conn, path, review(body))
            self.answers[n] = answer["response"] if status == 200 else (status, answer)
        except (OSError, http.client.HTTPException) as error:
            self.answers[n] = repr(error)
        conn.close()

    def _normal_review(self) -> None:
        conn = self.server.connection()
        conn.timeout = 10
        try:
            status, answer = post(conn, "/mutate", review(pod(gpus=1)))
            self.normal.append(answer["response"]["allowed"] if status == 200 else status)
        except (OSError, http.client.HTTPException) as error:
            self.normal.append(repr(error))
        conn.close()

    def _rss(self) -> int:
        pids = [self.server.process.pid, *self.server.workers()]
        return sum(rss_kib(pid) for pid in pids) * 1024


def messages(response: dict[str, Any]) -> str:
    return json.dumps([response.get("status", {}).get("message", ""), response.get("warnings")])


def test_huge_claim_counts_are_denied_with_their_bound_and_kill_no_worker(server):
    bodies = [
        *[("/validate", claim(f"int32-{n}", exactly(2**31 - 1))) for n in range(6)],
        ("/validate", claim("int64", exactly(2**63 - 1))),
        (
            "/validate",
            claim(
                "first-available",
                {
                    "firstAvailable": [
                        {"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 2**63 - 1},
                        {"name": "b", "deviceClassName": "gpu.nvidia.com", "count": 2**31 - 1},
                    ]
                },
            ),
        ),
        ("/validate", claim("past-int64", exactly(10**20), kind="ResourceClaimTemplate")),
        ("/validate", claim("zero", exactly(0))),
        ("/mutate", extended_pod("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "10000000")),
        ("/mutate", extended_pod("nvidia.com/gpu", "10000000")),
    ]
    attack = Attack(server, bodies)
    attack.run()
    answers = [attack.answers[n] for n in range(len(bodies))]
    assert all(isinstance(a, dict) for a in answers), answers
    assert [a["allowed"] for a in answers] == [False] * len(bodies)
    for answer in answers[:8]:
        assert "at most 32 devices to one claim" in messages(answer)
    assert "spec.spec.devices.requests[0].exactly.count" in messages(answers[8])
    assert "must be greater than zero" in messages(answers[9])
    assert "GPU_LIST not set" in messages(answers[11])
    assert set(attack.normal) == {True}, attack.normal


def test_cel_bombs_are_not_evaluated_and_normal_reviews_go_on(server):
    deep = f"{TEN}.all(a, " * 5 + "a >= 0" + ")" * 5  # refused by its estimate
    # Within the estimate's bound, past one evaluation's: stopped at its step limit.
    wide = f"{TEN}.all(a, " * 3 + "a >= 0" + ")" * 3
    many = [f"{TEN}.all(a, {TEN}.all(b, {TEN}.all(c, a + b + c != {n})))" for n in range(32)]
    bodies = [
        *[("/validate", claim(f"deep-{n}", exactly(1, deep))) for n in range(8)],
        # 256 distinct selectors of 5,000 characters (1.3 MB): parsing them all would take
        # seconds; compiling is charged to the review's budget too.
        *[("/validate", long_selectors(n)) for n in range(2)],
        *[("/validate", claim(f"wide-{n}", exactly(1, wide))) for n in range(4)],
        # 32 selectors, each run to its limit on every device: the review's budget ends it.
        *[("/validate", claim(f"many-{n}", exactly(1, *many))) for n in range(4)],
    ]
    attack = Attack(server, bodies)
    attack.run()
    answers = [attack.answers[n] for n in range(len(bodies))]
    assert all(isinstance(a, dict) for a in answers), answers
    assert [a["allowed"] for a in answers] == [True] * len(bodies)
    for answer in answers:
        assert "device selector not evaluated" in messages(answer), answer
    assert set(attack.normal) == {True}, attack.normal
