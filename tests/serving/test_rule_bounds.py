"""The fourth round's worker killers by policy (issue 41, items 1 and 2) against real
gunicorn: GPUPolicies of thousands of misspelt checks posted to ``/validate``, policies whose
``metadata`` is not a map, and a generated rule file hot-reloaded, while normal reviews go
on. Each policy gets its one-line answer (never a 500), no worker is replaced, normal
reviews are answered within 1 s, the pod stays under its container memory limit, and a
rule file past a bound is rejected once per worker (counted, logged), not linted again at
every poll.

One real gunicorn over TLS, two workers as deployed, the shipped rules in a directory
mounted as a ConfigMap is (``..data`` swapped), and the inventory of the examples.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from tests.builders import INVENTORY, RULES, pod, review
from tests.running import Server, mount, post
from tests.serving.test_bounds import Attack
from tests.serving.test_memory import MIB, container_memory_limit
from webhook.engine.policy.decision import MAX_MESSAGE
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.files.jsonvalues import MAX_ENTRIES, MAX_RULE_BYTES

pytestmark = pytest.mark.slow

API = "gpu-webhook.io/v1alpha1"
SHIPPED = {p.name: p.read_bytes() for p in RULES.glob("*.yaml")}
# The normal review's answer, from a fresh connection (TLS handshake included).
ANSWER_SECONDS = 1.0
RELOAD_SECONDS = 2.0  # the reloader's period (webhook/serving/reloader.py)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("rule-bounds")
    mount(tmp / "rules", SHIPPED, version="1")
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    running = Server(tmp=tmp, cert_dir=tmp, rules=tmp / "rules", inventory=INVENTORY, workers=2)
    running.wait_for_fresh_workers(set(), 2)
    yield running, tmp
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()[-3000:]


class TimedAttack(Attack):
    """``Attack``, with the slowest normal review kept."""

    slowest = 0.0

    def _normal_review(self) -> None:
        started = time.monotonic()
        super()._normal_review()
        self.slowest = max(self.slowest, time.monotonic() - started)

    def check_normal_reviews(self) -> None:
        assert set(self.normal) == {True}, self.normal
        assert self.slowest < ANSWER_SECONDS, f"a normal review took {self.slowest:.2f} s"


def gpu_policy(name: str, spec: Any, *, metadata: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GPUPolicy",
        "metadata": {"name": name, "generation": 1, "uid": f"u-{name}"}
        if metadata is None
        else metadata,
        "spec": spec,
    }


def misspelt(count: int) -> dict[str, Any]:
    """The issue's 62 KiB policy: ``count`` entries of a check that does not exist."""
    return {"validate": [{"maxGPUsPerPood": n} for n in range(count)]}


def message(answer: Any) -> str:
    assert isinstance(answer, dict), answer  # an AdmissionReview response, not an HTTP error
    return str(answer.get("status", {}).get("message", ""))


def test_policies_that_killed_workers_are_refused_in_one_line_and_kill_none(served):
    server, _ = served
    bodies = [
        *[("/validate", gpu_policy(f"misspelt-{n}", misspelt(3000))) for n in range(4)],
        *[("/validate", gpu_policy(f"ones-{n}", {"validate": [1] * 10_000})) for n in range(4)],
        # Within the bounds, the most the lint does: it stops after its 20 problems.
        ("/validate", gpu_policy("misspelt-within", misspelt(MAX_ENTRIES))),
        ("/validate", gpu_policy("metadata-list", misspelt(1), metadata=[1])),
        ("/validate", gpu_policy("metadata-text", misspelt(1), metadata="x")),
        ("/validate", gpu_policy("metadata-number", misspelt(1), metadata=7)),
    ]
    attack = TimedAttack(server, bodies)
    attack.run()
    attack.check_normal_reviews()
    answers = [attack.answers[n] for n in range(len(bodies))]
    said = [message(a) for a in answers]
    assert [a["allowed"] for a in answers] == [False] * len(bodies)
    assert all(len(m) <= MAX_MESSAGE for m in said)
    for text in said[:4]:
        assert "spec.validate: 3,000 entries, more than the 256" in text
    for text in said[4:8]:
        assert "spec.validate: 10,000 entries, more than the 256" in text
    assert said[8].count('unknown check "maxGPUsPerPood"') == 20
    assert "the lint stops after 20 problems" in said[8]
    for text in said[9:]:
        assert "metadata: " in text
        assert "is not a map of fields" in text


def test_a_generated_rule_file_is_rejected_once_and_kills_no_worker(served):
    """The issue's 100 KB generated file killed each new worker as it linted it at boot (14
    OOM kills in 12 s) and was never reported; then a file past a ConfigMap's size."""
    server, tmp = served
    generated = yaml.safe_dump_all(
        [gpu_policy(f"team-{n}", misspelt(1200)) for n in range(4)], sort_keys=False
    )
    assert len(generated) > 100_000
    before = set(server.workers())
    attack = TimedAttack(server, [])
    mount(tmp / "rules", {**SHIPPED, "95-generated.yaml": generated.encode()}, version="2")
    failures = _watch(server, attack, periods=3)
    assert failures == 2.0, "each worker rejects the new files once"
    mount(tmp / "rules", {**SHIPPED, "96-huge.yaml": b"#" * (MAX_RULE_BYTES + 1)}, version="3")
    failures = _watch(server, attack, periods=3)
    assert failures == 4.0, "each worker rejects the new files once"
    assert set(server.workers()) == before, "a worker was replaced"
    attack.check_normal_reviews()
    assert attack.peak < container_memory_limit(), f"the pod reached {attack.peak / MIB:.0f} MiB"
    rejected = [
        json.loads(line)
        for line in server.log.read_text().splitlines()
        if "new rule files rejected" in line
    ]
    assert len(rejected) == 4, rejected
    problems = [" ".join(r["problems"]) for r in rejected]
    assert all(p.count("1,200 entries, more than the 256") == 4 for p in problems[:2])
    assert all("more than 1,024 KiB together" in p for p in problems[2:])
    assert "Traceback" not in server.log.read_text()
    status, answer = post(server.connection(), "/mutate", review(pod(gpus=1)))
    assert (status, answer["response"]["allowed"]) == (200, True)  # the last good rules
    mount(tmp / "rules", SHIPPED, version="4")  # put back for the other tests


def _watch(server: Server, attack: TimedAttack, *, periods: int) -> float:
    """Normal reviews and memory samples for ``periods`` reload periods; then the reload
    failures counted so far."""
    until = time.monotonic() + periods * RELOAD_SECONDS + 0.5
    while time.monotonic() < until:
        attack._normal_review()
        attack.peak = max(attack.peak, attack._rss())
        time.sleep(0.05)
    metrics = server.health("/metrics")[1]
    counted = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith('gpu_webhook_rule_reloads_total{result="failure"}')
    ]
    rejected = [
        line for line in metrics.splitlines() if line.startswith("gpu_webhook_rule_files_rejected ")
    ]
    assert rejected, metrics
    assert float(rejected[0].split()[-1]) == 1, metrics
    return counted[0] if counted else 0.0
