import json
from pathlib import Path

import pytest

from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]


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
    assert "2 problems found" in err


def test_lint_of_a_missing_directory_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "lint", "/nonexistent/rules"]) == 1
    assert "no such directory" in capsys.readouterr().err


def test_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"].endswith("2020-12/schema")
