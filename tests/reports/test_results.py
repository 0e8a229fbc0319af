"""The CI formats of what no file holds: a kind a cluster audit could not list is still
reported, without a location that points nowhere; and of names that hold anything, still
valid against the published schemas."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostiletext import ANY_TEXT, RAW_CONTROL, runner_lines
from webhook.engine.policy.decision import Finding
from webhook.reports.results import (
    Outcome,
    artifact_uri,
    exit_code,
    github,
    junit,
    sarif,
    sarif_text,
)

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


# --- names that hold anything (issue 41) ---------------------------------------------------

NAMED = st.builds(
    Outcome,
    file=ANY_TEXT,
    line=st.integers(0, 10),
    status=st.sampled_from(["allowed", "denied", "unusable"]),
    kind=ANY_TEXT,
    namespace=ANY_TEXT,
    name=ANY_TEXT,
    findings=st.lists(
        st.builds(
            Finding,
            rule=ANY_TEXT,
            check=ANY_TEXT,
            action=st.sampled_from(["deny", "warn", "audit"]),
            message=ANY_TEXT,
            summary=ANY_TEXT,
            path=ANY_TEXT,
        ),
        max_size=3,
    ).map(tuple),
    warnings=st.lists(ANY_TEXT, max_size=2).map(tuple),
    problem=ANY_TEXT,
)
JUNIT = xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd")
SARIF = jsonschema.Draft4Validator(json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NAMED, min_size=1, max_size=3), st.booleans())
def test_every_ci_format_holds_any_name_and_stays_valid(outcomes, warnings_fail) -> None:
    report = junit(outcomes, suite="gpu-webhook check", warnings_fail=warnings_fail)
    JUNIT.validate(report)
    assert len(ET.fromstring(report).findall("testsuite/testcase")) == len(outcomes)
    SARIF.validate(json.loads(sarif_text(outcomes, command="check")))
    for line in runner_lines(github(outcomes, warnings_fail=warnings_fail)):
        assert not RAW_CONTROL.search(line)
        assert "##[" not in line
        assert not line.startswith("::") or re.fullmatch(
            r"::(error|warning|notice) [^:]*::.*", line
        )


@pytest.mark.parametrize(
    ("file", "uri"),
    [
        pytest.param("pods.yaml", "pods.yaml", id="plain"),
        pytest.param("my pods/a.yaml", "my%20pods/a.yaml", id="space"),
        pytest.param("a#b?.yaml", "a%23b%3F.yaml", id="fragment-and-query-marks"),
        pytest.param("a\nb\x1b.yaml", "a%0Ab%1B.yaml", id="controls"),
        pytest.param("é.yaml", "%C3%A9.yaml", id="unicode-as-utf-8"),
        pytest.param("\udcff.yaml", "%FF.yaml", id="bytes-that-were-not-utf-8"),
        pytest.param("-", "stdin", id="stdin"),
    ],
)
def test_a_sarif_location_is_a_percent_encoded_relative_uri(file, uri) -> None:
    assert artifact_uri(file) == uri
