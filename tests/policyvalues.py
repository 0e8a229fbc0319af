"""The golden cases of rule values checked against the cluster (issue 42):
``tests/cases/_policyvalues/<typo class>/`` holds ``rules/policy.yaml`` (one GPUPolicy with
the typo) and ``expected.yaml`` (the inventory, the namespaces a live cluster would show,
whether the rule can then be met at all, and the sentence every entry point says)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engine.evaluation.request import InventoryView
from webhook.files.inventoryfile import load_inventory_file

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "cases" / "_policyvalues"


@dataclasses.dataclass(frozen=True)
class Case:
    """One typo class: the policy, the cluster, and the sentence every entry point says."""

    name: str
    directory: Path
    inventory: Path
    namespaces: tuple[str, ...] | None
    blocking: bool
    says: str

    @property
    def document(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(
            (self.directory / "rules" / "policy.yaml").read_text()
        )
        return loaded

    @property
    def policy_name(self) -> str:
        return str(self.document["metadata"]["name"])

    def view(self) -> InventoryView:
        return load_inventory_file(str(self.inventory)).view()


def golden_cases() -> list[Case]:
    cases = []
    for directory in sorted(p for p in CASES.iterdir() if p.is_dir()):
        expected = yaml.safe_load((directory / "expected.yaml").read_text())
        names = expected.get("namespaces")
        cases.append(
            Case(
                name=directory.name,
                directory=directory,
                inventory=REPO / expected["inventory"],
                namespaces=tuple(names) if names is not None else None,
                blocking=bool(expected["blocking"]),
                says=str(expected["says"]),
            )
        )
    return cases


CASE_PARAMS = [pytest.param(c, id=c.name) for c in golden_cases()]
