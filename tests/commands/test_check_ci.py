"""``check`` and ``audit -f`` in a pipeline: every object and every unusable file in the
machine output with its file and line, JUnit and SARIF valid against their published
schemas (vendored in tests/schemas), GitHub annotations, and ``--warn-exit-code``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
import yaml

from tests.builders import INVENTORY, RULES
from tests.running import gpu_webhook

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"

# Line 1 is a comment: each object's line is that of its first key.
OBJECTS = """\
# a denied pod, an allowed one and a workload that only warns
apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: team-b}
spec:
  containers:
  - name: main
    image: cuda
    resources: {requests: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: fine, namespace: team-b}
spec:
  containers:
  - name: main
    image: cuda
    resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: wide, namespace: team-a}
spec:
  replicas: 20
  selector: {matchLabels: {app: wide}}
  template:
    metadata: {labels: {app: wide}}
    spec:
      containers:
      - name: main
        image: cuda
        resources: {limits: {nvidia.com/gpu: 1}}
"""
WARNS_ONLY = OBJECTS.split("---\n")[2]
BROKEN = "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    written = {}
    for name, text in [("objects", OBJECTS), ("broken", BROKEN), ("warns", WARNS_ONLY)]:
        written[name] = tmp_path / f"{name}.yaml"
        written[name].write_text(text)
    return written


def check(*args: str | Path) -> tuple[int, str, str]:
    done = gpu_webhook("check", *args, "--rules", RULES, "--inventory", INVENTORY)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stdout, done.stderr


def test_json_holds_every_object_and_every_unusable_file_with_its_line(
    files: dict[str, Path],
) -> None:
    code, out, _ = check(files["broken"], files["objects"], "-o", "json")
    assert code == 2
    entries = json.loads(out)
    placed = {(e["status"], e["name"]): (e["file"], e["line"]) for e in entries}
    assert placed == {
        ("denied", "notebook"): (str(files["objects"]), 2),
        ("allowed", "fine"): (str(files["objects"]), 11),
        ("allowed", "wide"): (str(files["objects"]), 20),
        ("unusable", ""): (str(files["broken"]), 4),
    }
    broken = next(e for e in entries if e["status"] == "unusable")
    assert broken["source"] == f"{files['broken']}:4"
    assert "not valid YAML" in broken["error"]


def test_text_names_each_object_by_file_and_line_and_counts_the_unusable(
    files: dict[str, Path],
) -> None:
    code, out, err = check(files["objects"], files["broken"])
    assert code == 2
    assert f"Pod team-b/notebook ({files['objects']}:2): DENIED" in out
    assert out.splitlines()[-1] == "4 objects: 2 allowed, 1 denied, 1 unusable, 1 with warnings"
    assert f"error: {files['broken']}:4: not valid YAML" in err


def test_an_object_kubectl_would_refuse_is_unusable_with_its_name_and_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "refused.yaml"
    path.write_text("\n\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: three}\n"
                    "spec: {replicas: three}\n")  # fmt: skip
    code, out, _ = check(path, "-o", "json")
    assert code == 2
    (entry,) = json.loads(out)
    assert (entry["status"], entry["kind"], entry["name"], entry["line"]) == (
        "unusable", "Deployment", "three", 3,
    )  # fmt: skip
    assert '"three" is not a whole number' in entry["error"]


def test_junit_is_valid_with_a_case_per_object_a_failure_per_denial_and_an_error_per_unusable(
    files: dict[str, Path],
) -> None:
    code, out, _ = check(files["objects"], files["broken"], "-o", "junit")
    assert code == 2
    xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(out)
    suite = ET.fromstring(out).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    denied = cases[f"Pod team-b/notebook ({files['objects']}:2)"]
    failure = denied.find("failure")
    assert failure is not None
    assert failure.get("type") == "builtin/requestsWithoutLimits"
    assert 'Set resources.limits["nvidia.com/gpu"] to 1.' in (failure.get("message") or "")
    warned = cases[f"Deployment team-a/wide ({files['objects']}:20)"]
    assert warned.find("failure") is None
    assert "builtin/clusterCapacity" in (warned.findtext("system-out") or "")
    assert cases[f"{files['broken']}:4"].find("error") is not None


def test_junit_under_warn_exit_code_makes_warnings_failures(files: dict[str, Path]) -> None:
    code, out, _ = check(files["warns"], "-o", "junit", "--warn-exit-code", "3")
    assert code == 3
    xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(out)
    (case,) = ET.fromstring(out).iter("testcase")
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "builtin/clusterCapacity"


def test_sarif_is_valid_and_places_each_finding_with_its_rule_and_fix(
    files: dict[str, Path],
) -> None:
    code, out, _ = check(files["objects"], files["broken"], "-o", "sarif")
    assert code == 2
    log = json.loads(out)
    schema = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    (run,) = log["runs"]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    found = {
        (
            r["ruleId"],
            r["level"],
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
        )
        for r in run["results"]
    }
    # Outside the working directory: absolute file URIs.
    objects, broken = files["objects"].as_uri(), files["broken"].as_uri()
    assert found == {
        # At the container the finding names (spec.containers[0]), not the document's line 2.
        ("builtin/requestsWithoutLimits", "error", objects, 7),
        ("builtin/clusterCapacity", "warning", objects, 20),
        ("gpu-webhook/unusable", "error", broken, 4),
    }
    denial = next(r for r in run["results"] if r["ruleId"] == "builtin/requestsWithoutLimits")
    assert 'Set resources.limits["nvidia.com/gpu"] to 1.' in denial["message"]["text"]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in run["results"])


def test_sarif_uris_are_relative_to_the_checkout(tmp_path: Path, files: dict[str, Path]) -> None:
    done = gpu_webhook(
        "check", "objects.yaml", "--rules", RULES, "--inventory", INVENTORY, "-o", "sarif",
        cwd=tmp_path,
    )  # fmt: skip
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in json.loads(done.stdout)["runs"][0]["results"]
    }
    assert uris == {"objects.yaml"}


def test_github_annotations_sit_at_file_and_line(files: dict[str, Path]) -> None:
    code, out, _ = check(files["objects"], "-o", "github")
    assert code == 1
    lines = out.splitlines()
    assert (
        f"::error file={files['objects']},line=7,title=builtin/requestsWithoutLimits%3A "
        "Pod team-b/notebook::container" in "\n".join(lines)
    )
    assert any(
        ln.startswith(f"::warning file={files['objects']},line=20,title=builtin/clusterCapacity")
        for ln in lines
    )
    assert lines[-1] == "3 objects: 2 allowed, 1 denied, 0 unusable, 1 with warnings"


@pytest.mark.parametrize(
    ("name", "extra", "code"),
    [
        pytest.param("warns", [], 0, id="a-warning-alone-exits-0"),
        pytest.param("warns", ["--warn-exit-code", "3"], 3, id="a-warning-exits-N"),
        pytest.param("objects", ["--warn-exit-code", "3"], 1, id="a-denial-still-exits-1"),
    ],
)
def test_warn_exit_code_sets_the_code_when_nothing_is_denied(
    files: dict[str, Path], name: str, extra: list[str], code: int
) -> None:
    assert check(files[name], *extra)[0] == code


def test_an_empty_input_is_unusable(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    code, out, err = check(empty, "-o", "json")
    assert code == 2
    assert json.loads(out)[0]["status"] == "unusable"
    assert "no objects" in err


def test_audit_files_report_unusable_input_in_json_and_text(files: dict[str, Path]) -> None:
    done = gpu_webhook(
        "audit", "-f", files["broken"], "-f", files["objects"], "--rules", RULES,
        "--inventory", INVENTORY, "-o", "json",
    )  # fmt: skip
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["summary"]["unusable"] == 1
    (broken,) = report["unusable"]
    assert (broken["file"], broken["line"]) == (str(files["broken"]), 4)
    assert report["summary"]["errors"] == [f"{files['broken']}:4: {broken['error']}"]
    sources = {r["name"]: r["source"] for r in report["results"]}
    assert sources["notebook"] == f"{files['objects']}:2"
    text = gpu_webhook(
        "audit", "-f", files["broken"], "-f", files["objects"], "--rules", RULES,
        "--inventory", INVENTORY,
    )  # fmt: skip
    assert "1 unusable" in text.stdout.splitlines()[-1]
    assert "SOURCE" in text.stdout.splitlines()[0]


@pytest.mark.parametrize("output", ["junit", "sarif", "github"])
def test_audit_writes_the_ci_formats_too(files: dict[str, Path], output: str) -> None:
    done = gpu_webhook(
        "audit", "-f", files["objects"], "--rules", RULES, "--inventory", INVENTORY,
        "-o", output, "--warn-exit-code", "4",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    if output == "junit":
        xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(done.stdout)
        assert "Pod team-b/notebook" in done.stdout
    elif output == "sarif":
        schema = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())
        jsonschema.Draft4Validator(schema).validate(json.loads(done.stdout))
    else:
        assert f"::error file={files['objects']},line=7," in done.stdout


def test_yaml_output_marks_denied_objects_in_a_comment_and_stays_loadable(
    files: dict[str, Path],
) -> None:
    code, out, _ = check(files["objects"], "-o", "yaml")
    assert code == 1
    assert (
        f"# Pod team-b/notebook ({files['objects']}:2): DENIED by builtin/requestsWithoutLimits"
        in out.splitlines()
    )
    assert f"# Pod team-b/fine ({files['objects']}:11): allowed" in out.splitlines()
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out)]
    assert names == ["notebook", "fine", "wide"]


HELM = """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-train
{{- if .Values.gpu }}
spec: {}
{{- end }}
"""
FILE_COMMANDS = [
    pytest.param(["check"], id="check"),
    pytest.param(["audit", "-f"], id="audit"),
    pytest.param(["explain", "-f"], id="explain"),
]


@pytest.mark.parametrize("command", FILE_COMMANDS)
@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("", "no objects: the input is empty (or only comments)", id="empty"),
        pytest.param("# todo\n---\n", "no objects: the input is empty", id="only-comments"),
        pytest.param(HELM, ":4: looks like an unrendered Helm template", id="helm-template"),
    ],
)
def test_empty_input_and_helm_templates_are_said_alike_by_every_command(
    tmp_path: Path, command: list[str], text: str, said: str
) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    done = gpu_webhook(*command, path, "--rules", RULES, "--inventory", INVENTORY)
    assert done.returncode == 2, done.stdout
    assert f"{path}{said}" in done.stderr or f"{path}: {said}" in done.stderr
    if "Helm" in said:
        assert "render it with helm template first" in done.stderr
    assert "Traceback" not in done.stderr


def test_audit_of_one_object_says_one_object(files: dict[str, Path]) -> None:
    done = gpu_webhook(
        "audit", "-f", files["warns"], "--rules", RULES, "--inventory", INVENTORY, "--no-color"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("1 object audited, 0 folded")
    assert done.stdout.splitlines()[0].split()[-1] == "SOURCE"


# A fine pod, then a CronJob whose second container asks for a GPU without a limit: the
# finding names spec.jobTemplate.spec.template.spec.containers[1], on line 26.
DEEP = """\
# two documents; the finding is deep in the second
apiVersion: v1
kind: Pod
metadata: {name: fine, namespace: team-b}
spec:
  containers:
  - name: main
    image: cuda
    resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  namespace: team-a
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: sidecar
            image: busybox
          - name: train
            image: cuda
            resources:
              requests:
                nvidia.com/gpu: 1
"""
DEEP_LINE = 26  # "- name: train"
DEEP_DOCUMENT = 11  # "apiVersion: batch/v1"


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP)
    assert DEEP.splitlines()[DEEP_LINE - 1].strip() == "- name: train"
    return path


@pytest.mark.parametrize("command", ["check", "audit"])
def test_each_ci_format_points_a_deep_finding_at_its_container_s_line(
    deep: Path, command: str
) -> None:
    args = (command, "-f", deep, "--rules", RULES, "--inventory", INVENTORY)
    github_out = gpu_webhook(*args, "-o", "github").stdout
    assert f"::error file={deep},line={DEEP_LINE},title=builtin/requestsWithoutLimits" in github_out
    log = json.loads(gpu_webhook(*args, "-o", "sarif").stdout)
    jsonschema.Draft4Validator(
        json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())
    ).validate(log)
    (result,) = [
        r for r in log["runs"][0]["results"] if r["ruleId"] == "builtin/requestsWithoutLimits"
    ]
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": DEEP_LINE}
    report = gpu_webhook(*args, "-o", "junit").stdout
    xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(report)
    (failure,) = ET.fromstring(report).iter("failure")
    assert failure.text is not None
    assert failure.text.startswith(f"{deep}:{DEEP_LINE}: deny builtin/requestsWithoutLimits")
    (case,) = [c for c in ET.fromstring(report).iter("testcase") if "nightly" in c.get("name", "")]
    assert f"({deep}:{DEEP_DOCUMENT})" in case.get("name", "")  # the object stays at its document


def test_a_finding_that_names_no_field_stays_on_the_document_s_line(files: dict[str, Path]) -> None:
    """clusterCapacity is about the whole workload: the Deployment's first line."""
    _, out, _ = check(files["objects"], "-o", "github")
    (warning,) = [ln for ln in out.splitlines() if "builtin/clusterCapacity" in ln]
    assert f"file={files['objects']},line=20," in warning
