"""What ``gpu-webhook serve`` says when it cannot start: one line, exit 2, before any banner."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import INVENTORY, RULES
from tests.running import free_port, gpu_webhook
from webhook.files.certs import DEV_HOSTS, ensure_dev, generate, inspect, read, write

pytestmark = pytest.mark.slow


def _pair(directory: Path) -> Path:
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS), directory)
    return directory


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    return _pair(tmp_path / "certs")


@pytest.fixture
def listening() -> Iterator[int]:
    """A port somebody else already listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def serve(certs: Path, *args: str | Path) -> tuple[int, str]:
    done = gpu_webhook(
        "serve", "--host", "127.0.0.1", "--cert-dir", certs, "--rules", RULES,
        "--inventory", INVENTORY, *args,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def assert_one_line(output: str, *words: str) -> None:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("gpu-webhook serve: "), output
    for word in words:
        assert word in lines[0], output


def test_a_key_of_another_certificate_is_one_line_and_exit_2(certs: Path, tmp_path: Path) -> None:
    other = _pair(tmp_path / "other")
    (certs / "tls.key").write_bytes((other / "tls.key").read_bytes())
    code, output = serve(certs, "--port", str(free_port()), "--health-port", "0")
    assert code == 2
    assert_one_line(output, "tls.crt", "tls.key", "key values mismatch", "certs generate")


@pytest.mark.parametrize("name", ["tls.crt", "tls.key"])
def test_a_file_that_is_not_pem_is_one_line_and_exit_2(certs: Path, name: str) -> None:
    (certs / name).write_text("not a certificate\n")
    code, output = serve(certs, "--port", str(free_port()), "--health-port", "0")
    assert code == 2
    assert_one_line(output, "do not load as a TLS certificate")


def test_a_serving_port_in_use_is_one_line_and_exit_2(certs: Path, listening: int) -> None:
    code, output = serve(certs, "--port", str(listening), "--health-port", str(free_port()))
    assert code == 2
    assert_one_line(output, f"port {listening} on 127.0.0.1 (--port, $GPU_WEBHOOK_PORT) is in use")


def test_a_health_port_in_use_is_one_line_and_exit_2(certs: Path, listening: int) -> None:
    code, output = serve(certs, "--port", str(free_port()), "--health-port", str(listening))
    assert code == 2
    assert_one_line(output, f"port {listening}", "--health-port", "in use")


def test_the_same_port_twice_is_one_line_and_exit_2(certs: Path) -> None:
    port = str(free_port())
    code, output = serve(certs, "--port", port, "--health-port", port)
    assert code == 2
    assert_one_line(output, "--port and --health-port are both")


def test_dev_says_a_port_in_use_before_its_banner(listening: int, tmp_path: Path) -> None:
    # Its certificates in a directory of its own: the repository's certs/dev/ belongs to
    # the developer's own ./scripts/serve, and tests run side by side.
    done = gpu_webhook(
        "serve", "--dev", "--cert-dir", tmp_path / "dev", "--port", str(listening),
        "--health-port", "0",
    )  # fmt: skip
    assert done.returncode == 2
    assert "gpu-webhook (dev)" not in done.stdout + done.stderr
    assert_one_line(done.stdout + done.stderr, "is in use")


def test_the_host_comes_from_the_environment_too(certs: Path, listening: int) -> None:
    done = gpu_webhook(
        "serve", "--cert-dir", certs, "--rules", RULES, "--port", str(listening),
        "--health-port", "0", env={"GPU_WEBHOOK_HOST": "127.0.0.1"},
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line(done.stderr, f"port {listening} on 127.0.0.1")


def test_dev_certificates_overwritten_by_another_pair_are_made_again(tmp_path: Path) -> None:
    directory = tmp_path / "dev"
    write(generate(service="gpu-webhook", namespace="gpu-webhook"), directory)
    ensure_dev(directory)
    assert inspect(read(directory), required=DEV_HOSTS).problems == ()


def test_dev_outside_the_repository_says_where_rules_are_and_writes_nothing(
    tmp_path: Path,
) -> None:
    done = gpu_webhook("serve", "--dev", "--port", str(free_port()), cwd=tmp_path)
    assert done.returncode == 2
    assert_one_line(done.stdout + done.stderr, "no rules at rules", "--rules DIR")
    assert list(tmp_path.iterdir()) == []  # no certs/dev/ left in a stray directory


def test_broken_rules_are_one_line_that_points_at_rules_lint(certs: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "a.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: a}\n"
        "spec:\n  validate:\n    - maxGPUsPerPod: -1\n    - maxGpusPerPod: 2\n"
    )
    done = gpu_webhook(
        "serve", "--cert-dir", certs, "--rules", rules, "--port", str(free_port()),
        "--health-port", "0",
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line(
        done.stdout + done.stderr,
        f"the rules in {rules} are not usable: {rules / 'a.yaml'}: doc 1 (GPUPolicy a): "
        "spec.validate[0]: maxGPUsPerPod: must be 0 or more, not -1",
        f"(and 1 more: gpu-webhook rules lint {rules})",
    )


def test_dev_where_certificates_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """As in the image on a read-only root filesystem: no traceback from mkdir. (A path
    under a regular file cannot be made even by root, who writes past permissions.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = gpu_webhook(
        "serve", "--dev", "--cert-dir", blocker / "dev", "--rules", RULES,
        "--port", str(free_port()), "--health-port", str(free_port()),
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line(done.stdout + done.stderr, "cannot write the development certificates")
