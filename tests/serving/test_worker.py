"""Connections are spread across gunicorn workers by how many each holds."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from tests.builders import INVENTORY, RULES, pod, review
from tests.running import Server, post, workers_of
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.serving import worker
from webhook.serving.worker import FREE, BalancedThreadWorker, ConnectionTable


def test_a_slot_is_one_no_live_worker_holds():
    table = ConnectionTable(slots=4)

    assert table.claim(taken=[0, 1, 3]) == 2
    assert table.claim(taken=[0, 1, 2, 3]) == FREE


@pytest.mark.parametrize(
    ("counts", "slot", "fewest"),
    [
        pytest.param({0: 5, 1: 3}, 0, 3, id="the-sibling"),
        pytest.param({0: 5, 1: 3, 2: 7}, 1, 5, id="the-fewest-of-several"),
        pytest.param({0: 5}, 0, None, id="alone"),
        pytest.param({0: 5, 1: 3}, FREE, 3, id="a-worker-without-a-slot"),
    ],
)
def test_a_worker_sees_the_fewest_connections_a_live_sibling_holds(counts, slot, fewest):
    table = ConnectionTable(slots=4)
    for claimed, held in counts.items():
        table.publish(table.claim(taken=range(claimed)), held)

    assert table.fewest_elsewhere(slot) == fewest


def test_a_worker_still_loading_its_app_is_not_a_sibling_yet():
    table = ConnectionTable(slots=4)
    table.publish(table.claim(taken=[]), 3)

    table.claim(taken=[0])

    assert table.fewest_elsewhere(0) is None


def test_a_released_slot_no_longer_counts_as_a_sibling():
    table = ConnectionTable(slots=4)
    table.publish(table.claim(taken=[]), 1)
    table.publish(table.claim(taken=[0]), 0)

    table.release(1)

    assert table.fewest_elsewhere(0) is None


# The child only writes to shared memory and exits: no lock of another thread is involved.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_what_a_forked_worker_publishes_its_master_sees():
    table = ConnectionTable(slots=4)
    slot = table.claim(taken=[])
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        table.publish(slot, 7)
        os._exit(0)
    os.waitpid(pid, 0)

    assert table.fewest_elsewhere(FREE) == 7


@pytest.fixture
def make_worker():
    made = []

    def make(table: ConnectionTable, slot: int, held: int) -> BalancedThreadWorker:
        cfg = Config()
        one = BalancedThreadWorker(0, os.getpid(), [], None, 30, cfg, Logger(cfg))
        one.table, one.slot = table, slot
        one._serving = True
        one.nr_conns = held
        made.append(one)
        return one

    yield make
    for one in made:
        one.tmp.close()  # the heartbeat file gunicorn gives every worker


@pytest.mark.parametrize(
    ("mine", "sibling", "defers"),
    [
        pytest.param(4, 3, True, id="more-than-the-sibling-steps-back"),
        pytest.param(3, 3, False, id="as-many-accepts"),
        pytest.param(2, 3, False, id="fewer-accepts"),
    ],
)
def test_a_worker_steps_back_only_when_a_sibling_holds_fewer(make_worker, mine, sibling, defers):
    table = ConnectionTable(slots=2)
    table.publish(table.claim(taken=[]), 0)
    table.publish(table.claim(taken=[0]), sibling)

    assert make_worker(table, 0, mine)._should_defer(100.0) is defers


def test_a_connection_nobody_else_takes_is_accepted_after_the_longest_wait(make_worker):
    table = ConnectionTable(slots=2)
    table.publish(table.claim(taken=[]), 0)
    table.publish(table.claim(taken=[0]), 0)
    busy = make_worker(table, 0, 5)
    start = 100.0
    waits = []
    now = start
    while now - start < 2 * worker.MAX_DEFER_SECONDS:
        waits.append(busy._should_defer(now))
        now += worker.RECHECK_SECONDS

    assert waits[0] is True
    assert waits[-1] is False
    steps = worker.MAX_DEFER_SECONDS / worker.RECHECK_SECONDS
    assert sum(waits) == pytest.approx(steps, abs=1)


def test_a_new_wait_long_after_the_last_one_starts_its_own_clock(make_worker):
    table = ConnectionTable(slots=2)
    table.publish(table.claim(taken=[]), 0)
    table.publish(table.claim(taken=[0]), 0)
    busy = make_worker(table, 0, 5)
    busy._should_defer(100.0)

    assert busy._should_defer(100.0 + 10 * worker.MAX_DEFER_SECONDS) is True


def _established_by_process(port: int, pids: list[int]) -> dict[int, int]:
    """Connections each process holds to ``port``, from /proc (what ``ss -tp`` reads)."""
    local = f":{port:04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(local) and fields[3] == "01":  # 01: ESTABLISHED
                inodes.add(fields[9])
    held = {}
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        links = [os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()]
        held[pid] = sum(1 for link in links if link[8:-1] in inodes and link.startswith("socket:"))
    return held


def _wait_for_workers_serving(server: Server, count: int, timeout: float = 20.0) -> None:
    """Until ``count`` workers have loaded the app: one still loading accepts nothing."""
    deadline = time.monotonic() + timeout
    while server.log.read_text().count("is accepting connections") < count:
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.05)


@pytest.mark.slow
def test_connections_opened_together_are_spread_evenly_over_the_workers(tmp_path):
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    server = Server(tmp=tmp_path, cert_dir=tmp_path, rules=RULES, inventory=INVENTORY, workers=2)
    try:
        _wait_for_workers_serving(server, 2)
        body = review(pod(gpus=1))
        connections = [server.connection() for _ in range(12)]
        replies = []

        def open_and_ask(conn):
            replies.append(post(conn, "/validate", body)[0])

        threads = [threading.Thread(target=open_and_ask, args=(c,)) for c in connections]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        held = _established_by_process(server.port, workers_of(server.process.pid))
    finally:
        Server.close_clients()
        assert server.stop() == 0

    assert replies == [200] * 12
    assert sum(held.values()) == 12, held
    assert max(held.values()) - min(held.values()) <= 2, held


HEAD = b"POST /mutate HTTP/1.1\r\nHost: x\r\n"


@pytest.mark.parametrize(
    ("data", "end"),
    [
        pytest.param(HEAD, None, id="head-unfinished"),
        pytest.param(HEAD + b"\r\n", len(HEAD) + 2, id="no-body"),
        pytest.param(HEAD + b"Content-Length: 4\r\n\r\n{}", None, id="body-unfinished"),
        pytest.param(HEAD + b"Content-Length: 2\r\n\r\n{}", len(HEAD) + 23, id="body-whole"),
        pytest.param(
            HEAD + b"content-length:2\r\n\r\n{}GET / HTTP/1.1", len(HEAD) + 22, id="pipelined"
        ),
        pytest.param(
            HEAD + b"Content-Length: 99999999999\r\n\r\n", len(HEAD) + 31, id="over-the-cap"
        ),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n", None, id="chunks-unfinished"
        ),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            len(HEAD) + 42,
            id="chunks-whole",
        ),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", len(HEAD) + 32, id="chunks-broken"
        ),
        pytest.param(
            b"x" * (worker.MAX_HEAD_BYTES + 1), worker.MAX_HEAD_BYTES + 1, id="head-too-long"
        ),
    ],
)
def test_a_request_is_handed_to_a_thread_only_once_it_is_all_there(data, end):
    head = worker.request_head(data)

    assert (None if head is None else worker.request_end(data, head)) == end
