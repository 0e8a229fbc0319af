import json
import shutil
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.builders import INVENTORY
from tests.deploy.test_crds import as_json_schema, open_api
from tests.running import gpu_webhook
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_lint_accepts_the_shipped_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "lint", str(ROOT / "rules")]) == 0
    assert "no problems" in capsys.readouterr().out


def test_lint_reports_all_problems_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: GPUPolicy\nmetadata: {name: a}\n")
    (tmp_path / "b.yaml").write_text("kind: [\n")
    assert main(["rules", "lint", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "a.yaml: doc 1 (GPUPolicy a): apiVersion" in err
    assert "b.yaml:2: not valid YAML" in err
    assert "a.yaml: doc 1 (GPUPolicy a): spec: missing" in err  # not hidden by apiVersion
    assert "3 problems found" in err


def test_lint_of_a_missing_directory_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "lint", "/nonexistent/rules"]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"].endswith("2020-12/schema")


# --- what a rule author meets: each problem said plainly, at the command line ----------------

HEADER = "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\n"


def policy(name: str, spec: str) -> str:
    return f"{HEADER}metadata: {{name: {name}}}\nspec:\n{spec}"


def lint(*args: str | Path) -> tuple[int, str, str]:
    done = gpu_webhook("rules", "lint", *args)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        pytest.param(
            "maxGPUsPerPod: -1",
            "spec.validate[0]: maxGPUsPerPod: must be 0 or more, not -1",
            id="negative",
        ),
        pytest.param(
            'maxGPUsPerPod: "eight"',
            'spec.validate[0]: maxGPUsPerPod: "eight" is not a whole number',
            id="not-a-number",
        ),
        pytest.param(
            "{maxGPUsPerPod: 4, action: deni}",
            'spec.validate[0]: action: "deni" is not one of deny, warn, audit (did you mean "deny"?)',
            id="misspelled-action",
        ),
        pytest.param(
            "maxGpusPerPod: 4",
            'spec.validate[0]: unknown check "maxGpusPerPod" (did you mean "maxGPUsPerPod"?); the checks: maxGPUsPerPod, maxGPUsPerContainer,',
            id="misspelled-check",
        ),
        pytest.param(
            "{maxGPUsPerPod: 4, maxGPUsPerContainer: 2}",
            "spec.validate[0]: maxGPUsPerPod and maxGPUsPerContainer are two checks in one entry",
            id="two-checks",
        ),
    ],
)
def test_a_bad_validate_entry_says_what_is_wrong_with_it(
    tmp_path: Path, entry: str, said: str
) -> None:
    (tmp_path / "a.yaml").write_text(policy("a", f"  validate:\n    - {entry}\n"))
    code, _, err = lint(tmp_path)
    assert code == 1
    assert said in err, err
    assert "unknown or ambiguous" not in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            policy("a", "  mutate:\n    memoryLimit: {perGPU: 10Gi, fixed: 5Gi}\n"),
            "(GPUPolicy a): spec.mutate.memoryLimit: fixed and perGPU conflict: give only one of fixed, perGPU, inventoryShare",
            id="two-fields-conflict",
        ),
        pytest.param(
            f"{HEADER}metadata: {{}}\nspec: {{}}\n",
            "(GPUPolicy, no metadata.name): metadata.name: missing",
            id="no-name",
        ),
        pytest.param(
            policy("a", "  mutate:\n    memory: {fixed: 1Gi}\n"),
            'spec.mutate: unknown field "memory" (did you mean "memoryLimit"?)',
            id="unknown-field",
        ),
    ],
)
def test_messages_carry_no_python_reprs(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "a.yaml").write_text(text)
    code, _, err = lint(tmp_path)
    assert code == 1
    assert said in err, err
    for repr_only in ("{'", "'}", "None)", "'memory'", "has too many properties"):
        assert repr_only not in err, err


def test_a_memory_limit_larger_than_every_gpu_node_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        policy("huge", "  match: {namespaces: [a]}\n  mutate:\n    memoryLimit: {fixed: 4Ti}\n")
        + "---\n"
        + policy(
            "per-gpu", "  match: {namespaces: [b]}\n  mutate:\n    memoryLimit: {perGPU: 200Gi}\n"
        )
        + "---\n"
        + policy("fits", "  match: {namespaces: [c]}\n  mutate:\n    memoryLimit: {perGPU: 8Gi}\n")
    )
    code, out, err = lint(tmp_path, "--inventory", INVENTORY)
    assert code == 0, err
    lines = [line for line in err.splitlines() if not line.startswith("notice: ")]
    assert len(lines) == 2, err
    assert lines[0].startswith("warning: ")
    assert "(GPUPolicy huge): spec.mutate.memoryLimit.fixed: 4Ti per container" in lines[0]
    assert "every GPU pod it matches gets its memory limits lowered" in lines[0]
    assert "(whenTooLarge: cap, the default)" in lines[0]
    assert (
        "(GPUPolicy per-gpu): spec.mutate.memoryLimit.perGPU: a pod using all 8 GPUs of node gpu-a100-0 would get 8 x 200Gi = 1600Gi"
        in lines[1]
    )
    assert out.strip().endswith("3 rules, 0 node pools, no problems, 2 warnings")

    code, out, err = lint(tmp_path)  # no nodes known: nothing to compare against
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    ("when", "said", "engine"),
    [
        pytest.param("cap", "gets its memory limits lowered", (True, "warn"), id="cap"),
        pytest.param(
            "skip", "is admitted without the rule's memory limits", (True, "warn"), id="skip"
        ),
        pytest.param("deny", "is denied (whenTooLarge: deny)", (False, "deny"), id="deny"),
    ],
)
def test_lint_says_what_the_engine_does_with_a_memory_limit_no_node_holds(
    tmp_path: Path, when: str, said: str, engine: tuple[bool, str]
) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)  # the shipped settings: the GPU toleration
    (rules / "a.yaml").write_text(
        policy(
            "huge",
            "  match: {namespaces: [a]}\n  mutate:\n"
            f"    memoryLimit: {{fixed: 4Ti, whenTooLarge: {when}}}\n",
        )
    )
    _, _, err = lint(rules, "--inventory", INVENTORY)
    assert said in err, err

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a}\nspec:\n"
        "  containers:\n  - name: c\n    image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04\n"
        "    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    done = gpu_webhook("check", "--rules", rules, "--inventory", INVENTORY, "-o", "json", manifest)
    (result,) = json.loads(done.stdout)
    memory = [f["action"] for f in result["findings"] if f["check"] == "memoryLimit"]
    assert (result["allowed"], memory) == (engine[0], [engine[1]]), result


def test_lint_takes_one_file(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(policy("good", "  validate:\n    - maxGPUsPerPod: 4\n"))
    (tmp_path / "bad.yaml").write_text(policy("bad", "  validate:\n    - maxGPUsPerPod: -4\n"))
    code, out, _ = lint(tmp_path / "good.yaml")
    assert code == 0
    assert out.strip() == f"{tmp_path / 'good.yaml'}: 1 rule, 0 node pools, no problems"


def test_json_rule_files_are_read(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(
        json.dumps(
            {
                "apiVersion": "gpu-webhook.io/v1alpha1",
                "kind": "GPUPolicy",
                "metadata": {"name": "j"},
                "spec": {"validate": [{"maxGPUsPerPod": -1}]},
            }
        )
    )
    code, _, err = lint(tmp_path)
    assert code == 1
    assert "a.json: doc 1 (GPUPolicy j): spec.validate[0]: maxGPUsPerPod: must be 0 or more" in err


def test_a_file_that_is_no_rule_file_is_refused_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    code, _, err = lint(tmp_path / "notes.txt")
    assert code == 2
    assert err.strip() == (
        f"gpu-webhook rules lint: {tmp_path / 'notes.txt'}: not a rule file; rule files end in "
        ".yaml, .yml, .json"
    )


def test_a_missing_directory_exits_2_like_check(tmp_path: Path) -> None:
    code, out, err = lint(tmp_path / "nowhere")
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert "no such directory or file" in err


def test_lint_reports_every_problem_of_a_document_at_once(tmp_path: Path) -> None:
    """A wrong apiVersion does not hide a wrong kind; a kind near a real one is named."""
    path = tmp_path / "policy.yaml"
    path.write_text("apiVersion: gpu.example.com/v2\nkind: GPUPolicys\nmetadata: {name: x}\n")
    code, _, out = lint(path)
    assert code == 1
    assert "apiVersion: must be gpu-webhook.io/v1alpha1" in out
    assert "kind: must be one of" in out
    assert "(did you mean GPUPolicy?)" in out
    assert "2 problems found" in out


def test_export_prints_the_documents_as_objects_the_crds_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["rules", "export", "rules", "--kind", "GPUPolicy"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    shipped = [
        d
        for p in sorted(Path("rules").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d and d["kind"] == "GPUPolicy"
    ]
    assert objects == shipped
    for obj in objects:
        validator = Draft202012Validator(as_json_schema(open_api("GPUPolicy")))
        assert list(validator.iter_errors(obj)) == []


def test_export_writes_a_policy_repository_layout_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "policies"
    done = gpu_webhook("rules", "export", "rules", "--output-dir", out)
    assert done.returncode == 0, done.stderr
    assert "written under" in done.stdout
    settings = yaml.safe_load((out / "gpusettings" / "cluster.yaml").read_text())
    assert settings["kind"] == "GPUSettings"
    assert sorted(p.name for p in out.iterdir()) == ["gpupolicies", "gpusettings"]
    again = gpu_webhook("rules", "export", "rules", "--output-dir", out)
    assert again.returncode == 2
    assert "exists: not overwritten" in again.stderr


def test_export_of_broken_rules_exports_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(policy("a", "  validate: [{maxGPUsPerPd: 1}]\n"))
    done = gpu_webhook("rules", "export", tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert 'unknown check "maxGPUsPerPd"' in done.stderr
    assert done.stderr.endswith("1 problem found; nothing exported\n")
