"""``check``, ``audit -f`` and ``explain -f`` refuse what ``kubectl apply`` refuses: unknown
fields, wrong types and invalid resource names of built-in kinds (issue 42), against the
Kubernetes version the user targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import RULES
from tests.running import gpu_webhook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "examples" / "inventory.yaml"
# `resource:` typed for `resources:`: the GPU request silently disappears unless refused.
TYPO = """\
apiVersion: v1
kind: Pod
metadata:
  name: train
spec:
  containers:
  - name: train
    image: nvcr.io/nvidia/pytorch:24.01-py3
    resource:
      limits:
        nvidia.com/gpu: 1
"""
POD_LEVEL_RESOURCES = """\
apiVersion: v1
kind: Pod
metadata:
  name: pod-level
spec:
  resources:
    limits: {memory: 1Gi}
  containers:
  - name: main
    image: cuda
"""
SAID = 'spec.containers[0].resource: unknown field; did you mean "resources"? (line 9)'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pod.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("check",), id="check"),
        pytest.param(("check", "-o", "json"), id="check-json"),
        pytest.param(("audit", "-f"), id="audit"),
        pytest.param(("explain", "--inventory", str(INVENTORY), "-f"), id="explain"),
    ],
)
def test_a_misspelt_field_is_unusable_input_named_with_its_line_and_a_did_you_mean(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = write(tmp_path, TYPO)
    done = gpu_webhook(*command, path, "--rules", RULES)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: {path}:9: " in done.stderr
    assert "Kubernetes 1.37 refuses it as written (kubectl apply): " + SAID in done.stderr
    assert "Traceback" not in done.stderr


def test_ci_formats_place_the_refusal_on_the_field_line(tmp_path: Path) -> None:
    path = write(tmp_path, TYPO)
    done = gpu_webhook("check", path, "--rules", RULES, "-o", "github")
    assert done.returncode == 2
    assert f"::error file={path},line=9," in done.stdout


@pytest.mark.parametrize(
    ("version", "code"),
    [
        pytest.param("1.31", 2, id="before-pod-level-resources"),
        pytest.param("v1.32.4", 0, id="pod-level-resources-served"),
        pytest.param(None, 0, id="default-newest"),
    ],
)
def test_the_kubernetes_version_decides_which_fields_exist(
    tmp_path: Path, version: str | None, code: int
) -> None:
    path = write(tmp_path, POD_LEVEL_RESOURCES)
    given = ("--kubernetes-version", version) if version else ()
    done = gpu_webhook("check", path, "--rules", RULES, *given)
    assert done.returncode == code, done.stderr
    if code == 2:
        assert "Kubernetes 1.31 refuses it as written (kubectl apply): spec.resources: " in (
            done.stderr
        )


def test_a_version_without_schemas_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path, TYPO)
    done = gpu_webhook("check", path, "--rules", RULES, "--kubernetes-version", "1.12")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpu-webhook check: no schemas for Kubernetes 1.12: this gpu-webhook knows 1.30 to "
        "1.37; give --kubernetes-version one of those"
    ]


def test_json_output_carries_the_refusal_as_an_unusable_result(tmp_path: Path) -> None:
    text = TYPO.replace("resource:", "resources:") + "    env: [{name: X, value: 1}]\n"
    path = write(tmp_path, text)
    done = gpu_webhook("check", path, "--rules", RULES, "-o", "json")
    assert done.returncode == 2
    (result,) = json.loads(done.stdout)
    assert (result["status"], result["line"], result["allowed"]) == ("unusable", 12, None)
    assert result["error"].endswith(
        "spec.containers[0].env[0].value: 1 is a number where Kubernetes wants a string (line 12)"
    )


def test_the_shipped_schemas_are_those_the_generator_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-kubeschemas"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
