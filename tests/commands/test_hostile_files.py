"""Hostile file contents (issue 35): JSON nested 100k deep, keys that are numbers, values
JSON cannot hold. Every command refuses them in one line (file, field, what to do) with
exit 2, a directory run still reports its good files, ``serve`` refuses such rules in one
line, and a hot reload of them is a counted failure that keeps the last good rules, never
a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.builders import INVENTORY, ROOT, RULES, pod, review
from tests.running import Load, Server, gpu_webhook, mount
from webhook import cli
from webhook.commands import check
from webhook.commands import explain as explain_command
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.files.jsonvalues import MAX_DEPTH
from webhook.reports import audit as audit_report

pytestmark = pytest.mark.slow

POD = ROOT / "examples" / "gpu-pod.yaml"
DEEP = "[" * 100_000 + "]" * 100_000
INFINITE_REPLICAS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: .inf
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
      - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
"""
HOSTILE = {
    "deep.json": (DEEP, "nested more than"),
    "deep-object.json": (
        "{" + '"a":{' * (MAX_DEPTH + 1) + '"b":1' + "}" * (MAX_DEPTH + 2),
        "nested more than",
    ),
    "replicas.yaml": (INFINITE_REPLICAS, "spec.replicas: inf is not a number"),
    "list-key.yaml": ("apiVersion: v1\nkind: Pod\nmetadata: {[1]: x}\n", "not a string"),
    # Issue 41: kubectl would send "1", a resource name the API server refuses.
    "number-key.yaml": (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - {name: c, image: x, resources: {limits: {1: 2}}}\n",
        "number-key.yaml:6: not usable: the key 1 is a number, not text",
    ),
    # Issue 41: a string to YAML (no dot, no exponent sign): explain said DENIED.
    "replicas-1e400.yaml": (
        INFINITE_REPLICAS.replace(".inf", "1e400"),
        'spec.replicas: "1e400" is not a whole number',
    ),
}
COMMANDS = {
    "check": ("check", "--rules", RULES, "--inventory", INVENTORY, "-f"),
    "audit": ("audit", "--rules", RULES, "--inventory", INVENTORY, "-f"),
    "explain": ("explain", "--rules", RULES, "--inventory", INVENTORY, "-f"),
}


def one_line_error(stderr: str, name: str, problem: str) -> None:
    errors = [line for line in stderr.splitlines() if name in line]
    assert len(errors) == 1, stderr
    assert problem in errors[0], stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_file_is_refused_in_one_line_with_exit_2(tmp_path: Path, command, name):
    text, problem = HOSTILE[name]
    (tmp_path / name).write_text(text)

    done = gpu_webhook(*COMMANDS[command], tmp_path / name)

    assert done.returncode == 2, done.stderr
    one_line_error(done.stderr, name, problem)


@pytest.mark.parametrize("command", ["check", "audit"])
def test_a_directory_run_reports_its_good_files_beside_the_hostile_ones(tmp_path: Path, command):
    for name, (text, _) in HOSTILE.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "gpu-pod.yaml").write_bytes(POD.read_bytes())

    done = gpu_webhook(*COMMANDS[command], tmp_path)

    assert done.returncode == 2, done.stderr
    assert "cuda-vectoradd" in done.stdout
    for name, (_, problem) in HOSTILE.items():
        one_line_error(done.stderr, name, problem)


def test_a_hostile_inventory_is_refused_in_one_line(tmp_path: Path):
    (tmp_path / "nodes.json").write_text(DEEP)

    done = gpu_webhook("check", "--rules", RULES, "--inventory", tmp_path / "nodes.json", "-f", POD)

    assert done.returncode == 2
    one_line_error(done.stderr, "nodes.json", "nested more than")


@pytest.fixture
def hostile_rules(tmp_path: Path) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in RULES.glob("*.yaml"):
        (rules / path.name).write_bytes(path.read_bytes())
    (rules / "95-deep.json").write_text(DEEP)
    return rules


def test_serve_refuses_hostile_rules_in_one_line(tmp_path: Path, hostile_rules: Path):
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)

    done = gpu_webhook("serve", "--rules", hostile_rules, "--cert-dir", tmp_path, "--port", "0")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    one_line_error(done.stderr, "95-deep.json", "nested more than")


def test_a_hot_reload_of_hostile_rules_is_a_counted_failure_without_a_traceback(tmp_path: Path):
    rules = {p.name: p.read_bytes() for p in RULES.glob("*.yaml")}
    mount(tmp_path / "rules", rules, version="1")
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    server = Server(tmp=tmp_path, cert_dir=tmp_path, rules=tmp_path / "rules", inventory=INVENTORY)
    try:
        with Load(server, review(pod(gpus=1))) as load:
            assert load.wait_for(True)
            hostile = {**rules, "95-deep.json": DEEP.encode(), "96-inf.yaml": b"spec: .inf\n"}
            mount(tmp_path / "rules", hostile, version="2")
            time.sleep(4.5)  # two reload periods
            assert load.wait_for(True), "the last good rules stopped answering"
        metrics = server.health("/metrics")[1]
        failures = [
            line
            for line in metrics.splitlines()
            if line.startswith('gpu_webhook_rule_reloads_total{result="failure"}')
        ]
        assert failures, metrics
        assert float(failures[0].split()[-1]) >= 1
        assert load.failures == []
        log = server.log.read_text()
        assert "Traceback" not in log
        rejected = [json.loads(line) for line in log.splitlines() if "rejected" in line]
        assert rejected, log
        assert any("95-deep.json" in p for p in rejected[0]["problems"])
    finally:
        Server.close_clients()
        assert server.stop() == 0, server.log.read_text()


def test_an_object_the_engine_cannot_read_is_unusable_in_check_as_the_server_answers_it(
    monkeypatch, capsys
):
    """The server answers an object the engine trips on with a denial that says so
    (admission/service.py); ``check`` says so in one line, exit 2, the other files judged."""
    real = check.evaluate

    def tripping(request, **kwargs):
        if request.object.get("metadata", {}).get("name") == "cuda-vectoradd":
            raise TypeError("expected string or bytes-like object, got 'int'")
        return real(request, **kwargs)

    monkeypatch.setattr(check, "evaluate", tripping)
    code = cli.main(["check", "--rules", str(RULES), "-f", str(ROOT / "examples")])

    captured = capsys.readouterr()
    err = captured.err
    assert code == 2
    assert "workloads.yaml" in captured.out  # the other files were judged
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "cannot evaluate it" in x]
    assert "gpu-pod.yaml" in line
    assert "TypeError" in line


def test_an_object_the_engine_cannot_read_is_unusable_in_explain(monkeypatch, capsys):
    def tripping(*args, **kwargs):
        raise KeyError("spec")

    monkeypatch.setattr(explain_command, "explain", tripping)
    code = cli.main(
        ["explain", "--rules", str(RULES), "--inventory", str(INVENTORY), "-f", str(POD)]
    )

    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "cannot evaluate it" in x]
    assert "gpu-pod.yaml" in line


def test_an_object_the_engine_cannot_read_is_unusable_in_audit(monkeypatch, capsys):
    real = audit_report.evaluate

    def tripping(request, **kwargs):
        if request.object.get("metadata", {}).get("name") == "cuda-vectoradd":
            raise IndexError("list index out of range")
        return real(request, **kwargs)

    monkeypatch.setattr(audit_report, "evaluate", tripping)
    code = cli.main(["audit", "--rules", str(RULES), "-f", str(ROOT / "examples")])

    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    (line,) = [x for x in captured.err.splitlines() if "cannot evaluate it" in x]
    assert "gpu-pod.yaml" in line
    assert "workloads.yaml" in captured.out  # the other files were audited
