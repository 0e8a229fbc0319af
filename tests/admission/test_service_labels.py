"""The service warns of rules keyed on labels no GPU node carries, at start and when the
cluster view changes (issue 31)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from webhook.admission.inventory import StaticInventorySource
from webhook.admission.service import AdmissionService
from webhook.files.rulefiles import RuleStore

CASES = Path(__file__).resolve().parents[1] / "cases"
RULES = str(CASES / "_rules" / "dra-policies")
DRA_ONLY = str(CASES / "_inventories" / "dra-gpucluster.yaml")
LABELLED = str(CASES / "_inventories" / "dra-gpucluster-labelled.yaml")


class SwitchingSource(StaticInventorySource):
    """A file's nodes, until ``switch`` shows another file's: the cluster view changes."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(first)
        self.other = StaticInventorySource(second)

    def switch(self) -> None:
        self.snapshot = self.other.snapshot  # type: ignore[method-assign]
        self.devices = self.other.devices  # type: ignore[method-assign]


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no GPU node carries" in r.getMessage()]


def test_rules_keyed_on_labels_a_dra_only_cluster_lacks_are_logged_at_start_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")

    service = AdmissionService(rules=RuleStore(RULES), inventory=StaticInventorySource(DRA_ONLY))
    service.ready()
    service.ready()

    lines = warned(caplog)
    assert len(lines) == 2, lines
    assert "rule vision-products keys on node label nvidia.com/gpu.product" in lines[0]
    assert "productName" in lines[0]
    assert "rule llm-gpu-memory keys on node label nvidia.com/gpu.memory" in lines[1]


def test_the_warning_comes_when_the_cluster_view_loses_the_labels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")
    source = SwitchingSource(LABELLED, DRA_ONLY)
    service = AdmissionService(rules=RuleStore(RULES), inventory=source)
    service.ready()
    assert warned(caplog) == []
    assert service.label_warnings == ()

    source.switch()
    service.ready()

    assert len(warned(caplog)) == 2
    assert len(service.label_warnings) == 2
