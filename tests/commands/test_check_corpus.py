"""``gpu-webhook check`` over the corpus of real manifests, and its output contract.

The corpus is a copy in ``tests/corpus`` (origins in its ``INDEX.tsv``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.kubeschema import validation_error
from webhook.cli import main
from webhook.files.manifests import load_manifests

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus"
UNPARSEABLE = CORPUS / "_unparseable"
RULES = REPO / "rules"
CLUSTER = REPO / "tests" / "cases" / "_inventories" / "cluster.yaml"
NOT_MANIFESTS = {"INDEX.tsv", "README.md", "_unparseable/UNPARSEABLE.tsv"}
COMMAND = (sys.executable, "-m", "webhook", "check", "-o", "json")
JSON_KEYS = {"kind", "name", "namespace", "allowed", "messages", "warnings", "patch"}


def _manifests(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.yaml") if p.is_file())


PARSEABLE = [p for p in _manifests(CORPUS) if UNPARSEABLE not in p.parents]
# Files the API server refuses as they are stored (INDEX.tsv says why): check names the
# field, as kubectl apply would, and judges nothing in them.
REFUSED_BY_KUBERNETES = {
    "gpu-operator/plugin-workload-validation.yaml": (
        'spec.initContainers[0].resources.limits.FILLED_BY_VALIDATOR: "FILLED_BY_VALIDATOR" '
        "is not a container resource Kubernetes accepts"
    ),
    "kubernetes-website/pod-with-node-affinity.yaml": (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: the value "
        "is a list where Kubernetes wants an object"
    ),
}


def test_the_corpus_is_in_the_repository() -> None:
    assert CORPUS.is_dir(), f"the corpus is missing: expected {CORPUS}"
    assert len(PARSEABLE) > 100
    assert _manifests(UNPARSEABLE)


def test_every_corpus_file_that_is_not_a_manifest_is_known() -> None:
    others = {
        str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".yaml"
    }
    assert others == NOT_MANIFESTS


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", "--rules", str(RULES), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _is_builtin(obj: Any) -> bool:
    try:
        validation_error(obj)
    except kubernetes_validate.SchemaNotFoundError:
        return False  # a custom resource: kubernetes-validate knows only built-in kinds
    return True


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in PARSEABLE]
)
def test_check_handles_the_corpus_file_and_patches_stay_schema_valid(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = check(capsys, "-f", str(path), "--inventory", str(CLUSTER), "-o", "json")
    refused = REFUSED_BY_KUBERNETES.get(str(path.relative_to(CORPUS)))
    if refused:
        assert code == 2
        assert refused in err
        return
    assert code in (0, 1), err
    results = json.loads(out)
    documents, errors = load_manifests([str(path)])
    assert errors == []
    assert len(results) == len(documents)
    for result, doc in zip(results, documents, strict=True):
        assert set(result) >= JSON_KEYS
        assert result["allowed"] is (not result["messages"])
        patched = jsonpatch.apply_patch(dict(doc.obj), result["patch"])
        if not result["patch"] or not _is_builtin(doc.obj):
            continue
        before, after = validation_error(doc.obj), validation_error(patched)
        # A manifest that is already invalid (a kustomize patch without a selector) must not
        # get a different, new error from our patch.
        assert after == before, f"{result['kind']} {result['name']}: {after}"


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in _manifests(UNPARSEABLE)]
)
def test_an_unparseable_file_exits_2_naming_file_and_line(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = check(capsys, "-f", str(path), "-o", "json")
    assert code == 2
    assert re.search(rf"^error: {re.escape(str(path))}:\d+: not valid YAML: ", err, re.M), err


def test_the_command_over_the_whole_corpus_exits_2_and_reports_the_broken_files() -> None:
    result = subprocess.run(
        [*COMMAND, "-f", str(CORPUS), "--rules", str(RULES), "--inventory", str(CLUSTER)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    for path in _manifests(UNPARSEABLE):
        assert f"{path}:" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(json.loads(result.stdout)) > 100


# --- exit codes and output formats on small files ------------------------------------------

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {
        "containers": [
            {"name": "main", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 1}}}
        ]
    },
}
REQUESTS_ONLY = {
    **GPU_POD,
    "metadata": {"name": "broken"},
    "spec": {
        "containers": [
            {"name": "main", "image": "pytorch", "resources": {"requests": {"nvidia.com/gpu": 1}}}
        ]
    },
}


def _write(tmp_path: Path, name: str, *objects: Any) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("objects", "code"),
    [
        pytest.param([GPU_POD], 0, id="all allowed: 0"),
        pytest.param([GPU_POD, REQUESTS_ONLY], 1, id="any denied: 1"),
        pytest.param(
            [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}],
            0,
            id="pass-through only: 0",
        ),
    ],
)
def test_exit_code_says_whether_everything_was_allowed(
    objects: list[Any], code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(capsys, "-f", _write(tmp_path, "m.yaml", *objects))[0] == code


def test_unusable_input_exits_2_and_still_checks_the_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _write(tmp_path, "good.yaml", GPU_POD)
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: {name: [x\n", encoding="utf-8")
    code, out, err = check(capsys, "-f", good, "-f", str(broken), "-o", "json")
    assert code == 2
    entries = json.loads(out)
    assert [r["name"] for r in entries if r["status"] != "unusable"] == ["train"]
    assert [(r["file"], r["status"]) for r in entries if not r["name"]] == [
        (str(broken), "unusable")
    ]
    assert f"{broken}:" in err


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--rules", "/nonexistent"], id="missing rules directory"),
        pytest.param(["--inventory", "/nonexistent.yaml"], id="missing inventory"),
        pytest.param(["-f", "/nonexistent.yaml"], id="missing manifest"),
    ],
)
def test_unusable_rules_inventory_or_manifest_exit_2(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = check(capsys, "-f", _write(tmp_path, "m.yaml", GPU_POD), *args)
    assert code == 2
    assert "/nonexistent" in err


def test_json_output_holds_identity_decision_and_patch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = check(
        capsys, "-f", _write(tmp_path, "m.yaml", GPU_POD, REQUESTS_ONLY), "-o", "json"
    )
    assert code == 1
    first, second = json.loads(out)
    assert set(first) >= JSON_KEYS
    assert (first["kind"], first["name"], first["namespace"]) == ("Pod", "train", "ml")
    assert first["allowed"] is True
    assert first["messages"] == []
    assert {"op": "add", "path": "/spec/tolerations"} in [
        {"op": op["op"], "path": op["path"]} for op in first["patch"]
    ]
    assert second["allowed"] is False
    assert 'Set resources.limits["nvidia.com/gpu"] to 1' in second["messages"][0]


def test_yaml_output_is_the_mutated_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = check(capsys, "-f", _write(tmp_path, "m.yaml", GPU_POD), "-o", "yaml")
    (mutated,) = yaml.safe_load_all(out)
    assert mutated["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_patch_output_is_one_json_patch_per_object_after_a_comment_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    path = _write(tmp_path, "m.yaml", GPU_POD, service)
    _, out, _ = check(capsys, "-f", path, "-o", "patch")
    lines = out.splitlines()
    assert lines[0].startswith("# Pod ")
    assert lines[0].endswith(f"({path}:1)")
    assert lines[2].startswith("# Service default/s (")
    gpu_patch, service_patch = (json.loads(line) for line in lines[1::2])
    assert jsonpatch.apply_patch(GPU_POD, gpu_patch)["spec"]["tolerations"]
    assert service_patch == []


def test_text_output_gives_verdicts_findings_and_a_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = check(capsys, "-f", _write(tmp_path, "m.yaml", GPU_POD, REQUESTS_ONLY))
    assert code == 1
    assert "Pod ml/train" in out
    assert "ALLOWED" in out
    assert "DENIED" in out
    assert "deny  builtin/requestsWithoutLimits" in out
    assert "+  tolerations:" in out
    assert "no --inventory given" in err
