"""Benchmark: /mutate and /validate over TLS with keep-alive, next to a do-nothing Flask app
on the same gunicorn configuration, in the same run.

    .venv/bin/python bench/admission.py [--seconds 4] [--rounds 5] [--rate-share 0.25] [--unique]
                                        [--clients 12] [--reconnect]

Two phases per server:
1. throughput: ``--clients`` processes, each on one kept-alive TLS connection, send
   reviews back to back (closed loop) for ``--seconds``;
2. latency at a fixed rate: the same clients send on a schedule at ``--rate-share`` of
   the do-nothing app's throughput (default a quarter: both servers busy, neither
   saturated), and latency is measured from each request's scheduled
   time (so a stall counts against the server, not the client).

Reviews alternate between /mutate and /validate for the replicas of two typical GPU
workloads (the recorded kube-apiserver review of a one-GPU pod, and a two-container pod
with two GPUs): each call has its own uid and each pod its own name, as the API server
sends them, with the shipped rules and the example inventory. Replicas share a spec, so the
webhook's decision memo answers most of them; ``--unique`` gives every pod its own spec
(a label value) to measure the webhook with no memo hit at all. The server's review log lines go to a file, as
in a pod whose stderr is collected.

Every phase opens fresh connections. By default each client connects as its process starts,
so the connections arrive spread over the pool's start-up. ``--reconnect`` opens them all at
the same instant, as ``wrk -c8`` does when it is re-run for each round (and as the API server
does when it reopens its connections): the case where workers race for a burst of
connections. Each phase reports how its connections were split over the server's workers,
read from ``/proc`` (each worker's established sockets on the serving port) in the middle of
the phase.

Targets, against the do-nothing app in the same round: throughput >= 0.70 in the median
(with ``--reconnect``: 0.75 in every round and 0.85 in the median; with ``--unique``: 0.75
in the median), p99 <= 1.5x at the same rate in the median. The worst round is printed beside the median. Results: printed, and
written to bench/results/admission.json.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import multiprocessing
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.files.certs import ensure_dev  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "admission" / "pod-gpu-limits-mutate-Pod-CREATE.json"


REQUEST_UID, POD_NAME, POD_UID, SPEC_LABEL = b"@req-uid@", b"@pod-name@", b"@pod-uid@", b"@spec@"


def templates() -> list[tuple[str, bytes]]:
    """The reviews of two workloads' pods (the recorded kube-apiserver review of a one-GPU
    pod, and a two-container pod with two GPUs) for both endpoints, as JSON with
    placeholders that ``Reviews`` fills in per call."""
    recorded = json.loads(FIXTURE.read_text())
    two = copy.deepcopy(recorded)
    spec = two["request"]["object"]["spec"]
    main = spec["containers"][0]
    main["resources"] = {"limits": {"nvidia.com/gpu": "2", "cpu": "4", "memory": "16Gi"}}
    sidecar = {"name": "metrics", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}}
    spec["containers"].append(sidecar)
    out = []
    for review in (recorded, two):
        request = review["request"]
        meta = request["object"]["metadata"]
        request["uid"], request["name"] = REQUEST_UID.decode(), POD_NAME.decode()
        meta["name"], meta["uid"] = POD_NAME.decode(), POD_UID.decode()
        meta.setdefault("labels", {})["bench/spec"] = SPEC_LABEL.decode()
        data = json.dumps(review).encode()
        out += [("/mutate", data), ("/validate", data)]
    return out


class Reviews:
    """What the API server sends for the replicas of two workloads: every call has its own
    ``request.uid`` and every pod its own name and uid. With ``unique``, every pod also
    has its own label value, so no two pods share a spec and no decision is remembered."""

    def __init__(self, *, client: int, unique: bool) -> None:
        self.client = client
        self.unique = unique
        self.work = templates()
        self.nonce = uuid.uuid4().hex[:6]  # no phase sees another phase's pods

    def __getitem__(self, count: int) -> tuple[str, bytes]:
        path, body = self.work[count % len(self.work)]
        name = f"trainer-{self.nonce}-{self.client}-{count // 2:07d}".encode()
        body = body.replace(REQUEST_UID, str(uuid.uuid4()).encode())
        body = body.replace(POD_NAME, name).replace(POD_UID, name + b"-uid")
        # /validate sees the mutated object, so it never shares a spec with /mutate.
        spec = name + path.encode() if self.unique else b"shared"
        return path, body.replace(SPEC_LABEL, spec.replace(b"/", b"."))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(which: str, cert_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "bench/serve_app.py", which, str(port), str(cert_dir)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            conn = connect(port, cert_dir)
            send(conn, "/validate", Reviews(client=0, unique=False)[0][1])
            conn.close()
            return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{which} did not start:\n{log.read_text()}")


Round = dict[str, dict[str, dict[str, Any]]]  # server -> phase -> figures
HEADERS = {"Content-Type": "application/json"}


def send(conn: http.client.HTTPSConnection, path: str, body: bytes) -> None:
    """One review, answered with HTTP 200 or the benchmark stops."""
    conn.request("POST", path, body=body, headers=HEADERS)
    reply = conn.getresponse()
    reply.read()
    if reply.status != 200:
        raise SystemExit(f"{path}: HTTP {reply.status}")


def connect(port: int, cert_dir: Path) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    return http.client.HTTPSConnection("localhost", port, context=context, timeout=10)


def client(
    args: tuple[int, str, float, float, float, int, bool, float],
) -> tuple[int, list[float], int]:
    """One client process: returns (requests sent, latencies, connections opened). With a
    ``connect_at`` time, it connects then, at the same instant as every other client."""
    port, cert_dir, start_at, seconds, rate, offset, unique, connect_at = args
    conn = connect(port, Path(cert_dir))
    while time.time() < connect_at:
        time.sleep(0.0005)
    conn.connect()
    sock = conn.sock
    work = Reviews(client=offset, unique=unique)
    latencies: list[float] = []
    count = 0
    while time.time() < start_at:
        time.sleep(0.001)
    begin = time.perf_counter()
    end = begin + seconds
    interval = 1.0 / rate if rate else 0.0
    next_at = begin + (offset * interval / 8 if rate else 0.0)
    while True:
        now = time.perf_counter()
        if rate:
            if next_at >= end:
                break
            if now < next_at:
                time.sleep(next_at - now)
            scheduled = next_at
            next_at += interval
        else:
            if now >= end:
                break
            scheduled = now
        send(conn, *work[count])
        latencies.append(time.perf_counter() - scheduled)
        count += 1
    reused = conn.sock is sock
    conn.close()
    return count, latencies, 1 if reused else 2


def run_phase(
    port: int,
    cert_dir: Path,
    *,
    clients: int,
    seconds: float,
    rate: float = 0.0,
    unique: bool = False,
    reconnect: bool = False,
    master: int = 0,
) -> dict[str, Any]:
    now = time.time()
    connect_at = now + 0.5 if reconnect else 0.0  # the pool's processes are up by then
    start_at = now + (1.0 if reconnect else 0.5)
    per_client = rate / clients if rate else 0.0
    jobs = [
        (port, str(cert_dir), start_at, seconds, per_client, i, unique, connect_at)
        for i in range(clients)
    ]
    with multiprocessing.Pool(clients) as pool:
        pending = pool.map_async(client, jobs)
        time.sleep(max(0.0, start_at + seconds / 2 - time.time()))
        split = connection_split(port, master) if master else []
        results = pending.get()
    total = sum(r[0] for r in results)
    latencies = sorted(x for r in results for x in r[1])
    return {
        "requests": total,
        "throughput": total / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "connections": sum(r[2] for r in results),
        "split": split,
    }


def workers_of(master: int) -> list[int]:
    """The gunicorn master's worker processes (its children)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == master:
            children.append(int(stat.parent.name))
    return sorted(children)


def connection_split(port: int, master: int) -> list[int]:
    """How many established connections to ``port`` each worker holds, most first (what
    ``ss -tnp`` shows): the inodes of the sockets in /proc/net/tcp*, matched against each
    worker's file descriptors."""
    local = f":{port:04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(local) and fields[3] == "01":  # 01: ESTABLISHED
                inodes.add(f"socket:[{fields[9]}]")
    split = []
    for pid in workers_of(master):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        held = 0
        for fd in fds:
            with contextlib.suppress(OSError):
                held += os.readlink(fd) in inodes
        split.append(held)
    return sorted(split, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--rate-share", type=float, default=0.25)
    parser.add_argument(
        "--unique",
        action="store_true",
        help="give every pod its own spec, so no decision is remembered (the worst case)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="alternate the two servers this many times"
    )
    parser.add_argument(
        "--reconnect",
        action="store_true",
        help="every client connects at the same instant in each phase, like wrk re-run per round",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpu-webhook-bench-"))
    ensure_dev(work / "certs")
    rounds: list[Round] = []
    servers = {}
    for which in ("noop", "webhook"):
        servers[which] = start(which, work / "certs", work / f"{which}.log")
    try:
        for which in ("noop", "webhook"):
            run_phase(servers[which][1], work / "certs", clients=args.clients, seconds=1.0)
        # Alternating short phases, judged by the median of per-round ratios: a neighbour
        # that loads this shared machine for a while then spoils one round, not the verdict.
        for _ in range(args.rounds):
            results: Round = {}
            for which in ("noop", "webhook"):
                port = servers[which][1]
                results[which] = {
                    "max": run_phase(
                        port,
                        work / "certs",
                        clients=args.clients,
                        seconds=args.seconds,
                        unique=args.unique,
                        reconnect=args.reconnect,
                        master=servers[which][0].pid,
                    )
                }
            rate = results["noop"]["max"]["throughput"] * args.rate_share
            for which in ("noop", "webhook"):
                port = servers[which][1]
                results[which]["paced"] = run_phase(
                    port,
                    work / "certs",
                    clients=args.clients,
                    seconds=args.seconds,
                    rate=rate,
                    unique=args.unique,
                    reconnect=args.reconnect,
                    master=servers[which][0].pid,
                )
                results[which]["paced"]["rate"] = rate
            rounds.append(results)
    finally:
        for process, _ in servers.values():
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    return report(rounds, args)


def _ratios(results: Round) -> dict[str, float]:
    noop, hook = results["noop"], results["webhook"]
    return {
        "throughput_ratio": hook["max"]["throughput"] / noop["max"]["throughput"],
        "p50_ratio_at_rate": hook["paced"]["p50_ms"] / noop["paced"]["p50_ms"],
        "p99_ratio_at_rate": hook["paced"]["p99_ms"] / noop["paced"]["p99_ms"],
    }


def _split(phase: dict[str, Any]) -> str:
    return "-".join(map(str, phase["split"])) or "?"


def report(rounds: list[Round], args: argparse.Namespace) -> int:
    mode = "reconnecting together" if args.reconnect else "connecting as they start"
    print(
        f"cores: {os.cpu_count()}, clients: {args.clients} ({mode}), {args.seconds:.0f}s per phase"
    )
    per_round = [_ratios(r) for r in rounds]
    for number, (results, ratios) in enumerate(zip(rounds, per_round, strict=True), 1):
        for name, result in results.items():
            m, p = result["max"], result["paced"]
            print(
                f"round {number} {name:8} max {m['throughput']:6.0f} req/s (p50 {m['p50_ms']:.2f}"
                f" ms, p99 {m['p99_ms']:.2f} ms, split {_split(m)}) | at {p['rate']:.0f} req/s:"
                f" p50 {p['p50_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms, split {_split(p)}"
            )
        print(
            f"round {number} webhook/noop: throughput {ratios['throughput_ratio']:.2f}, "
            f"p99 {ratios['p99_ratio_at_rate']:.2f} at the same rate"
        )
    median = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    worst = {
        "throughput_ratio": min(r["throughput_ratio"] for r in per_round),
        "p50_ratio_at_rate": max(r["p50_ratio_at_rate"] for r in per_round),
        "p99_ratio_at_rate": max(r["p99_ratio_at_rate"] for r in per_round),
    }
    # The targets: replicas reconnecting 0.85 in the median and 0.75 in every
    # round; unique pods 0.75 in the median; the connecting-as-they-start default 0.70.
    if args.unique:
        floor, every_round = 0.75, 0.0
    else:
        floor, every_round = (0.85, 0.75) if args.reconnect else (0.70, 0.0)
    print(
        f"median of {len(rounds)} rounds, webhook/noop: throughput "
        f"{median['throughput_ratio']:.2f} (target >= {floor:.2f}), p50 "
        f"{median['p50_ratio_at_rate']:.2f}, p99 {median['p99_ratio_at_rate']:.2f} "
        "(target <= 1.50) at the same rate"
    )
    print(
        f"worst round, webhook/noop: throughput {worst['throughput_ratio']:.2f}"
        + (f" (target >= {every_round:.2f})" if every_round else "")
        + f", p99 {worst['p99_ratio_at_rate']:.2f} at the same rate"
    )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "admission.json").write_text(
        json.dumps(
            {"rounds": rounds, "ratios": per_round, "median": median, "worst": worst}, indent=2
        )
        + "\n"
    )
    met = (
        median["throughput_ratio"] >= floor
        and worst["throughput_ratio"] >= every_round
        and median["p99_ratio_at_rate"] <= 1.50
    )
    print("all targets met" if met else "TARGET MISSED")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
