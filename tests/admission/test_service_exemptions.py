"""The service warns of exemptions by namespace name that a namespace creator could take
(issue 41): once per name, at start and whenever the rules or the namespaces change; names
only where the namespaces are known."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from tests.builders import INVENTORY, RULES
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.service import AdmissionService
from webhook.files.rulefiles import RuleStore

STACK = {"gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu"}


class WatchedNamespaces(StaticInventorySource):
    """A file's nodes, and the namespaces a watch would have listed."""

    def __init__(self, names: set[str] | None) -> None:
        super().__init__(str(INVENTORY))
        self.listed: dict[str, Mapping[str, str]] | None = (
            None if names is None else {name: {} for name in names}
        )

    def namespaces(self) -> Mapping[str, Mapping[str, str]] | None:
        return self.listed


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    text = "an exemption a namespace creator could take"
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(text)]


def _names(lines: list[str]) -> set[str]:
    return {line.split("exempts namespace ")[1].split(",")[0] for line in lines}


def test_each_exempted_name_that_does_not_exist_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")
    source = WatchedNamespaces({"default", "kube-system", "gpu-operator"})
    service = AdmissionService(rules=RuleStore(str(RULES)), inventory=source)
    service.ready()
    service.ready()
    assert _names(warned(caplog)) == STACK - {"gpu-operator"}
    assert len(warned(caplog)) == 3


def test_a_name_created_since_is_no_longer_warned_and_one_deleted_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")
    source = WatchedNamespaces({"kube-system", *STACK})
    service = AdmissionService(rules=RuleStore(str(RULES)), inventory=source)
    service.ready()
    assert warned(caplog) == []

    source.listed = {"kube-system": {}, "gpu-operator": {}}
    service.ready()

    assert _names(warned(caplog)) == STACK - {"gpu-operator"}
    assert len(service.exemption_warnings) == 3


def test_namespaces_not_known_say_nothing_of_names(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_webhook.service")
    service = AdmissionService(rules=RuleStore(str(RULES)), inventory=WatchedNamespaces(None))
    service.ready()
    assert warned(caplog) == []
