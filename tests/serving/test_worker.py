"""Connections are spread across gunicorn workers by how many each holds."""

from __future__ import annotations

import json
import os
import selectors
import socket
import ssl
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from tests.builders import INVENTORY, RULES, pod, review
from tests.running import Server, post, wait_until, workers_of
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.serving.server import WORKER_TIMEOUT_SECONDS
from webhook.serving.worker import (
    FREE,
    BalancedThreadWorker,
    ConnectionTable,
    answers,
    balanced,
    framing,
    reading,
    threads,
)


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


def test_a_count_below_zero_still_reads_as_a_serving_sibling():
    table = ConnectionTable(slots=4)
    table.publish(table.claim(taken=[]), 3)
    table.publish(table.claim(taken=[0]), -4)

    assert table.fewest_elsewhere(0) == 0


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


def test_a_connection_closed_on_two_paths_is_taken_off_its_worker_once(make_worker):
    table = ConnectionTable(slots=2)
    table.publish(table.claim(taken=[]), 0)
    one = make_worker(table, 0, 0)
    first, second = object(), object()
    one._opened(first)
    one._opened(second)

    one._closed(first)
    one._closed(first)

    assert (one.nr_conns, table.fewest_elsewhere(FREE)) == (1, 1)


def test_a_worker_reads_each_setting_once_and_as_its_config_says(make_worker):
    one = make_worker(ConnectionTable(slots=2), 0, 0)
    real = one.cfg._cfg

    assert (one.cfg.keepalive, one.cfg.is_ssl) == (real.keepalive, real.is_ssl)
    assert "keepalive" in vars(one.cfg)  # the second read does not go through Config


def test_the_heartbeat_is_touched_once_per_interval_not_on_every_turn_of_the_loop(make_worker):
    one = make_worker(ConnectionTable(slots=2), 0, 0)
    touches = []
    one.tmp.notify = lambda: touches.append(time.monotonic())

    for _ in range(100):
        one.notify()
    one._next_notify = 0.0  # the interval has passed
    one.notify()

    assert len(touches) == 2
    assert reading.NOTIFY_SECONDS * 4 <= WORKER_TIMEOUT_SECONDS  # the master's, well within


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
    while now - start < 2 * balanced.MAX_DEFER_SECONDS:
        waits.append(busy._should_defer(now))
        now += balanced.RECHECK_SECONDS

    assert waits[0] is True
    assert waits[-1] is False
    steps = balanced.MAX_DEFER_SECONDS / balanced.RECHECK_SECONDS
    assert sum(waits) == pytest.approx(steps, abs=1)


def test_a_new_wait_long_after_the_last_one_starts_its_own_clock(make_worker):
    table = ConnectionTable(slots=2)
    table.publish(table.claim(taken=[]), 0)
    table.publish(table.claim(taken=[0]), 0)
    busy = make_worker(table, 0, 5)
    busy._should_defer(100.0)

    assert busy._should_defer(100.0 + 10 * balanced.MAX_DEFER_SECONDS) is True


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
        links = [_link(fd) for fd in fds.iterdir()]
        held[pid] = sum(1 for link in links if link[8:-1] in inodes and link.startswith("socket:"))
    return held


def _link(fd: Path) -> str:
    """Where a descriptor points; "" for one the worker closed since it was listed."""
    try:
        return os.readlink(fd)
    except FileNotFoundError:
        return ""


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


def _open_together_and_ask(server: Server, count: int, body: bytes) -> list[Any]:
    """``count`` connections that connect at the same instant (as ``wrk`` opens its
    connections) and are each answered once."""
    connections = [server.connection() for _ in range(count)]
    together = threading.Barrier(count)
    statuses = []

    def connect_and_ask(conn: Any) -> None:
        together.wait(timeout=30)
        conn.connect()
        statuses.append(post(conn, "/validate", body)[0])

    threads = [threading.Thread(target=connect_and_ask, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * count
    return connections


def _close_in_the_middle_of_a_request(conn: Any, body: bytes) -> None:
    """What a load generator does when its time is up: the request is sent, the answer is
    never read, and the connection ends with a reset (SO_LINGER 0)."""
    conn.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


@pytest.mark.slow
def test_groups_of_connections_opened_and_closed_in_turn_are_each_spread_evenly(tmp_path):
    """Each group arrives right after the previous one closed, as when a client reopens its
    connections. Before, a connection closed mid-request was subtracted twice from its
    worker's count: counts fell below zero, read as "no serving worker" by the siblings, and
    the next group piled up on one worker (1-7, 2-6)."""
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    server = Server(tmp=tmp_path, cert_dir=tmp_path, rules=RULES, inventory=INVENTORY, workers=2)
    body = json.dumps(review(pod(gpus=1))).encode()
    splits = []
    try:
        _wait_for_workers_serving(server, 2)
        workers = workers_of(server.process.pid)
        for group in range(6):
            connections = _open_together_and_ask(server, 8, body)
            splits.append(sorted(_established_by_process(server.port, workers).values()))
            for conn in connections:
                if group % 2:
                    conn.close()
                else:
                    _close_in_the_middle_of_a_request(conn, body)
            Server.clients.clear()
            wait_until(
                lambda: sum(_established_by_process(server.port, workers).values()) == 0,
                timeout=10,
                what="the group's connections closed",
            )
    finally:
        Server.close_clients()
        assert server.stop() == 0

    assert all(sum(split) == 8 and split[-1] - split[0] <= 2 for split in splits), splits


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
            b"x" * (framing.MAX_HEAD_BYTES + 1), framing.MAX_HEAD_BYTES + 1, id="head-too-long"
        ),
    ],
)
def test_a_request_is_handed_to_a_thread_only_once_it_is_all_there(data, end):
    head = framing.request_head(data)

    assert (None if head is None else framing.request_end(data, head)) == end


class RecordingSocket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def fileno(self) -> int:
        return 7


@pytest.mark.parametrize(
    ("writes", "sent"),
    [
        pytest.param([b"HEAD", b"body"], [b"HEADbody"], id="headers go out with the body"),
        pytest.param([b"HEAD"], [b"HEAD"], id="an answer without a body is flushed"),
        pytest.param(
            [b"HEAD", b"one", b"two", b"three"],
            [b"HEADone", b"two", b"three"],
            id="later writes go straight through",
        ),
    ],
)
def test_an_answer_leaves_in_one_write_with_its_headers(writes, sent):
    real = RecordingSocket()
    coalescing = answers.Coalescing(real)

    for data in writes:
        coalescing.sendall(data)
    coalescing.flush()

    assert real.sent == sent


def test_what_is_held_is_sent_before_anyone_writes_to_the_descriptor_itself():
    real = RecordingSocket()
    coalescing = answers.Coalescing(real)
    coalescing.sendall(b"HEAD")

    assert coalescing.fileno() == 7
    assert real.sent == [b"HEAD"]


class FillingSocket:
    """A non-blocking TLS socket as ``ssl`` presents one: it takes ``room`` bytes per turn
    and raises SSLWantWriteError for a write it cannot take whole; like OpenSSL, it wants a
    write it refused retried with the same bytes."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.left = room
        self.received = bytearray()
        self.refused: bytes | None = None

    def send(self, data: Any) -> int:
        data = bytes(data)
        if self.refused is not None:
            assert data == self.refused, "a refused write was not retried with the same bytes"
        if len(data) > self.left:
            self.refused = data
            raise ssl.SSLWantWriteError()
        self.refused = None
        self.left -= len(data)
        self.received += data
        return len(data)

    def drained(self) -> None:
        self.left = self.room  # the client read what was sent


def test_an_answer_the_socket_cannot_take_is_kept_and_sent_whole_in_order_later():
    sock = FillingSocket(room=answers.SEND_BYTES + 10)
    outbox = answers.Outbox(sock)
    parts = [b"H" * 100, bytes(range(256)) * 4000, b"tail"]

    for part in parts:
        outbox.sendall(part)
    turns = 0
    while not outbox.send():
        sock.drained()
        turns += 1

    assert sock.received == b"".join(parts)
    assert outbox.unsent == 0
    assert turns >= 3


def test_an_answer_the_socket_takes_at_once_leaves_nothing_for_the_main_loop():
    sock = FillingSocket(room=1 << 20)
    outbox = answers.Outbox(sock)

    outbox.sendall(b"HTTP/1.1 200 OK\r\n\r\n{}")

    assert outbox.unsent == 0
    assert sock.received == b"HTTP/1.1 200 OK\r\n\r\n{}"


def _callbacks_run(queue: threads.WakingQueue) -> int:
    """Run what the queue holds as the main loop does when its pipe is readable; how
    many bytes woke it."""
    with selectors.DefaultSelector() as poller:
        poller.register(queue.fileno(), selectors.EVENT_READ)
        woken = poller.select(timeout=0)
    if not woken:
        return 0
    queue.run_callbacks()
    return 1


def test_callbacks_left_for_the_main_loop_wake_it_once_until_it_runs_them():
    queue = threads.WakingQueue()
    queue.init()
    ran: list[int] = []
    try:
        for number in range(3):
            queue.defer(ran.append, number)
        pipe = os.read(queue.fileno(), 100)
        os.write(queue._write_fd, pipe)  # put back what the main loop will read
        wakes = _callbacks_run(queue)
        after = _callbacks_run(queue)
    finally:
        queue.close()

    assert (pipe, wakes, after, ran) == (b"\x00", 1, 0, [0, 1, 2])


def test_no_callback_from_many_threads_is_left_behind():
    queue = threads.WakingQueue()
    queue.init()
    ran: list[int] = []
    senders = [
        threading.Thread(target=lambda: [queue.defer(ran.append, n) for n in range(2000)])
        for _ in range(4)
    ]
    try:
        with selectors.DefaultSelector() as poller:
            poller.register(queue.fileno(), selectors.EVENT_READ)
            for sender in senders:
                sender.start()
            while len(ran) < 8000 and poller.select(timeout=5):  # a lost wake-up ends it
                queue.run_callbacks()
        for sender in senders:
            sender.join()
    finally:
        queue.close()

    assert len(ran) == 8000


def test_a_turn_runs_a_bounded_number_of_callbacks_and_wakes_the_loop_for_the_rest():
    queue = threads.WakingQueue()
    queue.init()
    ran: list[int] = []
    try:
        for number in range(threads.WakingQueue.MAX_CALLBACKS + 5):
            queue.defer(ran.append, number)
        first = (_callbacks_run(queue), len(ran))
        second = (_callbacks_run(queue), len(ran))
    finally:
        queue.close()

    assert first == (1, threads.WakingQueue.MAX_CALLBACKS)
    assert second == (1, threads.WakingQueue.MAX_CALLBACKS + 5)
