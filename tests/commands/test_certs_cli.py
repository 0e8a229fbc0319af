"""``gpu-webhook certs generate|inspect`` as a user runs them: exit codes and messages."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.running import gpu_webhook

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("certs") / "out"
    result = gpu_webhook(
        "certs", "generate", "--service", "gpu-webhook", "--namespace", "gpu-webhook",
        "--out", out, "--san", "10.0.0.7", "--days", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_generate_writes_the_three_files_and_names_them(generated):
    assert sorted(p.name for p in generated.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (generated / "tls.key").stat().st_mode & 0o777 == 0o600


def test_inspect_shows_subjects_sans_and_expiry_of_a_good_pair(generated):
    result = gpu_webhook(
        "certs", "inspect", generated, "--service", "gpu-webhook", "--namespace", "gpu-webhook"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu-webhook.gpu-webhook.svc.cluster.local" in result.stdout
    assert "10.0.0.7" in result.stdout
    assert "expires:" in result.stdout
    assert "CN=gpu-webhook.gpu-webhook CA" in result.stdout


def test_inspect_fails_when_the_sans_do_not_cover_the_service(generated):
    result = gpu_webhook(
        "certs", "inspect", generated, "--service", "gpu-webhook", "--namespace", "other"
    )
    assert result.returncode == 1
    assert "SANs lack gpu-webhook.other.svc" in result.stdout


def test_inspect_fails_when_the_chain_does_not_hold(generated, tmp_path):
    other = tmp_path / "other"
    made = gpu_webhook("certs", "generate", "--service", "x", "--namespace", "y", "--out", other)
    assert made.returncode == 0, made.stderr
    mixed = tmp_path / "mixed"
    shutil.copytree(generated, mixed)
    shutil.copy(other / "ca.crt", mixed / "ca.crt")
    result = gpu_webhook("certs", "inspect", mixed)
    assert result.returncode == 1
    assert "does not verify against ca.crt" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["inspect", "/nonexistent/dir"], "not a directory", id="missing-dir"),
        pytest.param(
            ["generate", "--service", "s", "--namespace", "n", "--days", "0"],
            "--days: 0 is not a positive number of days",
            id="zero-days",
        ),
        pytest.param(
            ["inspect", ".", "--service", "s"],
            "--service and --namespace go together",
            id="service-without-namespace",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message_and_no_traceback(args, message, tmp_path):
    result = gpu_webhook("certs", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_inspect_names_the_file_that_is_not_a_certificate(generated, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(generated, broken)
    (broken / "tls.crt").write_text("not a certificate\n")
    result = gpu_webhook("certs", "inspect", broken)
    assert result.returncode == 2
    assert "tls.crt: not a PEM certificate" in result.stderr
