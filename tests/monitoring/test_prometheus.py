"""A real Prometheus scrapes a real server, and every dashboard and alert expression runs
there.

The server is ``gpu-webhook serve`` (gunicorn, two workers, TLS) with a live inventory fed
by a loopback server replaying the API server's recorded lists, so the inventory watcher's
series are there too. Prometheus (Debian's package) listens on loopback only, with a
temporary configuration and data directory, scrapes every second, loads the
PrometheusRule's groups, and is killed at the end. The test sends reviews that are
allowed, denied, warned and malformed; then every panel's queries must return data, every
alert expression must evaluate without error, and the first failure of a rule reload and of
a watch must show in an ``increase()``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import ROOT, RULES, pod, review
from tests.cluster.replayserver import Body, ReplayServer, Stream, fixture, status_body
from tests.monitoring.tools import alerts, dashboard, panel_queries, tool, write_rule_file
from tests.running import Server, free_port, kubeconfig, post, wait_until
from webhook.cluster.conditionsync import GROUP_PATH as WEBHOOKS
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

# What Grafana puts in for the dashboard's variables ("All") and its rate interval.
GRAFANA = {"$namespace": ".*", "$instance": ".*", "$__rate_interval": "5m"}
NAMESPACE = "gpu-webhook"


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def query(self, expr: str, *, at: float | None = None) -> dict[str, Any]:
        """``/api/v1/query`` now (or at Unix time ``at``); the whole answer (status, data)."""
        params = {"query": expr} | ({} if at is None else {"time": str(at)})
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                answer: dict[str, Any] = json.loads(reply.read())
        except urllib.error.HTTPError as error:  # 400/422: a bad expression, with a body
            answer = json.loads(error.read())
        return answer

    def result(self, expr: str, *, at: float | None = None) -> list[dict[str, Any]]:
        answer = self.query(expr, at=at)
        assert answer["status"] == "success", f"{expr}: {answer}"
        found: list[dict[str, Any]] = answer["data"]["result"]
        return found

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
            return answer

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


def start_prometheus(tmp: Path, *, target: str) -> Prometheus:
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(write_rule_file(tmp))],
        "scrape_configs": [
            {
                "job_name": "gpu-webhook",  # what the ServiceMonitor's job label is
                "static_configs": [
                    {"targets": [target], "labels": {"namespace": NAMESPACE, "pod": "p-0"}}
                ],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prometheus = Prometheus(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 60
    while not _ready(prometheus):
        if process.poll() is not None or time.monotonic() > deadline:
            prometheus.stop()
            pytest.fail(f"prometheus did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return prometheus


def _ready(prometheus: Prometheus) -> bool:
    try:
        with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@dataclass
class Setup:
    server: Server
    prometheus: Prometheus
    rules: Path
    runtime_classes_fail: threading.Event
    first_scrape: dict[str, int]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("monitoring")
    tool("prometheus")  # skip or fail before starting anything
    replay = ReplayServer().start()
    hold = threading.Event()
    replay.lists.append(Body(fixture("node-list.json")))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    replay.watches.extend(Stream([hold], end="hold") for _ in range(4))
    # The RuntimeClass list fails once, when the test says (after Prometheus' first scrapes):
    # the watch's first failure must show in an increase().
    fail = threading.Event()
    error = status_body(500, "InternalError", "etcd is unhappy")
    replay.runtime_class_lists.append(Body(error, 500, gate=fail))
    # The two webhook configurations, for the match conditions' runtime sync (its series).
    for doc in yaml.safe_load_all((ROOT / "deploy/base/webhooks.yaml").read_text()):
        replay.store(f"{WEBHOOKS}/{doc['kind'].lower()}s/gpu-webhook", doc)
    rules = tmp / "rules"
    shutil.copytree(RULES, rules)
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=20), tmp)
    try:
        server = Server(
            tmp=tmp,
            cert_dir=tmp,
            rules=rules,
            inventory=None,
            workers=2,
            extra=("--kubeconfig", kubeconfig(tmp, replay.url), "--sync-match-conditions"),
        )
    except Exception:
        replay.stop()
        raise
    prometheus = None
    try:
        prometheus = start_prometheus(tmp, target=f"127.0.0.1:{server.health_port}")
        wait_until(lambda: _scraped(prometheus), timeout=30, what="Prometheus scraped the server")
        # What Prometheus held right after its first successful scrape (an instant query at
        # that time sees no later sample).
        scrapes = prometheus.result('up{job="gpu-webhook"}[5m]')[0]["values"]
        at = next(float(when) for when, up in scrapes if up == "1")
        first = {name: len(prometheus.result(name, at=at)) for name in metric_names()}
        yield Setup(server, prometheus, rules, fail, first)
    finally:
        if prometheus is not None:
            prometheus.stop()
        hold.set()
        fail.set()
        assert server.stop() == 0, server.log.read_text()[-3000:]
        replay.stop()


def _scraped(prometheus: Prometheus) -> bool:
    return bool(prometheus.result('up{job="gpu-webhook"} == 1'))


def metric_names() -> set[str]:
    """Every series name an alert or a panel reads (a histogram by its buckets)."""
    exprs = [rule["expr"] for rule in alerts()] + [expr for _, expr in panel_queries(dashboard())]
    return {name for expr in exprs for name in re.findall(r"\bgpu_webhook_\w+", expr)}


def grafana(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    return expr


GPU_TOLERATING_POD = {
    **pod(gpus=None, name="no-gpu"),
    "spec": {
        "containers": [{"name": "main", "image": "busybox"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def send_reviews(server: Server) -> None:
    """One of each: allowed, denied (no node has 16 GPUs), warned, malformed."""
    conn = server.connection()
    status, answer = post(conn, "/mutate", review(pod(gpus=1)))
    assert (status, answer["response"]["allowed"]) == (200, True)
    status, answer = post(conn, "/mutate", review(pod(gpus=16)))
    assert (status, answer["response"]["allowed"]) == (200, False)
    status, answer = post(conn, "/validate", review(GPU_TOLERATING_POD))
    assert status == 200
    assert answer["response"]["allowed"] is True
    assert answer["response"].get("warnings"), answer
    status, _ = post(conn, "/validate", b"{not json")
    assert status == 400
    conn.close()


def counted(prometheus: Prometheus, expr: str) -> float:
    found = prometheus.result(expr)
    return sum(float(sample["value"][1]) for sample in found)


@pytest.fixture(scope="module")
def reviewed(setup: Setup) -> Setup:
    """Reviews sent for ten seconds, until Prometheus has seen them all (the workers hand
    their counts to the metrics files at least every 2 s)."""
    rounds = 10
    for _ in range(rounds):
        send_reviews(setup.server)
        time.sleep(1)
    wait_until(
        lambda: (
            counted(setup.prometheus, 'gpu_webhook_requests_total{decision="denied"}') >= rounds
        ),
        timeout=30,
        what="Prometheus saw every denial",
    )
    return setup


def test_every_series_an_alert_or_panel_reads_is_there_from_the_first_scrape(
    setup: Setup,
) -> None:
    assert [name for name in sorted(metric_names()) if not setup.first_scrape[name]] == []


@pytest.mark.parametrize(
    ("title", "expr"), panel_queries(dashboard()), ids=[t for t, _ in panel_queries(dashboard())]
)
def test_every_dashboard_query_runs_and_has_data(reviewed: Setup, title: str, expr: str) -> None:
    found = reviewed.prometheus.result(grafana(expr))
    assert found, f"panel {title!r} has no data: {grafana(expr)}"
    values = [float(sample["value"][1]) for sample in found]
    assert all(value == value for value in values), f"{title}: NaN in {found}"  # noqa: PLR0124


def test_the_panels_count_what_was_sent(reviewed: Setup) -> None:
    prometheus = reviewed.prometheus
    assert counted(prometheus, 'gpu_webhook_findings_total{action="deny"}') >= 10
    assert counted(prometheus, 'gpu_webhook_findings_total{action="warn"}') >= 10
    assert counted(prometheus, 'gpu_webhook_malformed_requests_total{code="400"}') >= 10
    assert counted(prometheus, "gpu_webhook_inventory_nodes") > 0
    left = counted(prometheus, "min(gpu_webhook_certificate_expiry_timestamp_seconds) - time()")
    assert 19 * 86400 < left <= 20 * 86400
    active = prometheus.result("gpu_webhook_watch_active == 1")
    assert {"nodes", "namespaces"} <= {sample["metric"]["source"] for sample in active}


@pytest.mark.parametrize("rule", alerts(), ids=[rule["alert"] for rule in alerts()])
def test_every_alert_expression_evaluates_on_the_real_server(reviewed: Setup, rule: dict) -> None:
    answer = reviewed.prometheus.query(rule["expr"])
    assert answer["status"] == "success", answer


def test_prometheus_loaded_every_alert_and_evaluates_it_without_error(reviewed: Setup) -> None:
    names = {rule["alert"] for rule in alerts()}

    def evaluated() -> list[dict[str, Any]]:
        groups = reviewed.prometheus.get("/api/v1/rules")["data"]["groups"]
        loaded = [rule for group in groups for rule in group["rules"]]
        return (
            loaded
            if all(rule.get("lastEvaluation", "0001")[:4] != "0001" for rule in loaded)
            else []
        )

    wait_until(evaluated, timeout=20, what="every rule was evaluated once")
    loaded = evaluated()
    assert {rule["name"] for rule in loaded} == names
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []


def test_only_what_the_test_did_on_purpose_raises_an_alert(reviewed: Setup) -> None:
    raised = {
        (s["metric"]["alertname"], s["metric"].get("source", ""))
        for s in reviewed.prometheus.result("ALERTS")  # pending ones too
    }
    # The malformed calls, and the RuntimeClass list held back (never synced: stale).
    expected = {("GPUWebhookCallsRefused", ""), ("GPUWebhookClusterViewStale", "runtimeclasses")}
    assert raised <= expected
    assert ("GPUWebhookCallsRefused", "") in raised


def test_the_first_rejected_rule_reload_fires_the_alert(reviewed: Setup) -> None:
    prometheus = reviewed.prometheus
    increase = 'sum(increase(gpu_webhook_rule_reloads_total{result="failure"}[1m])) > 0'
    assert prometheus.result(increase) == []
    (reviewed.rules / "99-broken.yaml").write_text("apiVersion: gpu-webhook.io/v1\nkind: Nope\n")
    try:
        wait_until(lambda: prometheus.result(increase), timeout=30, what="the increase showed")
        expr = next(r["expr"] for r in alerts() if r["alert"] == "GPUWebhookRuleReloadFailed")
        assert prometheus.result(expr)
    finally:
        (reviewed.rules / "99-broken.yaml").unlink()
    wait_until(
        lambda: prometheus.result("max(gpu_webhook_rule_files_rejected) == 0"),
        timeout=30,
        what="the rule files were accepted again",
    )


def test_the_first_failed_list_of_a_source_shows_in_an_increase(reviewed: Setup) -> None:
    prometheus = reviewed.prometheus
    increase = 'increase(gpu_webhook_watch_errors_total{source="runtimeclasses"}[1m]) > 0'
    assert prometheus.result(increase) == []
    reviewed.runtime_classes_fail.set()
    wait_until(lambda: prometheus.result(increase), timeout=30, what="the increase showed")


def test_the_health_port_serves_what_prometheus_scrapes(reviewed: Setup) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", reviewed.server.health_port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    for name in metric_names():
        assert re.search(rf"^{name}[{{ ]", text, flags=re.MULTILINE), name


def days_left(prometheus: Prometheus) -> float:
    expr = "min(gpu_webhook_certificate_expiry_timestamp_seconds) - time()"
    return counted(prometheus, expr) / 86400


def test_a_rotated_certificate_shows_at_the_next_scrapes(reviewed: Setup) -> None:
    assert 19 < days_left(reviewed.prometheus) <= 20
    cert_dir = reviewed.server.cert_dir
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=40), cert_dir)
    wait_until(lambda: days_left(reviewed.prometheus) > 39, timeout=30, what="the new expiry")


def test_a_killed_worker_counts_as_a_restart(reviewed: Setup) -> None:
    server = reviewed.server
    restarts = "sum(gpu_webhook_worker_restarts_total)"
    before = counted(reviewed.prometheus, restarts)
    # The master's children are its workers and the inventory watcher: a worker says so.
    victim = next(pid for pid in server.workers() if server._accepting({pid}))
    serving = server.serving_workers()
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: server.serving_workers() > serving, timeout=30, what="a new worker")
    wait_until(
        lambda: counted(reviewed.prometheus, restarts) >= before + 1,
        timeout=30,
        what="Prometheus saw the restart",
    )


def test_a_killed_inventory_watcher_counts_as_a_restart(reviewed: Setup) -> None:
    server = reviewed.server
    restarts = 'sum(gpu_webhook_process_restarts_total{process="inventory-watcher"})'
    before = counted(reviewed.prometheus, restarts)
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if line[:1] == "{"]
    watcher = [line["pid"] for line in lines if line["msg"] == "inventory watcher started"][-1]
    os.kill(watcher, signal.SIGKILL)
    wait_until(
        lambda: counted(reviewed.prometheus, restarts) >= before + 1,
        timeout=30,
        what="Prometheus saw the watcher's restart",
    )
