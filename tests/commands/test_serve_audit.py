"""``serve --audit``: off by default, on by flag or environment, refused without a cluster,
and the auditor process the master starts only when it is on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import RULES
from tests.running import kubeconfig
from webhook.cli import build_parser, main
from webhook.commands.serve import settings_from
from webhook.serving.server import background_auditor


def _settings(*args: str):  # type: ignore[no-untyped-def]
    return settings_from(build_parser().parse_args(["serve", *args]))


def test_the_background_audit_is_off_by_default() -> None:
    settings = _settings()
    assert (settings.audit, settings.audit_period) == (False, 3600.0)
    assert background_auditor(settings) is None


def test_it_is_turned_on_by_flag_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = kubeconfig(tmp_path, "http://127.0.0.1:9")
    assert _settings("--audit", "--kubeconfig", config).audit
    monkeypatch.setenv("GPU_WEBHOOK_AUDIT", "true")
    monkeypatch.setenv("GPU_WEBHOOK_AUDIT_PERIOD", "900")
    monkeypatch.setenv("GPU_WEBHOOK_AUDIT_LEASE_NAMESPACE", "ops")
    settings = _settings("--kubeconfig", config, "--rules", str(RULES))
    assert (settings.audit, settings.audit_period) == (True, 900.0)
    process = background_auditor(settings)
    assert process is not None
    command = process._command()
    assert command[1:3] == ["-m", "webhook.serving.auditor"]
    assert command[command.index("--lease-namespace") + 1] == "ops"
    assert command[command.index("--period") + 1] == "900.0"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        pytest.param(
            "GPU_WEBHOOK_AUDIT", "sometimes", "GPU_WEBHOOK_AUDIT must be true or false", id="switch"
        ),
        pytest.param(
            "GPU_WEBHOOK_AUDIT_PERIOD",
            "5",
            "--audit-period must be at least 60 seconds",
            id="period",
        ),
        pytest.param(
            "GPU_WEBHOOK_AUDIT_PERIOD",
            "hourly",
            "--audit-period must be a number",
            id="period-word",
        ),
    ],
)
def test_bad_audit_settings_are_named(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["serve"]) == 2
    assert message in capsys.readouterr().err


def test_an_audit_without_a_cluster_is_refused_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.files.certs import ensure_dev

    ensure_dev(tmp_path)
    inventory = str(Path(RULES).parent / "examples" / "inventory.yaml")
    code = main(["serve", "--audit", "--cert-dir", str(tmp_path), "--inventory", inventory])
    assert code == 2
    assert "--audit needs a cluster to audit" in capsys.readouterr().err
