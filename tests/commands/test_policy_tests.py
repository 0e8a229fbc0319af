"""``gpu-webhook test``: the shipped suites pass in CI, a suite that must fail fails (exit 1,
a JUnit failure), an unusable suite is exit 2, and every answer is check's own."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
import yaml

from tests.builders import INVENTORY, ROOT, RULES
from webhook.cli import main
from webhook.engine.policy.policytest import suite_schema
from webhook.files import policysuites

SUITES = ROOT / "policy-tests"
SCHEMAS = ROOT / "tests" / "schemas"
OBJECTS = SUITES / "rules" / "objects.yaml"


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["test", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def junit_of(path: Path) -> ET.Element:
    xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(str(path))
    return ET.parse(path).getroot()


def test_the_shipped_suites_pass(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"

    code, out, _ = run(capsys, SUITES, "--junit", report, "--no-color")

    assert code == 0, out
    root = junit_of(report)
    cases = root.findall("./testsuite/testcase")
    assert (root.get("failures"), root.get("errors")) == ("0", "0")
    # Every suite shipped is found: the shipped rules' and the docs' examples.
    assert {Path(c.get("classname", "")).name for c in cases} == {
        "shipped-rules.yaml",
        "docs-examples.yaml",
        "policy-objects.yaml",
    }
    assert (
        out.splitlines()[-1]
        == f"{len(cases)} tests in 5 suites: {len(cases)} passed, 0 failed, 0 errors"
    )


def suite(directory: Path, results: list[dict[str, Any]], **fields: Any) -> Path:
    """A suite in ``directory`` on the shipped rules, inventory and objects."""
    relative = lambda path: os.path.relpath(path, directory)  # noqa: E731
    body = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyTest",
        "metadata": {"name": "must-fail"},
        "rules": [relative(RULES)],
        "inventory": relative(INVENTORY),
        "resources": [relative(OBJECTS)],
        "results": results,
        **fields,
    }
    path = directory / "suite.yaml"
    path.write_text(json.dumps(body, indent=2))
    return path


def test_a_suite_that_must_fail_exits_1_with_a_junit_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "junit.xml"
    suite(
        tmp_path,
        [
            {"resources": ["typo"], "result": "allowed"},
            {"resources": ["one-gpu"], "result": "allowed"},
        ],
    )

    code, out, _ = run(capsys, tmp_path, "--junit", report, "--no-color")

    assert code == 1
    failed, passed = junit_of(report).findall("./testsuite/testcase")
    failure = failed.find("failure")
    assert failure is not None
    assert failure.get("message") == "expected allowed, got denied by builtin/unknownResource"
    assert failed.get("name", "").startswith("Pod team-a/typo: expected allowed (")
    assert passed.find("failure") is None
    assert "    expected allowed, got denied by builtin/unknownResource" in out.splitlines()


def test_junit_goes_to_standard_output_with_o_junit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    suite(tmp_path, [{"resources": ["typo"], "result": "warned"}])

    code, out, _ = run(capsys, tmp_path, "-o", "junit")

    assert code == 1
    (case,) = ET.fromstring(out).findall("./testsuite/testcase")
    assert case.find("failure") is not None


@pytest.mark.parametrize(
    ("results", "said"),
    [
        pytest.param(
            [{"resources": ["nothere"], "result": "allowed"}],
            'results[0].resources[0]: no object "nothere" in the suite\'s resources',
            id="an object the resources do not hold",
        ),
        pytest.param(
            [{"resources": ["typo", "one-gpu"], "result": "allowed", "kind": "Deployment"}],
            'results[0].resources[0]: no object "typo"',
            id="an object of another kind",
        ),
    ],
)
def test_an_expectation_of_no_object_is_an_unusable_suite(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, results: list[Any], said: str
) -> None:
    suite(tmp_path, results)

    code, out, err = run(capsys, tmp_path, "-o", "json")

    assert code == 2
    first = json.loads(out)[0]
    assert first["status"] == "error"
    assert first["problems"][0].startswith(said)
    assert err.startswith(f"error: {tmp_path / 'suite.yaml'}:")


def test_a_name_of_two_objects_asks_for_the_kind(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    twice = tmp_path / "twice.yaml"
    text = OBJECTS.read_text()
    twice.write_text(text + "---\n" + text.split("---")[0].replace("kind: Pod", "kind: Job"))
    suite(
        tmp_path,
        [{"resources": ["one-gpu"], "result": "allowed"}],
        resources=["twice.yaml"],
    )

    code, out, _ = run(capsys, tmp_path, "-o", "json")

    assert code == 2
    assert json.loads(out)[0]["problems"] == [
        'results[0].resources[0]: "one-gpu" names 2 objects: give KIND/NAME or '
        "NAMESPACE/KIND/NAME, or the result's kind or namespace"
    ]


def test_unusable_rules_make_the_suite_unusable_and_the_others_still_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "rules").mkdir()
    (broken / "rules" / "bad.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: x}\n"
        "spec: {validate: [{maxGPUsPerPods: 2}]}\n"
    )
    suite(broken, [{"resources": ["typo"], "result": "denied"}], rules=["rules"])
    good = tmp_path / "good"
    good.mkdir()
    suite(good, [{"resources": ["typo"], "result": "denied"}])

    code, out, _ = run(capsys, tmp_path, "-o", "json")

    assert code == 2
    unusable, passed = json.loads(out)
    assert unusable["problems"][0].startswith("rules: the rules are not usable: ")
    assert (
        'unknown check "maxGPUsPerPods" (did you mean "maxGPUsPerPod"?)' in unusable["problems"][0]
    )
    assert unusable["problems"][0].endswith("; run gpu-webhook rules lint on them")
    assert passed["status"] == "pass"


@pytest.mark.parametrize(
    ("labels", "result"),
    [
        pytest.param({"tier": "bronze"}, "denied", id="labels the selector matches"),
        pytest.param({"tier": "gold"}, "allowed", id="labels it does not match"),
    ],
)
def test_namespace_labels_are_given_to_rules_that_select_namespaces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, labels: dict[str, str], result: str
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bronze.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: bronze}\n"
        "spec:\n  match: {namespaceSelector: {matchLabels: {tier: bronze}}}\n"
        "  validate: [{maxGPUsPerPod: 0}]\n"
    )
    suite(
        tmp_path,
        [{"resources": ["one-gpu"], "result": result}],
        rules=["rules", os.path.relpath(RULES, tmp_path)],  # merged as one rule set
        namespaces=[{"name": "team-a", "labels": labels}],
    )

    code, out, _ = run(capsys, tmp_path, "-o", "json")

    assert code == 0, out
    assert json.loads(out)[0]["actual"] == result + (
        " by bronze/maxGPUsPerPod" if result == "denied" else ""
    )


def test_each_object_of_a_json_list_gets_its_own_answer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A JSON file's objects all sit on its first line: answers are matched by object."""
    items = list(yaml.safe_load_all(OBJECTS.read_text()))
    (tmp_path / "list.json").write_text(json.dumps({"kind": "List", "items": items}))
    suite(
        tmp_path,
        [
            {"resources": ["typo"], "result": "denied", "rule": "builtin/unknownResource"},
            {"resources": ["web"], "result": "allowed"},
        ],
        resources=["list.json"],
    )

    code, out, _ = run(capsys, tmp_path, "-o", "json")

    assert code == 0, out


@pytest.mark.parametrize(
    ("bound", "said"),
    [
        pytest.param("MAX_OBJECTS", "objects in this run", id="objects judged"),
        pytest.param("MAX_CASES", "tests in this run", id="tests compared"),
    ],
)
def test_a_run_past_its_bounds_stops_and_says_what_to_do(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bound: str,
    said: str,
) -> None:
    monkeypatch.setattr(policysuites, bound, 1)
    suite(tmp_path, [{"resources": ["typo", "web"], "result": "allowed"}])

    code, out, _ = run(capsys, tmp_path, "-o", "json")

    assert code == 2
    last = json.loads(out)[-1]
    assert said in last["problems"][0]
    assert "split the suites" in last["problems"][0]


def test_no_suite_found_is_exit_2_with_what_a_suite_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\n")

    code, _, err = run(capsys, tmp_path)

    assert code == 2
    assert err == (
        f"gpu-webhook test: no GPUPolicyTest suite in {tmp_path}: a suite is a YAML file "
        "with kind: GPUPolicyTest (gpu-webhook rules schema --suite prints its schema)\n"
    )


def test_every_answer_is_check_s_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped rules' suite judges its objects with check's own function: the findings
    of each case are those check -o json gives the object."""
    code, out, _ = run(capsys, SUITES / "rules", "-o", "json")
    assert code == 0
    tested = {
        (c["kind"], c["namespace"], c["name"]): c["findings"]
        for c in json.loads(out)
        if c["suite"] == "shipped-rules"
    }
    main(
        ["check", str(OBJECTS), "--rules", str(RULES), "--inventory", str(INVENTORY), "-o", "json"]
    )
    checked = {
        (r["kind"], r["namespace"], r["name"]): r["findings"]
        for r in json.loads(capsys.readouterr().out)
    }
    assert tested == checked


def test_rules_schema_suite_prints_the_suite_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "schema", "--suite"]) == 0
    assert json.loads(capsys.readouterr().out) == suite_schema()


def test_the_table_in_the_docs_is_the_command_s_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # as docs/cli.md runs it: paths relative to the checkout
    code, out, _ = run(capsys, "policy-tests/rules/", "--no-color")
    assert code == 0
    docs = (ROOT / "docs" / "cli.md").read_text()
    block = docs[docs.index("$ gpu-webhook test policy-tests/rules/\n") :].split("```")[0]
    shown = [line for line in block.splitlines()[1:] if line != "..."]
    lines = out.splitlines()
    assert shown == [*lines[:3], lines[-1]]
