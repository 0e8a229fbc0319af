"""deploy/monitoring/prometheusrule.yaml with the real promtool: the rules load, every alert
has what an on-call engineer needs (a severity, a summary, a description, a runbook that
exists), and each alert's unit tests (alerts.promtest.yaml) pass."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builders import ROOT
from tests.monitoring.tools import HERE, alerts, tool, write_rule_file
from webhook.serving import metrics

RUNBOOKS = ROOT / "docs" / "monitoring.md"
SERVER_DOCS = ROOT / "docs" / "server.md"
ALERTS = [rule["alert"] for rule in alerts()]


def promtool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    checked = promtool("check", "rules", write_rule_file(tmp_path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


def test_every_alert_passes_its_promtool_unit_tests(tmp_path: Path) -> None:
    write_rule_file(tmp_path)
    shutil.copy(HERE / "alerts.promtest.yaml", tmp_path)
    tested = promtool("test", "rules", "alerts.promtest.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test_in_which_it_fires() -> None:
    text = (HERE / "alerts.promtest.yaml").read_text()
    firing = set(re.findall(r"alertname: (\w+)\n\s+eval_time: \S+\n\s+exp_alerts:\n\s+- ", text))
    assert set(ALERTS) <= firing, set(ALERTS) - firing


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


@pytest.mark.parametrize("rule", alerts(), ids=ALERTS)
def test_an_alert_has_a_severity_a_summary_and_a_runbook_that_exists(rule: dict) -> None:
    assert rule["labels"]["severity"] in ("warning", "critical")
    annotations = rule["annotations"]
    assert annotations["summary"]
    assert annotations["description"]
    path, _, fragment = annotations["runbook_url"].partition("#")
    assert path == "docs/monitoring.md"
    headings = re.findall(r"^#+ (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    assert fragment in {anchor(h) for h in headings}, f"no runbook section #{fragment}"


@pytest.mark.parametrize("name", ALERTS)
def test_the_server_docs_list_every_alert(name: str) -> None:
    assert f"`{name}`" in SERVER_DOCS.read_text()


def test_the_latency_alert_follows_the_webhooks_timeout() -> None:
    configurations = yaml.safe_load_all((ROOT / "deploy/base/webhooks.yaml").read_text())
    timeouts = {hook["timeoutSeconds"] for doc in configurations for hook in doc["webhooks"]}
    (timeout,) = timeouts
    rule = next(r for r in alerts() if r["alert"] == "GPUWebhookLatencyNearTimeout")
    threshold = float(rule["expr"].rsplit(">", 1)[1])
    assert threshold == timeout / 2
    assert f"the {timeout} s timeout" in rule["annotations"]["summary"]
    assert timeout in metrics.LATENCY._upper_bounds, "a p99 near the timeout must be measurable"
