"""docs/deploy.md lists exactly the RBAC rules the rendered manifests grant: no permission
granted that the docs leave out (an operator reviews the docs, not the YAML), and none
documented that the manifests lack. The opt-in overlays that grant more (the audit, the
runtime sync of the match conditions) are listed with what they add."""

from __future__ import annotations

import re
from typing import Any

from tests.deploy.test_manifests import ROOT, render

Row = tuple[str, str, str, str, frozenset[str], str, frozenset[str]]


def granted(objs: tuple[dict[str, Any], ...], manifests: str) -> set[Row]:
    rows: set[Row] = set()
    for obj in objs:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        role = f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] == "Role":
            role += f" (namespace {obj['metadata']['namespace']})"
        for rule in obj.get("rules") or []:
            for group in rule.get("apiGroups") or [""]:
                rows.add(
                    (
                        manifests,
                        role,
                        group or "core",
                        "",
                        frozenset(rule.get("resources") or []),
                        ", ".join(sorted(rule.get("resourceNames") or [])) or "any",
                        frozenset(rule.get("verbs") or []),
                    )
                )
    return rows


def documented() -> set[Row]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"<!-- rbac:begin -->\n(.*?)<!-- rbac:end -->", text, re.S)
    assert block, "docs/deploy.md lost its rbac table markers"
    rows: set[Row] = set()
    for line in block.group(1).splitlines()[2:]:
        manifests, role, group, resources, names, verbs = (
            c.strip() for c in line.strip().strip("|").split("|")
        )
        rows.add(
            (
                manifests,
                role,
                group,
                "",
                frozenset(r.strip() for r in resources.split(",")),
                names,
                frozenset(v.strip() for v in verbs.split(",")),
            )
        )
    return rows


def test_the_docs_list_exactly_the_rules_the_rendered_rbac_grants() -> None:
    base = granted(render("base"), "base")
    # Each overlay renders the base too: its own rows are those the base does not have.
    added = {
        row
        for overlay, manifests in (
            ("overlays/audit", "audit"),
            ("overlays/match-conditions-sync", "match-conditions-sync"),
        )
        for row in granted(render(overlay), manifests)
        if ("base", *row[1:]) not in base
    }
    assert documented() == base | added
