"""``gpu-webhook rules admission-policies``: the core rules as admission policies, on stdout
or one file per policy, what stays in the webhook on stderr (issue 43)."""

import json
from pathlib import Path

import pytest
import yaml

from tests.builders import ROOT, RULES
from webhook.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["rules", "admission-policies", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_it_prints_what_deploy_base_installs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, RULES)
    assert code == 0
    printed = list(yaml.safe_load_all(out))
    base = ROOT / "deploy" / "base" / "admission-policies" / "core-gpu-access.yaml"
    assert list(yaml.safe_load_all(base.read_text())) == printed[:2]
    assert "skipped: hide-gpus-from-non-gpu-containers: env.hideGPUsFromNonGPUContainers" in err


def test_json_is_one_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, RULES, "-o", "json")
    assert code == 0
    listed = json.loads(out)
    assert listed["kind"] == "List"
    assert "MutatingAdmissionPolicy" in [o["kind"] for o in listed["items"]]


def test_output_dir_writes_one_file_per_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, RULES, "--output-dir", tmp_path)
    assert code == 0
    assert "policy files written under" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "core-gpu-access.yaml",
        "core-hide-gpus.yaml",
        "core-tolerations.yaml",
        "core-workload-quantities.yaml",
    ]


def test_rule_objects_are_merged_as_the_server_merges_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "objects.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: small}\n"
        "spec: {validate: [{maxGPUsPerPod: 2}]}\n"
    )
    code, out, _ = run(capsys, RULES, "--objects", tmp_path / "objects.yaml")
    assert code == 0
    names = [o["metadata"]["name"] for o in yaml.safe_load_all(out)]
    assert "gpu-webhook-core-rule-small" in names


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        pytest.param(["/nonexistent"], 2, "/nonexistent: no such directory or file", id="no-rules"),
        pytest.param([RULES, "--objects", "/nonexistent.yaml"], 2, "/nonexistent.yaml", id="no-objects"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str | Path], code: int, said: str
) -> None:
    got, _, err = run(capsys, *args)
    assert got == code
    assert said in err
    assert "Traceback" not in err


def test_broken_rules_print_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: x}\n"
        "spec: {validate: [{maxGPUsPerPod: -1}]}\n"
    )
    code, out, err = run(capsys, tmp_path)
    assert code == 1
    assert out == ""
    assert "nothing printed" in err
