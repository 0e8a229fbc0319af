"""deploy/monitoring, the kustomize Component, as deploy/overlays/monitoring renders it: the
ServiceMonitor reaches the health port through the Service, the rules and the dashboard are
the files in the repository, and the dashboard is a Grafana dashboard with the variables and
data source its panels use."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.deploy.test_manifests import DEPLOY, one, render
from tests.monitoring.tools import DASHBOARD, PROMETHEUS_RULE, dashboard, panel_queries
from webhook.engine.kube.selectors import label_selector_matches

OVERLAY = "overlays/monitoring"


def test_the_component_is_a_kustomize_component_with_the_three_files():
    component = yaml.safe_load((DEPLOY / "monitoring" / "kustomization.yaml").read_text())
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert component["kind"] == "Component"
    assert component["resources"] == ["servicemonitor.yaml", "prometheusrule.yaml"]
    (generated,) = component["configMapGenerator"]
    assert generated["files"] == ["dashboards/gpu-webhook.json"]


def test_the_base_alone_has_no_monitoring_objects():
    kinds = {obj["kind"] for obj in render("base")}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    assert "metrics" not in {p["name"] for p in one(render("base"), "Service")["spec"]["ports"]}


def test_the_service_monitor_scrapes_the_health_port_through_the_service():
    objs = render(OVERLAY)
    monitor = one(objs, "ServiceMonitor", "gpu-webhook")
    service = one(objs, "Service", "gpu-webhook")
    assert label_selector_matches(monitor["spec"]["selector"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["scheme"] == "http"
    port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
    container = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == 8080  # --health-port's default: /metrics
    assert {p["name"] for p in service["spec"]["ports"]} == {"https", "metrics"}


def test_the_prometheus_rule_is_the_file_in_the_repository():
    rule = one(render(OVERLAY), "PrometheusRule", "gpu-webhook")
    assert rule["spec"] == yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    assert rule["metadata"]["namespace"] == "gpu-webhook"


def test_the_dashboard_is_a_configmap_for_grafanas_sidecar_without_a_name_hash():
    configmap = one(render(OVERLAY), "ConfigMap", "gpu-webhook-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gpu-webhook.json"]) == json.loads(DASHBOARD.read_text())


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


def test_the_dashboard_picks_a_prometheus_data_source_a_namespace_and_an_instance():
    found = variables(dashboard())
    assert found["datasource"]["type"] == "datasource"
    assert found["datasource"]["query"] == "prometheus"
    for name in ("namespace", "instance"):
        assert found[name]["type"] == "query"
        assert found[name]["datasource"]["uid"] == "${datasource}"
        assert found[name]["includeAll"] is True
        assert found[name]["allValue"] == ".*"


def test_every_panel_reads_the_chosen_data_source_namespace_and_instance():
    board = dashboard()
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
    for title, expr in panel_queries(board):
        assert 'namespace=~"$namespace"' in expr, title
        assert 'instance=~"$instance"' in expr, title


def test_panel_ids_are_unique_and_every_panel_has_a_place_on_the_grid():
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


def test_the_dashboard_has_the_panels_operators_ask_for():
    titles = {title for title, _ in panel_queries(dashboard())}
    assert titles >= {
        "Reviews by decision", "Reviews by kind", "Review latency", "Denials by rule",
        "Warnings by rule", "Rule generation", "Rule reloads", "Inventory nodes",
        "Inventory age", "Time since each source synced", "Certificate time left",
        "Worker restarts", "Rule objects not in force",
    }  # fmt: skip
