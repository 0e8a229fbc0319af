"""A bounded soak of the second round's attacks (issue 27, item 6): valid reviews, CREATE and
UPDATE, among resets before TLS, TLS garbage and alerts, half-open and cut connections, slow
readers of large answers and a flood of distinct 50 KB pods each sent twice. 45 s of attacks
(about 110 s in all) by default; ``GPU_WEBHOOK_SOAK_SECONDS=3600`` for a long one.

Asserts, as the soak of the first round does: no 5xx; the master never exits; every valid
review answered within ``ANSWER_WITHIN``; after a quiet spell, RSS and descriptors within
margins of where they were after the warm-up. And: no worker ever exits (the same pids from
start to end), every slow reader is cut, no valid connection is lost, and every valid
review, during the attacks and after them, gets the answer a quiet server gave it.

The flood sends ever-new pods, each twice, from the warm-up on: the decision memo is bounded
in bytes (``webhook/admission/memo.py``) and full before the baseline is taken.

Measured, not asserted: the pod's processes together (master and workers, by their
proportional set size, PSS, as the container's memory cgroup counts forked pages) peaked at
about 372 MiB against the container limit of 384 Mi (deploy/base/deployment.yaml), 414 MiB
before pods over 256 KiB were read one at a time per worker (each of the slow readers'
731 KiB pods peaks at 65 MiB in the engine). Too close to the limit to assert.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import threading
import time

import pytest

from tests.builders import INVENTORY, RULES, deployment, pod, review
from tests.running import Server, footprint, post
from tests.serving.test_attacks import (
    TALL,
    eof_mid_body,
    garbage_for_a_client_hello,
    half_open_after_the_handshake,
    request,
    reset_before_tls,
    reset_during_the_handshake,
    reset_while_the_answer_is_written,
    slow_reader,
    tls_alert_for_a_client_hello,
    wide_pod,
)
from tests.serving.test_soak import FD_MARGIN, MASTER_RSS_MARGIN, QUIET, WORKER_RSS_MARGIN
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.serving.worker.reading import ANSWER_SECONDS

# Serial: it asserts answers within ANSWER_WITHIN while it loads the machine itself.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SECONDS = float(os.environ.get("GPU_WEBHOOK_SOAK_SECONDS", "45"))
# The first round's soak allows 1 s. Here the slow readers' own reviews are 750 KB pods whose
# evaluation holds a worker's interpreter lock for about half a second, and a valid review
# may queue behind one on a loaded machine: 1.13 s was seen at a load average of 12.
ANSWER_WITHIN = 5.0
# The first round's 30 MiB, plus what one of the slow readers' reviews takes at its peak
# (65 MiB, tracemalloc): Python keeps the arenas of the largest review a worker has held, and
# which worker held one during the warm-up and which during the soak is the balancer's call.
LARGE_REVIEW_KIB = 65 * 1024
SLOW_READERS = 4


def answer_of(body):
    """The decision part of an answer: everything but the uid."""
    response = dict(body["response"])
    response.pop("uid")
    return response


def probes():
    """Valid reviews whose answers are compared with a quiet server's: CREATEs allowed,
    patched and denied, UPDATEs of a pod and of workloads, a pod whose patch is over the
    limit."""
    tolerating = pod(gpus=None, name="cpu")
    tolerating["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    small = deployment(pod(gpus=1), replicas=1)
    scaled = deployment(pod(gpus=8), replicas=100)
    bodies = [
        review(pod(gpus=1)),
        review(pod(gpus=2)),
        review(pod(gpus=8)),
        review(pod(gpus=1, requests_only=True)),
        review(pod(gpus="500m")),
        review(tolerating),
        review(small),
        review(scaled, operation="UPDATE", old=small),
        review(tolerating, operation="UPDATE", old=pod(gpus=None, name="cpu")),
        review(wide_pod(29_000)),
    ]
    return [json.dumps(body).encode() for body in bodies]


def flood_pod(index):
    """A distinct pod of about 50 KB (the memo keeps objects up to 64 KiB)."""
    obj = pod(gpus=1, name=f"flood-{index}")
    obj["metadata"]["annotations"] = {"filler": f"{index:06d}" + "x" * 50_000}
    return json.dumps(review(obj)).encode()


class AttackSoak:
    def __init__(self, server, probes):
        self.server = server
        self.probes = probes
        self.quiet: list[dict] = []
        self.stop = threading.Event()
        self.hostile = threading.Event()
        self.lock = threading.Lock()
        self.valid = 0
        self.slow: list[float] = []
        self.worst = 0.0  # the slowest valid answer, printed for scripts/test's log
        self.lost: list[str] = []
        self.differ: list[str] = []
        self.statuses: dict[int, int] = {}
        self.attacks = 0
        self.cut_readers = 0

    def count(self, status):
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def answers(self):
        conn = self.server.connection()
        conn.timeout = 60
        return [answer_of(post(conn, "/mutate", body)[1]) for body in self.probes]

    # --- valid traffic: every answer is the quiet server's ---------------------------------

    def valid_client(self, seed):
        rng = random.Random(seed)
        conn = self.server.connection()
        while not self.stop.is_set():
            # The last probe (a 1.1 MB pod whose patch is over the limit) takes the engine
            # about half a second: it is compared before and after the attacks only.
            index = rng.randrange(len(self.probes) - 1)
            started = time.monotonic()
            try:
                status, body = post(conn, "/mutate", self.probes[index])
            except (OSError, http.client.HTTPException) as error:
                self.lost.append(repr(error))
                conn = self.server.connection()
                continue
            took = time.monotonic() - started
            self.count(status)
            with self.lock:
                self.valid += 1
                self.worst = max(self.worst, took)
                if status != 200 or took > ANSWER_WITHIN:
                    self.slow.append(took if status == 200 else -status)
                if status == 200 and answer_of(body) != self.quiet[index]:
                    self.differ.append(f"probe {index}: {answer_of(body)}"[:300])

    # --- hostile traffic ---------------------------------------------------------------------

    connection_attacks = (
        reset_before_tls,
        reset_before_tls,
        reset_during_the_handshake,
        garbage_for_a_client_hello,
        tls_alert_for_a_client_hello,
        half_open_after_the_handshake,
        eof_mid_body,
        reset_while_the_answer_is_written,
    )

    def connection_attacker(self, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            if not self.hostile.wait(0.1):
                continue
            with contextlib.suppress(OSError):
                rng.choice(self.connection_attacks)(self.server)
            with self.lock:
                self.attacks += 1
            time.sleep(0.02)

    def reader(self):
        body = request(json.dumps(review(TALL)).encode())  # a 3.8 MB answer: over what
        # the kernel's buffers take (tcp_wmem's 4 MB at most, and a 4 KB receive buffer)
        while not self.stop.is_set():
            if not self.hostile.wait(0.1):
                continue
            outcomes: list[tuple[int, float | None]] = []
            slow_reader(self.server, body, outcomes, budget=ANSWER_SECONDS + 10)
            with self.lock:
                self.cut_readers += outcomes[0][1] is not None

    def flooder(self):
        """Distinct 50 KB pods, each sent twice (the second sight is what the memo keeps)."""
        conn = self.server.connection()
        index = 0
        while not self.stop.is_set():
            if not self.hostile.wait(0.1):
                continue
            body = flood_pod(index)
            index += 1
            for _ in range(2):
                try:
                    status, _ = post(conn, "/mutate", body)
                except (OSError, http.client.HTTPException) as error:
                    self.lost.append(repr(error))
                    conn = self.server.connection()
                    continue
                self.count(status)
            time.sleep(0.02)


def test_the_second_rounds_attacks_cost_no_worker_and_change_no_decision(tmp_path):
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    server = Server(tmp=tmp_path, cert_dir=tmp_path, rules=RULES, inventory=INVENTORY, workers=2)
    master = server.process.pid
    soak = AttackSoak(server, probes())
    threads = [threading.Thread(target=soak.valid_client, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=soak.connection_attacker, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=soak.reader) for _ in range(SLOW_READERS)]
    threads.append(threading.Thread(target=soak.flooder))
    try:
        server.wait_for_fresh_workers(set(), 2)
        first_workers = set(server.workers())
        soak.quiet = soak.answers()  # a quiet server's answers, before any attack
        for thread in threads:
            thread.start()
        # Warm-up with every kind of traffic (the flood fills the memo), a quiet spell, then
        # the baseline.
        soak.hostile.set()
        time.sleep(15)
        soak.hostile.clear()
        time.sleep(QUIET + ANSWER_SECONDS)
        before = footprint(server)
        soak.hostile.set()
        time.sleep(SECONDS)
        soak.hostile.clear()
        soak.stop.set()
        for thread in threads:
            thread.join(timeout=60)
        time.sleep(QUIET)
        after = footprint(server)
        final = soak.answers()
        last_workers = set(server.workers())
        alive = server.process.poll() is None
    finally:
        soak.stop.set()
        Server.close_clients()
        code = server.stop()

    print(f"worst valid answer {soak.worst:.3f}s of {soak.valid} (limit {ANSWER_WITHIN}s)")
    log = server.log.read_text()
    assert alive, log[-3000:]
    assert server.process.pid == master
    assert code == 0
    assert last_workers == first_workers, "a worker exited"
    assert "exited with code" not in log
    assert "dropped a connection after an error" not in log, "a callback raised"
    assert not [s for s in soak.statuses if s >= 500], soak.statuses
    assert soak.valid > 100
    assert soak.attacks > 100
    assert soak.cut_readers >= SLOW_READERS
    assert soak.lost == []
    assert soak.slow == [], f"valid reviews slower than {ANSWER_WITHIN}s or refused"
    assert soak.differ == [], "an answer under attack differs from the quiet server's"
    assert final == soak.quiet
    (master_rss, master_fds, worker_rss, worker_fds) = before
    assert after[0] <= master_rss + MASTER_RSS_MARGIN, (before, after)
    assert after[1] <= master_fds + FD_MARGIN, (before, after)
    assert max(after[2]) <= max(worker_rss) + WORKER_RSS_MARGIN + LARGE_REVIEW_KIB, (
        before,
        after,
    )
    assert max(after[3]) <= max(worker_fds) + FD_MARGIN, (before, after)
