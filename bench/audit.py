"""``gpu-webhook audit`` of a cluster with 10,000 pods in 2,000 workloads, from a loopback
API server that replays paged lists (500 per page, ``continue`` tokens) of realistic objects.

Run: .venv/bin/python bench/audit.py        (exit 1 when a target is missed)

Targets (issue 12): at least 2,000 objects/s, at most 150 MB peak RSS for the audit
process. Objects are everything the audit reads: 2,000 Deployments, their 2,000
ReplicaSets and 10,000 pods (most folded into their Deployment, as in a real cluster).

Baseline, measured in the same run and the same way: a process that only lists the same
pages through the same client and drops them. The audit's figures are also given as a
ratio to it (machines are shared and noisy; the ratio is what to compare between runs).
Each side runs in a fresh process so that its peak RSS is its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fakenodes  # noqa: E402

WORKLOADS = 2_000
PODS_PER_WORKLOAD = 5
PAGE = 500
NAMESPACES = 40
TARGET_OBJECTS_PER_SECOND = 2_000
TARGET_PEAK_RSS_MB = 150
GPU_PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4")


def _managed_fields(manager: str) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-30T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}}},
                "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {}}}},
            },
        }
    ]


def _pod_spec(rng: random.Random, gpus: int) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": "4", "memory": "32Gi"},
        "limits": {"cpu": "8", "memory": "64Gi"},
    }
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                "command": ["python", "train.py", "--epochs", "90"],
                "env": [
                    {"name": f"VAR_{i}", "value": f"value-{rng.random():.6f}"} for i in range(8)
                ],
                "resources": resources,
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "kube-api-access", "mountPath": "/var/run/secrets", "readOnly": True},
                ],
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
            },
            {
                "name": "metrics",
                "image": "prom/statsd-exporter:v0.27.1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            },
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {
                "name": "kube-api-access",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
            },
        ],
        "restartPolicy": "Always",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    if gpus:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": rng.choice(GPU_PRODUCTS)}
    return spec


def cluster_objects(seed: int = 12) -> dict[str, list[dict[str, Any]]]:
    """2,000 Deployments (a few with mistakes the audit denies), their ReplicaSets and pods."""
    rng = random.Random(seed)
    deployments, replica_sets, pods = [], [], []
    for i in range(WORKLOADS):
        namespace = f"team-{i % NAMESPACES}"
        gpus = (0, 1, 2, 4, 8, 16)[i % 6]  # 16: more than any node has
        spec = _pod_spec(rng, gpus)
        if i % 50 == 7:  # a requests-only GPU in the template
            del spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        labels = {"app": f"w{i}", "pod-template-hash": f"{i:08x}"}
        dep_uid, rs_uid = f"dep-{i:06d}", f"rs-{i:06d}"
        template = {"metadata": {"labels": labels}, "spec": spec}
        deployments.append(
            {
                "metadata": {
                    "name": f"w{i}",
                    "namespace": namespace,
                    "uid": dep_uid,
                    "resourceVersion": str(1000 + i),
                    "labels": {"app": f"w{i}"},
                    "managedFields": _managed_fields("kubectl"),
                },
                "spec": {
                    "replicas": PODS_PER_WORKLOAD,
                    "selector": {"matchLabels": labels},
                    "template": template,
                },
                "status": {"replicas": PODS_PER_WORKLOAD, "readyReplicas": PODS_PER_WORKLOAD},
            }
        )
        owner = {"apiVersion": "apps/v1", "controller": True, "blockOwnerDeletion": True}
        replica_sets.append(
            {
                "metadata": {
                    "name": f"w{i}-{i:08x}",
                    "namespace": namespace,
                    "uid": rs_uid,
                    "ownerReferences": [
                        {**owner, "kind": "Deployment", "name": f"w{i}", "uid": dep_uid}
                    ],
                    "managedFields": _managed_fields("kube-controller-manager"),
                },
                "spec": {
                    "replicas": PODS_PER_WORKLOAD,
                    "selector": {"matchLabels": labels},
                    "template": template,
                },
            }
        )
        for p in range(PODS_PER_WORKLOAD):
            pods.append(
                {
                    "metadata": {
                        "name": f"w{i}-{i:08x}-{p:05d}",
                        "namespace": namespace,
                        "uid": f"pod-{i:06d}-{p}",
                        "labels": labels,
                        "ownerReferences": [
                            {
                                **owner,
                                "apiVersion": "apps/v1",
                                "kind": "ReplicaSet",
                                "name": f"w{i}-{i:08x}",
                                "uid": rs_uid,
                            }
                        ],
                        "managedFields": _managed_fields("kube-controller-manager"),
                    },
                    "spec": {**spec, "nodeName": f"node-{rng.randrange(200)}"},
                    "status": {
                        "phase": "Running",
                        "conditions": [
                            {
                                "type": t,
                                "status": "True",
                                "lastTransitionTime": "2026-11-30T10:00:00Z",
                            }
                            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                        ],
                        "podIP": f"10.{i % 250}.{p}.{rng.randrange(250)}",
                        "startTime": "2026-11-30T10:00:00Z",
                    },
                }
            )
    return {
        "/apis/apps/v1/deployments": deployments,
        "/apis/apps/v1/replicasets": replica_sets,
        "/api/v1/pods": pods,
    }


def _pages(items: list[dict[str, Any]], kind: str, api_version: str) -> dict[str, bytes]:
    """Pages keyed by the continue token that asks for them ("" for the first)."""
    pages = {}
    for start in range(0, max(len(items), 1), PAGE):
        chunk = items[start : start + PAGE]
        meta: dict[str, Any] = {"resourceVersion": "90000"}
        if start + PAGE < len(items):
            meta["continue"] = f"page-{start + PAGE}"
            meta["remainingItemCount"] = len(items) - start - PAGE
        token = f"page-{start}" if start else ""
        pages[token] = json.dumps(
            {"kind": kind, "apiVersion": api_version, "metadata": meta, "items": chunk}
        ).encode()
    return pages


def serve(info: Any, stopped: Any) -> None:
    objects = cluster_objects()
    lists = {
        "/api/v1/nodes": _pages(fakenodes.cluster(200, seed=5), "NodeList", "v1"),
        "/api/v1/namespaces": _pages(
            [
                {
                    "metadata": {
                        "name": f"team-{i}",
                        "labels": {"kubernetes.io/metadata.name": f"team-{i}"},
                    }
                }
                for i in range(NAMESPACES)
            ],
            "NamespaceList",
            "v1",
        ),
        **{path: _pages(items, "List", "v1") for path, items in objects.items()},
    }
    for path in (
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/api/v1/replicationcontrollers",
        "/apis/batch/v1/jobs",
        "/apis/batch/v1/cronjobs",
    ):
        lists[path] = _pages([], "List", "v1")
    documents = {
        "/apis/apps": {"preferredVersion": {"groupVersion": "apps/v1"}},
        "/apis/batch": {"preferredVersion": {"groupVersion": "batch/v1"}},
        "/api/v1": {
            "resources": [
                {"name": n} for n in ("pods", "replicationcontrollers", "nodes", "namespaces")
            ]
        },
        "/apis/apps/v1": {
            "resources": [
                {"name": n} for n in ("deployments", "replicasets", "statefulsets", "daemonsets")
            ]
        },
        "/apis/batch/v1": {"resources": [{"name": n} for n in ("jobs", "cronjobs")]},
    }
    bodies = {path: json.dumps(doc).encode() for path, doc in documents.items()}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            token = parse_qs(parts.query).get("continue", [""])[0]
            body = lists.get(parts.path, {}).get(token) or bodies.get(parts.path)
            status = 200 if body is not None else 404
            body = body or b'{"kind":"Status","code":404,"message":"not found"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    total = sum(len(v) for v in objects.values())
    size = sum(len(b) for pages in lists.values() for b in pages.values())
    info.put((f"http://127.0.0.1:{server.server_address[1]}", total, size))
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    stopped.wait()
    server.shutdown()


def _kubeconfig(directory: str, url: str) -> str:
    path = os.path.join(directory, "kubeconfig")
    with open(path, "w") as f:
        f.write(
            f"apiVersion: v1\nkind: Config\nclusters: [{{name: b, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: b, user: {token: bench}}]\n"
            "contexts: [{name: b, context: {cluster: b, user: b}}]\ncurrent-context: b\n"
        )
    return path


def _imported() -> None:
    """Load the kubernetes package (for its kubeconfig loader) before the clock starts in
    both runs: about a second of start-up that says nothing about objects per second."""
    import kubernetes.config  # noqa: F401


def run_audit(config: str, results: Any) -> None:
    from webhook.cli import build_parser, main

    _imported()
    build_parser()  # imports every command module: start-up, not audit work
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(["audit", "--kubeconfig", config, "--rules", str(ROOT / "rules"), "-o", "json"])
    seconds = time.perf_counter() - started
    report = json.loads(out.getvalue())
    results.put(("audit", seconds, _peak_rss_mb(), code, report["summary"]))


def run_listing(config: str, results: Any) -> None:
    from webhook.cluster.apiclient import api_endpoint_from_kubeconfig
    from webhook.cluster.clusterobjects import ClusterObjects
    from webhook.engine.kube.workloads import KindTable

    _imported()
    started = time.perf_counter()
    count = 0
    with ClusterObjects(api_endpoint_from_kubeconfig(config)) as cluster:
        cluster.inventory()
        cluster.namespace_labels()
        kinds, _ = cluster.served_kinds(KindTable(), lambda _: True)
        for listed in kinds:
            for _ in cluster.objects(listed):
                count += 1
    seconds = time.perf_counter() - started
    results.put(("list", seconds, _peak_rss_mb(), 0, {"objects": count}))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


@contextlib.contextmanager
def api_server() -> Iterator[tuple[str, int, int]]:
    context = multiprocessing.get_context("spawn")
    info, stopped = context.Queue(), context.Event()
    process = context.Process(target=serve, args=(info, stopped), daemon=True)
    process.start()
    try:
        yield info.get(timeout=300)
    finally:
        stopped.set()
        process.join(10)
        if process.is_alive():
            process.kill()


def _in_process(target: Any, config: str) -> tuple[str, float, float, int, dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=target, args=(config, results))
    process.start()
    answer: tuple[str, float, float, int, dict[str, Any]] = results.get(timeout=600)
    process.join(60)
    return answer


def main() -> int:
    print(
        f"serving {WORKLOADS} Deployments, {WORKLOADS} ReplicaSets and {WORKLOADS * PODS_PER_WORKLOAD} pods ...",
        flush=True,
    )
    with api_server() as (url, total, size), tempfile.TemporaryDirectory() as directory:
        config = _kubeconfig(directory, url)
        print(f"  {total:,} objects in {size / 1e6:.1f} MB of list pages ({PAGE} per page)")
        _, list_s, list_rss, _, listed = _in_process(run_listing, config)
        _, audit_s, audit_rss, code, summary = _in_process(run_audit, config)
    list_rate = listed["objects"] / list_s
    audit_rate = summary["objects"] / audit_s
    print(
        f"baseline, list only:  {listed['objects']:,} objects in {list_s:.2f} s = {list_rate:,.0f} objects/s, peak RSS {list_rss:.0f} MB"
    )
    print(
        f"audit:                {summary['objects']:,} objects in {audit_s:.2f} s = {audit_rate:,.0f} objects/s, peak RSS {audit_rss:.0f} MB"
    )
    print(
        f"  reported {summary['reported']:,}, folded {summary['folded']:,}: {summary['deny']:,} denied, "
        f"{summary['warn']:,} warned, {summary['pass']:,} passed (exit {code})"
    )
    print(
        f"ratios audit / list-only: time {audit_s / list_s:.2f}, peak RSS {audit_rss / list_rss:.2f}"
    )
    failures = []
    if summary["objects"] != listed["objects"] or summary["objects"] != total:
        failures.append(f"the audit saw {summary['objects']} objects, the cluster has {total}")
    if audit_rate < TARGET_OBJECTS_PER_SECOND:
        failures.append(f"{audit_rate:,.0f} objects/s is below {TARGET_OBJECTS_PER_SECOND:,}")
    if audit_rss > TARGET_PEAK_RSS_MB:
        failures.append(f"peak RSS {audit_rss:.0f} MB is above {TARGET_PEAK_RSS_MB} MB")
    for failure in failures:
        print(f"MISSED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
