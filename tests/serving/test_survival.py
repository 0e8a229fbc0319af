"""The server outlives its own workers: a worker that exits, is killed or times out is
replaced, and the replacement serves the last good rules and inventory even when the files
on disk have been broken since (issue 11, items 1 and 2).

Real gunicorn over TLS on loopback, rules mounted like a ConfigMap.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.builders import INVENTORY, RULES, pod, review
from tests.rulesets import quota
from tests.running import Load, Server, mount, post, wait_until
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

BROKEN_RULE = b"apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nspec: 7\n"
GARBAGE = b"\x00\xff not an inventory \x9c"


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    Server.close_clients()


def start(tmp, *, workers=2):
    """A server whose rules deny pods over one GPU (so the rules in force show in every
    answer), with its rules mounted like a ConfigMap and its own inventory file."""
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    rules = {p.name: p.read_bytes() for p in RULES.glob("*.yaml")}
    rules["95-quota.yaml"] = quota(1).encode()
    mount(tmp / "rules", rules, version="1")
    inventory = tmp / "nodes.yaml"
    inventory.write_bytes(INVENTORY.read_bytes())
    server = Server(
        tmp=tmp, cert_dir=tmp, rules=tmp / "rules", inventory=inventory, workers=workers
    )
    server.wait_for_fresh_workers(set(), workers)
    return server, rules


def break_files(server, tmp, rules):
    mount(tmp / "rules", {**rules, "95-quota.yaml": BROKEN_RULE}, version="2")
    (tmp / "nodes.yaml").write_bytes(GARBAGE)
    wait_until(
        lambda: "new rule files rejected" in server.log.read_text(),
        timeout=20,
        what="the workers rejected the broken rules",
    )


def answers_from_every_worker(server, count=12):
    """Answers to a two-GPU pod, each on a fresh connection (so both workers answer)."""
    answers = []
    for _ in range(count):
        status, body = post(server.connection(), "/mutate", review(pod(gpus=2)))
        answers.append((status, body["response"]["allowed"] if status == 200 else body))
    return answers


def test_a_worker_that_exits_normally_leaves_its_siblings_metrics_files(tmp_path):
    server, _ = start(tmp_path)
    try:
        first = set(server.workers())
        os.kill(min(first), signal.SIGTERM)  # exits through Python's normal path

        server.wait_for_fresh_workers({min(first)}, 2)

        assert answers_from_every_worker(server) == [(200, False)] * 12
        assert server.health("/readyz")[0] == 200
        assert "gpu_webhook_ready" in server.health("/metrics")[1]
        assert "Worker failed to boot" not in server.log.read_text()
    finally:
        assert server.stop() == 0, server.log.read_text()


def _sigkill_worker(server):
    os.kill(server.workers()[0], signal.SIGKILL)
    return 1


def _sigterm_worker(server):
    os.kill(server.workers()[0], signal.SIGTERM)
    return 1


def _sighup_worker(server):
    os.kill(server.workers()[0], signal.SIGHUP)  # a worker does not handle it: it dies
    return 1


def _sighup_master(server):
    server.process.send_signal(signal.SIGHUP)  # gunicorn replaces every worker
    return 2


def _worker_timeout(server):
    # A stopped worker stops its heartbeat: after the 8 s timeout the master kills it.
    os.kill(server.workers()[0], signal.SIGSTOP)
    return 1


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(_sigkill_worker, id="sigkill-worker"),
        pytest.param(_sigterm_worker, id="sigterm-worker"),
        pytest.param(_sighup_worker, id="sighup-worker"),
        pytest.param(_sighup_master, id="sighup-master"),
        pytest.param(_worker_timeout, id="worker-timeout"),
    ],
)
def test_workers_started_while_rules_and_inventory_are_broken_serve_the_last_good_state(
    tmp_path, fault
):
    server, rules = start(tmp_path)
    try:
        break_files(server, tmp_path, rules)
        before = set(server.workers())
        with Load(server, review(pod(gpus=2))) as load:
            time.sleep(0.3)
            replaced = fault(server)
            server.wait_for_fresh_workers(before, 2) if replaced == 2 else wait_until(
                lambda: len(set(server.workers()) - before) == 1 and server.serving_workers() >= 3,
                timeout=40,
                what="a replacement worker accepts connections",
            )
            time.sleep(0.5)

        assert server.process.poll() is None, server.log.read_text()
        assert load.failures == []
        assert len(load.errors) <= 3, load.errors  # at most the requests in flight
        # The last good rules (a one-GPU quota) still decide, in every worker.
        assert answers_from_every_worker(server) == [(200, False)] * 12
        log = server.log.read_text()
        assert "Worker failed to boot" not in log
        assert "inventory file not usable; serving the last good copy" in log
    finally:
        for pid in server.workers():
            os.kill(pid, signal.SIGCONT)
        assert server.stop() == 0, server.log.read_text()


def test_a_killed_master_leaves_no_worker_serving(tmp_path):
    server, _ = start(tmp_path)
    workers = server.workers()

    server.process.kill()  # in a pod the container ends with it and is restarted
    server.process.wait()

    def gone(pid):
        try:
            return (Path("/proc") / str(pid) / "stat").read_text().split(")")[1].split()[0] == "Z"
        except OSError:
            return True

    wait_until(lambda: all(gone(pid) for pid in workers), timeout=20, what="the workers exit")


# --- 6 and 9: rule edits that must never become the policy ------------------------------

# A billion laughs where the schema wants an object: its error message quoted the value.
BOMB = "".join(
    [
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: lol}\n",
        'lols:\n  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"  {n}: &{n} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            for p, n in itertools.pairwise("abcdefghi")
        ),
        "spec: {match: *i}\n",
    ]
)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        pytest.param({"99-lol.yaml": BOMB.encode()}, "99-lol.yaml", id="alias-bomb"),
        pytest.param({}, "holds no rule documents", id="empty-configmap"),
    ],
)
def test_a_rule_edit_that_must_not_become_policy_is_rejected_and_serving_goes_on(
    tmp_path, edit, named
):
    server, rules = start(tmp_path)
    try:
        with Load(server, review(pod(gpus=2))) as load:
            files = {**rules, **edit} if edit else {"README.md": b"an emptied ConfigMap"}
            mount(tmp_path / "rules", files, version="2")
            wait_until(
                lambda: "new rule files rejected" in server.log.read_text(),
                timeout=20,
                what="the edit was rejected",
            )
        assert load.failures == []
        assert load.errors == []
        assert answers_from_every_worker(server, count=4) == [(200, False)] * 4
        assert named in server.log.read_text()
    finally:
        assert server.stop() == 0, server.log.read_text()


# --- 9: SIGTERM under load answers the last request of each connection -------------------


CLIENTS = 24  # more connections than the two workers have threads


def test_sigterm_under_load_answers_every_request_sent_and_resets_none(tmp_path):
    server, _ = start(tmp_path)
    outcomes: list[str] = []
    stop = threading.Event()

    def client():
        conn = server.connection()
        while not stop.is_set():
            try:
                conn.request(
                    "POST",
                    "/mutate",
                    body=json.dumps(review(pod(gpus=1))).encode(),
                    headers={"Content-Type": "application/json"},
                )
            except OSError:
                outcomes.append("not sent")  # closed before we wrote: never a lost review
                return
            try:
                reply = conn.getresponse()
                reply.read()
            except (OSError, http.client.HTTPException) as error:
                outcomes.append(f"sent, no answer: {error!r}")
                return
            if reply.getheader("Connection", "").lower() == "close":
                outcomes.append("answered, then closed")
                return

    clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in clients:
        thread.start()
    time.sleep(1.0)
    server.process.send_signal(signal.SIGTERM)
    for thread in clients:
        thread.join(timeout=30)
    stop.set()
    code = server.process.wait(timeout=30)

    assert code == 0
    assert sorted(outcomes) == ["answered, then closed"] * CLIENTS, outcomes
