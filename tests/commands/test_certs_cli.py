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


# --- generate never overwrites by surprise; certs/ keeps keys out of git ---------------------


def _generate(out: Path, *extra: str):
    return gpu_webhook(
        "certs", "generate", "--service", "gpu-webhook", "--namespace", "gpu-webhook",
        "--out", out, *extra,
    )  # fmt: skip


def test_generate_refuses_to_overwrite_a_ca_or_key_without_force(tmp_path: Path) -> None:
    out = tmp_path / "cluster"
    assert _generate(out).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    refused = _generate(out)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"gpu-webhook certs: {out} already holds ca.crt, tls.crt, tls.key; not overwriting "
        "them (a new CA breaks every client that trusts the old one): choose another --out, "
        "or add --force"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    forced = _generate(out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (out / "ca.crt").read_bytes() != before["ca.crt"]


def test_a_lone_key_is_not_overwritten_either(tmp_path: Path) -> None:
    (tmp_path / "tls.key").write_text("somebody's key\n")
    assert _generate(tmp_path).returncode == 2
    assert (tmp_path / "tls.key").read_text() == "somebody's key\n"


def test_no_doc_suggests_a_command_that_writes_over_the_dev_certificates() -> None:
    texts = [ROOT / "README.md", ROOT / "certs" / "README.md", *(ROOT / "docs").glob("*.md")]
    for path in texts:
        text = " ".join(path.read_text().split())  # commands wrap over lines in prose
        assert "--out certs/dev" not in text, path


def test_certs_has_a_readme_and_keeps_every_generated_file_out_of_git() -> None:
    certs = ROOT / "certs"
    assert "certs/dev/" in (certs / "README.md").read_text()
    rules = [
        line.strip()
        for line in (certs / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Everything is ignored, then only the two files that explain the directory come back.
    assert rules == ["*", "!.gitignore", "!README.md"]
