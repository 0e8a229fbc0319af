"""Names nobody checked, in every output of ``check``, ``audit``, ``explain`` and
``inventory``: whatever an object's name, namespace, label, container, image or resource
name, a node's name or product, a rule's message or label, or a file's path holds, each
format parses back with a real parser (``json``, PyYAML, ``xml.etree``), ``-o yaml`` holds
exactly the objects given (as the webhook would change them) and no other, and text and
GitHub output hold no control character, no bare CR and no workflow command but those the
webhook meant (issue 41, item 7)."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.builders import RULES
from tests.hostiletext import ANY_TEXT, HOSTILE, RAW_CONTROL, runner_lines, starts_workflow_command
from webhook.cli import main

# Each example runs a command in every format: few examples, each hostile, and no
# shrinking (minutes per failure here; a failure prints its names whole).
EXAMPLES = settings(
    max_examples=10,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NAME = ANY_TEXT.filter(bool)
# Rule files with a lone surrogate are refused whole, in one line ("the rule files are not
# usable"): a rule's message and label keys are any other text.
RULE_TEXT = ANY_TEXT.filter(lambda text: not re.search("[\ud800-\udfff]", text))
# A file's name: what a file system holds (no "/", no NUL, no lone surrogate, 255 bytes).
FILE_NAME = (
    st.lists(
        st.one_of(
            st.sampled_from([h for h in HOSTILE if "\x00" not in h and "/" not in h]),
            st.characters(categories=["Cc", "Cf", "Zl", "Zs", "L", "N", "P", "S"]),
        ),
        max_size=12,
    )
    .map("".join)
    .map(lambda name: name.replace("/", "").replace("\x00", ""))
    .filter(lambda name: not re.search("[\ud800-\udfff]", name))
    .filter(lambda name: len(name.encode()) < 200)
)
# The GitHub annotations the webhook writes, and only those: "::level props::message",
# whose properties hold no ":" (escaped %3A).
ANNOTATION = re.compile(r"::(error|warning|notice) [^:]*::.*")
SUMMARY = re.compile(r"\d+ objects?: \d+ allowed, \d+ denied, \d+ unusable, \d+ with warnings")


@dataclass(frozen=True)
class Names:
    pod: str
    namespace: str
    label: str
    container: str
    sidecar: str
    image: str
    resource: str
    node: str
    product: str
    message: str
    required: str
    file: str


NAMES = st.builds(
    Names,
    pod=NAME,
    namespace=NAME,
    label=ANY_TEXT,
    container=NAME,
    sidecar=NAME,
    image=NAME,
    resource=NAME,
    node=NAME,
    product=NAME,
    message=RULE_TEXT,
    required=RULE_TEXT.filter(bool),
    file=FILE_NAME,
)


def objects(names: Names) -> list[dict[str, Any]]:
    """A pod the built-in checks deny, naming its container (requests without limits) and
    missing a required label, a pod that passes, and one with an extended resource of any
    name (refused as kubectl refuses an invalid resource name, or judged): every name in
    them the hostile one."""
    gpu = {
        "name": names.container,
        "image": names.image,
        "resources": {"requests": {"nvidia.com/gpu": "1"}},
    }
    sidecar = {"name": names.sidecar, "image": "busybox"}
    denied = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": names.pod, "namespace": names.namespace, "labels": {"x": names.label}},
        "spec": {"containers": [gpu, sidecar]},
    }
    resource = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{names.pod}-3", "namespace": names.namespace},
        "spec": {
            "containers": [
                {
                    "name": names.sidecar,
                    "image": "busybox",
                    "resources": {"limits": {f"example.com/{names.resource}": "1"}},
                }
            ]
        },
    }
    allowed = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{names.pod}-2", "namespace": names.namespace},
        "spec": {
            "containers": [
                {
                    "name": names.container,
                    "image": names.image,
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    return [denied, allowed, resource]


def inventory(names: Names) -> dict[str, Any]:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": names.node,
            "labels": {"nvidia.com/gpu.product": names.product, "nvidia.com/gpu.count": "8"},
        },
        "spec": {"unschedulable": True},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return {"apiVersion": "v1", "kind": "List", "items": [node]}


def rule_file(names: Names) -> dict[str, Any]:
    """A policy whose message and required label come from the hostile names."""
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": "hostile-messages"},
        "spec": {
            "order": 90,
            "validate": [
                {"maxGPUsPerPod": 0, "action": "warn", "message": names.message},
                {"requiredLabels": [names.required], "message": names.message},
            ],
        },
    }


@dataclass(frozen=True)
class Inputs:
    manifests: Path
    broken: Path
    inventory: Path
    rules: Path
    objects: list[dict[str, Any]]


@contextmanager
def written(names: Names) -> Iterator[Inputs]:
    """The manifests (as JSON, which holds any text), a broken file, the inventory and
    the rules, each under a name that holds the hostile file name."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        given_objects = objects(names)
        manifests = root / f"pods{names.file}.json"
        manifests.write_text(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": given_objects})
        )
        broken = root / f"broken{names.file}.yaml"
        broken.write_text("kind: [\n")
        nodes = root / f"nodes{names.file}.json"
        nodes.write_text(json.dumps(inventory(names)))
        rules = root / "rules"
        shutil.copytree(RULES, rules)
        (rules / "95-hostile.yaml").write_text(yaml.safe_dump(rule_file(names)))
        yield Inputs(manifests, broken, nodes, rules, given_objects)


def run(*args: str | Path) -> tuple[int, str, str]:
    """The command in this process (a process per run would make few examples); the
    recursion limit the command raises is put back, as hypothesis wants it."""
    out, err = io.StringIO(), io.StringIO()
    limit = sys.getrecursionlimit()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        sys.setrecursionlimit(limit)
    return code, out.getvalue(), err.getvalue()


def assert_terminal_safe(text: str, *, annotations: bool = False) -> None:
    """No raw control character (the writer's newline aside), no bare CR, nothing stdout
    cannot encode, and no line that starts a workflow command, but the webhook's own
    annotations in ``-o github``."""
    text.encode()
    assert not RAW_CONTROL.search(text), text
    for line in runner_lines(text):
        if annotations and line.startswith("::"):
            assert ANNOTATION.fullmatch(line), line
            assert "##[" not in line, line
            continue
        assert not starts_workflow_command(line), line


@EXAMPLES
@given(NAMES)
def test_every_check_format_carries_any_name(names: Names) -> None:
    with written(names) as inputs:
        common = ("--rules", inputs.rules, "--inventory", inputs.inventory)
        files = (inputs.manifests, inputs.broken)
        outputs = {o: run("check", *files, *common, "-o", o) for o in FORMATS}
    for code, _, err in outputs.values():
        assert code == 2  # the broken file
        assert_terminal_safe(err)
    results = json.loads(outputs["json"][1])
    judged = [r for r in results if r["status"] != "unusable"]
    assert [r["name"] for r in judged][:2] == [names.pod, f"{names.pod}-2"]
    assert judged[0]["status"] == "denied"
    # -o yaml: exactly the objects given, as the webhook would patch them, and no other.
    given_objects = {o["metadata"]["name"]: o for o in inputs.objects}
    expected = [jsonpatch.apply_patch(given_objects[r["name"]], r["patch"]) for r in judged]
    assert list(yaml.safe_load_all(outputs["yaml"][1])) == expected
    patch_lines = outputs["patch"][1].splitlines()
    assert [json.loads(line) for line in patch_lines[1::2]] == [r["patch"] for r in judged]
    assert all(line.startswith("# ") for line in patch_lines[::2])
    suites = ET.fromstring(outputs["junit"][1])
    assert suites.get("tests") == str(len(results))
    json.loads(outputs["sarif"][1])
    assert_terminal_safe(outputs["text"][1])
    assert_terminal_safe(outputs["github"][1], annotations=True)
    assert SUMMARY.fullmatch(outputs["github"][1].splitlines()[-1])


FORMATS = ("text", "json", "yaml", "patch", "junit", "sarif", "github")


@EXAMPLES
@given(NAMES)
def test_every_audit_format_carries_any_name(names: Names) -> None:
    with written(names) as inputs:
        common = ("--rules", inputs.rules, "--inventory", inputs.inventory)
        files = ("-f", inputs.manifests, "-f", inputs.broken)
        formats = ("text", "json", "policyreport", "junit", "sarif", "github")
        outputs = {o: run("audit", *files, *common, "-o", o) for o in formats}
    for code, _, err in outputs.values():
        assert code == 2
        assert_terminal_safe(err)
    report = json.loads(outputs["json"][1])
    assert {r["name"] for r in report["results"]} >= {names.pod}
    reports = list(yaml.safe_load_all(outputs["policyreport"][1]))
    assert {r["kind"] for r in reports} <= {"PolicyReport", "ClusterPolicyReport"}
    ET.fromstring(outputs["junit"][1])
    json.loads(outputs["sarif"][1])
    assert_terminal_safe(outputs["text"][1])
    assert_terminal_safe(outputs["github"][1], annotations=True)


@EXAMPLES
@given(NAMES)
def test_explain_and_inventory_carry_any_name(names: Names) -> None:
    with written(names) as inputs:
        explained = {
            o: run(
                "explain",
                "-f",
                inputs.manifests,
                "--inventory",
                inputs.inventory,
                "--rules",
                inputs.rules,
                "-o",
                o,
            )
            for o in ("text", "json")
        }
        listed = {
            o: run("inventory", "--inventory", inputs.inventory, "-o", o) for o in ("text", "json")
        }
    explanations = json.loads(explained["json"][1])
    assert [e["name"] for e in explanations][:2] == [names.pod, f"{names.pod}-2"]
    assert json.loads(listed["json"][1])
    for _, _, err in [*explained.values(), *listed.values()]:
        assert_terminal_safe(err)
    assert_terminal_safe(explained["text"][1])
    assert_terminal_safe(listed["text"][1])


def hostile_pod(tmp_path: Path, *, pod_name: str = "p", container: str) -> Path:
    """A requests-only GPU pod in team-a (denied, so every format says something of it)
    whose names are given, written as JSON: no YAML quoting stands between a name and
    the command."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": "team-a"},
        "spec": {
            "containers": [
                {
                    "name": container,
                    "image": "cuda",
                    "resources": {"requests": {"nvidia.com/gpu": 1}},
                }
            ]
        },
    }
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod))
    return path


def test_a_container_name_cannot_add_a_document_to_check_yaml(tmp_path: Path) -> None:
    """The issue's case: a name whose newlines end the comment and start a ConfigMap."""
    forged = "main\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: forged}\n#"
    path = hostile_pod(tmp_path, container=forged)

    code, out, _ = run("check", path, "--rules", RULES, "-o", "yaml")

    assert code == 1
    documents = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in documents] == ["Pod"]
    assert documents[0]["spec"]["containers"][0]["name"] == forged


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a\x01b\x0cc\x1bd", id="controls-in-junit"),
        pytest.param("\ud800", id="lone-surrogate"),
        pytest.param("]]>&<", id="markup"),
    ],
)
def test_junit_parses_whatever_a_name_holds(tmp_path: Path, name: str) -> None:
    path = hostile_pod(tmp_path, pod_name=name, container=name)

    _, out, _ = run("check", path, "--rules", RULES, "-o", "junit")

    case = ET.fromstring(out).find("testsuite/testcase")
    assert case is not None
    assert case.find("failure") is not None


def test_a_name_starts_no_workflow_command_in_text_output(tmp_path: Path) -> None:
    forged = "x\n::warning file=a::forged\r::error::forged ##[error]forged"
    path = hostile_pod(tmp_path, container=forged)

    _, out, _ = run("check", path, "--rules", RULES)

    assert_terminal_safe(out)
    assert "x\\n::warning file=a::forged\\r::error::forged ##\\x5berror]forged" in out


def test_rules_lint_names_a_hostile_key_without_its_controls(tmp_path: Path) -> None:
    policy = rule_file(Names(*(["x"] * 12)))
    policy["spec"]["validate"] = [{"\x1b[2J\n::error::forged": 1}]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(policy))

    code, _, err = run("rules", "lint", tmp_path)

    assert code == 1
    assert_terminal_safe(err)
    assert "\\x1b[2J" in err


@EXAMPLES
@given(NAMES)
def test_policy_test_suites_carry_any_name(names: Names) -> None:
    """``gpu-webhook test``: a suite expecting results of objects named anything."""
    with written(names) as inputs:
        body = {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicyTest",
            "metadata": {"name": "hostile"},
            "rules": [str(inputs.rules)],
            "inventory": str(inputs.inventory),
            "resources": [str(inputs.manifests)],
            "results": [
                {"resources": [names.pod], "result": "allowed"},
                {"resources": [names.required], "result": "denied"},
            ],
        }
        suite = inputs.rules.parent / "suites" / f"suite{names.file}.yaml"
        suite.parent.mkdir()
        suite.write_text(json.dumps(body))
        outputs = {o: run("test", suite.parent, "-o", o) for o in ("text", "json", "junit")}
    for _, _, err in outputs.values():
        assert_terminal_safe(err)
    assert_terminal_safe(outputs["text"][1])
    assert json.loads(outputs["json"][1])
    ET.fromstring(outputs["junit"][1])
