"""The real PolicyReport CRDs' v1alpha2 schema, as a validator for what the audit writes."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "policyreport"
FILES = {
    "PolicyReport": "wgpolicyk8s.io_policyreports.yaml",
    "ClusterPolicyReport": "wgpolicyk8s.io_clusterpolicyreports.yaml",
}


def _closed(schema: Any) -> Any:
    """Unknown fields refused: the API server prunes what a structural schema does not
    declare, so a field we write that is not in the schema would be lost without a word."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@cache
def validator(kind: str, version: str = "v1alpha2") -> Draft7Validator:
    crd = yaml.safe_load((CRDS / FILES[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return Draft7Validator(_closed(served["schema"]["openAPIV3Schema"]))


def assert_valid_report(report: dict[str, Any]) -> None:
    assert report["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    errors = sorted(validator(report["kind"]).iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
