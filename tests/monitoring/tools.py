"""The real Prometheus tools (Debian's ``prometheus`` package), and the rule and dashboard
files of ``deploy/monitoring/`` as the tools read them.

A missing tool skips a test only where it cannot be installed (not root, or no apt-get);
where ``scripts/install-tools`` could have installed it, the test fails and says to run it,
so that CI (root on Debian) never passes by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import ROOT

MONITORING = ROOT / "deploy" / "monitoring"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboards" / "gpu-webhook.json"
HERE = Path(__file__).parent


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is not None:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail(f"{name} is not installed but can be: run scripts/install-tools")
    pytest.skip(
        f"{name} is not installed and cannot be installed here (needs root and apt-get): "
        "install Debian's prometheus package"
    )


def rule_groups() -> dict[str, Any]:
    """The PrometheusRule's ``spec``: a Prometheus rule file (``groups:``)."""
    spec: dict[str, Any] = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    return spec


def write_rule_file(directory: Path) -> Path:
    path = directory / "prometheusrule.rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    return path


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups()["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return board


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' panels included."""
    found = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((inner["title"], target["expr"]))
    return found
