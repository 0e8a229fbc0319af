"""Finding and reading policy test suites: files that declare the kind, each problem at its
file, line and field, every input bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import ROOT
from webhook.engine.policy.policytest import suite_schema
from webhook.files import policysuites
from webhook.files.policysuites import find_suites

SUITE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyTest
metadata:
  name: mine
rules: [rules]
resources: [pods.yaml]
results:
  - resources: [p]
    result: allowed
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "pods.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    (tmp_path / "suite.yaml").write_text(SUITE)
    return tmp_path


def test_a_directory_is_searched_for_files_that_declare_the_kind(tree: Path) -> None:
    nested = tree / "team" / "deeper"
    nested.mkdir(parents=True)
    (nested / "suite.yml").write_text(
        SUITE.replace("[rules]", "[../../rules]").replace("[pods.yaml]", "[../../pods.yaml]")
    )
    (tree / ".git").mkdir()
    (tree / ".git" / "suite.yaml").write_text(SUITE)

    suites, errors = find_suites([str(tree)])

    assert errors == []
    assert [Path(s.source).relative_to(tree) for s in suites] == [
        Path("suite.yaml"),
        Path("team/deeper/suite.yml"),
    ]
    assert suites[1].rules == (str(nested / "../../rules"),)


def test_paths_are_relative_to_the_suite_file(tree: Path) -> None:
    (suite,), _ = find_suites([str(tree / "suite.yaml")])
    assert Path(suite.resources[0]).resolve() == tree / "pods.yaml"


def test_a_file_named_on_the_command_line_must_be_a_suite(tree: Path) -> None:
    _, (error,) = find_suites([str(tree / "pods.yaml")])
    assert error.message == "holds no GPUPolicyTest document"


@pytest.mark.parametrize(
    ("change", "line", "message"),
    [
        pytest.param(
            ("result: allowed", "result: allow"),
            9,
            'results[0].result: "allow" is not one of allowed, denied, warned (did you mean '
            '"allowed"?)',
            id="a misspelt result",
        ),
        pytest.param(
            ("    result: allowed", "    result: allowed\n    rules: x"),
            8,
            'results[0]: unknown field "rules" (did you mean "rule"?); the fields: kind, '
            "message, namespace, patch, patched, resources, result, rule",
            id="an unknown field",
        ),
        pytest.param(
            ("rules: [rules]", "rules: [/etc/gpu-rules]"),
            5,
            "rules[0]: give a path relative to the suite file, so that the suite works "
            "wherever it is checked out",
            id="an absolute path",
        ),
        pytest.param(
            ("[pods.yaml]", "[pod.yaml]"),
            6,
            "resources[0]: {dir}/pod.yaml: no such file or directory",
            id="a missing file",
        ),
        pytest.param(
            ("kind: GPUPolicyTest", "kind: GPUPolicytests"),
            1,
            'kind: "GPUPolicytests" (did you mean "GPUPolicyTest"?)',
            id="a misspelt kind",
        ),
        pytest.param(
            ("rules: [rules]\n", ""),
            1,
            "rules: missing",
            id="no rules",
        ),
        pytest.param(
            ("    result: allowed", "    result: allowed\n    rule: builtin/capacity"),
            10,
            "results[0].rule: goes with denied or warned: an object allowed without a warning "
            "has no finding to name",
            id="a rule for an allowed object",
        ),
    ],
)
def test_a_bad_suite_is_told_at_its_line_and_field(
    tree: Path, change: tuple[str, str], line: int, message: str
) -> None:
    (tree / "suite.yaml").write_text(SUITE.replace(*change))

    suites, errors = find_suites([str(tree)])

    assert suites == []
    assert [(e.source, e.line, e.message) for e in errors] == [
        (str(tree / "suite.yaml"), line, message.format(dir=tree))
    ]


def test_a_suite_past_its_size_is_refused_unparsed(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(policysuites, "MAX_SUITE_BYTES", 100)
    _, (error,) = find_suites([str(tree)])
    assert "holds more than 0 MiB" in error.message
    assert "name them in resources" in error.message


@pytest.mark.parametrize(
    ("bound", "value", "said"),
    [
        pytest.param("MAX_FILES_LOOKED_AT", 1, "more than 1 files", id="files looked at"),
        pytest.param("MAX_SUITES", 1, "more than 1 suites", id="suites"),
    ],
)
def test_a_walk_past_its_bounds_stops_and_says_what_to_do(
    tree: Path, monkeypatch: pytest.MonkeyPatch, bound: str, value: int, said: str
) -> None:
    (tree / "second.yaml").write_text(SUITE)
    monkeypatch.setattr(policysuites, bound, value)

    _, errors = find_suites([str(tree)])

    assert said in errors[-1].message
    assert "name the directories that hold the suites" in errors[-1].message


def test_the_shipped_suite_schema_is_the_generated_one() -> None:
    shipped = json.loads((ROOT / "schema" / "policytest.schema.json").read_text())
    assert shipped == suite_schema(), (
        "run: gpu-webhook rules schema --suite > schema/policytest.schema.json"
    )
