"""``explain`` reports, and ``audit`` counts, what still fails after admission: a gang that
cannot run at once, a CUDA driver too old, a GPU quota too small (issue 26); the quotas come
from the same inventory file as the nodes (``kubectl get nodes,resourcequotas -A -o yaml``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import RULES
from webhook.cli import main

CASES = Path(__file__).resolve().parents[1] / "cases"
INVENTORY = CASES / "_inventories" / "two-driver-pools-with-quota.yaml"


def _object(case: str) -> dict[str, Any]:
    loaded = yaml.safe_load((CASES / case / "object.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


GANG = _object("gang-pytorchjob-three-of-eight-never-starts-denied")
CUDA = _object("cuda-required-by-env-newer-than-any-driver-denied")
QUOTA = _object("quota-deployment-over-hard-gpu-quota-warned")
QUOTA_POD = _object("quota-pod-over-what-is-left-noticed")


def _run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str, objs: list[Any]) -> str:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    main([*args, "--rules", str(RULES), "-f", str(path), "--inventory", str(INVENTORY)])
    out, _ = capsys.readouterr()
    return out


@pytest.mark.parametrize(
    ("obj", "says"),
    [
        pytest.param(GANG, "builtin/gangFit", id="gang"),
        pytest.param(CUDA, "builtin/cudaDriver", id="cuda"),
        pytest.param(QUOTA, "builtin/gpuQuota", id="quota"),
        pytest.param(QUOTA_POD, "ResourceQuota ml/gpu-quota", id="pod-over-quota"),
    ],
)
def test_explain_says_why_it_would_fail_after_admission(
    obj: dict[str, Any], says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = _run(capsys, tmp_path, "explain", objs=[obj])
    assert says in out


def test_audit_counts_each_kind_of_failure_after_admission(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    objs = [GANG, CUDA, QUOTA, QUOTA_POD]  # the gang is in namespace ml too: over its quota
    text = _run(capsys, tmp_path, "audit", objs=objs)
    assert (
        "would fail after admission: 1 cannot run all their pods at once (gangFit); 1 need a "
        "newer CUDA driver than any node has (cudaDriver); 3 exceed their namespace's GPU "
        "quota (gpuQuota)"
    ) in text
    report = json.loads(_run(capsys, tmp_path, "audit", "-o", "json", objs=objs))
    assert report["summary"]["afterAdmission"] == {"gangFit": 1, "cudaDriver": 1, "gpuQuota": 3}


SCOPED = CASES / "_inventories" / "two-driver-pools-with-scoped-quotas.yaml"
DRA_GANG = CASES / "_inventories" / "dra-gang.yaml"


def test_check_reads_scoped_quotas_from_the_one_list_kubectl_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``kubectl get nodes,resourcequotas -A -o yaml`` is one List of both kinds."""
    objs = [
        _object("quota-scoped-to-a-priority-class-over-warned"),
        _object("quota-scoped-to-other-pods-untouched"),
    ]
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    main(["check", "--rules", str(RULES), "-f", str(path), "--inventory", str(SCOPED)])
    out, _ = capsys.readouterr()
    assert out.count("builtin/gpuQuota") == 1
    assert "ResourceQuota research/high-priority-gpus (scopes PriorityClass In [high])" in out


def test_audit_counts_a_dra_gang_that_cannot_run_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    objs = [_object("gang-dra-nine-of-four-denied"), _object("gang-dra-eight-of-four-fits")]
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    main(
        [
            "audit",
            "-o",
            "json",
            "--rules",
            str(RULES),
            "-f",
            str(path),
            "--inventory",
            str(DRA_GANG),
        ]
    )
    out, _ = capsys.readouterr()
    assert json.loads(out)["summary"]["afterAdmission"]["gangFit"] == 1
