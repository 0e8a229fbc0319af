"""The CI formats of what no file holds: a kind a cluster audit could not list is still
reported, without a location that points nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import xmlschema

from webhook.reports.results import Outcome, exit_code, github, junit, sarif

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
UNLISTED = Outcome(file="", line=0, status="unusable", problem="cannot list pytorchjobs: 403")


def test_sarif_of_an_error_without_a_file_has_no_location_and_stays_valid() -> None:
    log = sarif([UNLISTED], command="audit")
    schema = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    (result,) = log["runs"][0]["results"]
    assert result["locations"] == []
    assert "cannot list pytorchjobs: 403" in result["message"]["text"]


def test_github_and_junit_of_an_error_without_a_file() -> None:
    assert github([UNLISTED], warnings_fail=False).splitlines()[0] == (
        "::error title=gpu-webhook/unusable%3A input::cannot list pytorchjobs: 403"
    )
    xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(
        junit([UNLISTED], suite="gpu-webhook audit", warnings_fail=False)
    )
    assert exit_code([UNLISTED], warn_exit_code=3) == 2
