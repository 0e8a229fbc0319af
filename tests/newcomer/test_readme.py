"""The README's quick start, as ``tests/newcomer/walkthrough.py`` (run by ``.ci/run``) reads it."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builders import ROOT
from tests.deploy.test_chart import helm, kind
from tests.deploy.test_manifests import kubectl, pod_specs
from tests.newcomer.walkthrough import first_check, quick_start_commands, run_first_check
from tests.running import gpu_webhook


def test_the_quick_start_is_exactly_the_two_commands_ci_walks_through() -> None:
    readme = (ROOT / "README.md").read_text()
    assert quick_start_commands(readme) == ["./scripts/serve", "./scripts/test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--serve ./scripts/serve --test ./scripts/test" in ci


def test_the_quick_start_says_serve_keeps_running_and_tests_go_in_a_second_terminal() -> None:
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ")[0]
    flat = " ".join(section.split())
    assert "keeps running" in flat
    assert "second terminal" in flat
    assert "pip's progress shown" in flat


def _section(title: str) -> str:
    return (ROOT / "README.md").read_text().split(f"\n## {title}\n", 1)[1].split("\n## ")[0]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_the_command_is_reached_as_the_readme_says_before_it_is_called_bare() -> None:
    """After the quick start gpu-webhook is in .venv/bin, not on PATH: the README says
    so (activate, or the path) before its first example that calls it bare."""
    readme = (ROOT / "README.md").read_text()
    lines = [ln for block in _blocks(readme, "sh") for ln in block.splitlines()]
    first_bare = next(i for i, ln in enumerate(lines) if ln.startswith("gpu-webhook "))
    assert any(ln.startswith(". .venv/bin/activate") for ln in lines[:first_bare])


def test_the_deploy_overlay_of_the_readme_points_every_pod_at_the_pushed_image(
    tmp_path: Path,
) -> None:
    blocks = _blocks(_section("Install in a cluster"), "sh")
    (script,) = [b for b in blocks if "<<'EOF'" in b]
    kustomization = script.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    (own,) = [b for b in blocks if "podman push" in b]
    pushed = re.search(r"podman push (\S+)", own)
    assert pushed
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    (tmp_path / "my-cluster").mkdir()
    (tmp_path / "my-cluster" / "kustomization.yaml").write_text(kustomization + "\n")
    rendered = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path / "my-cluster")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    images = {
        c["image"]
        for _, spec in pod_specs(tuple(yaml.safe_load_all(rendered)))
        for c in spec["containers"]
    }
    assert images == {pushed.group(1)}


def test_the_ci_examples_are_yaml_that_run_check_with_its_ci_formats(tmp_path: Path) -> None:
    """Each example's check command, pointed at this repository's examples, runs and
    writes its format."""
    section = _section("In CI")
    github, gitlab = (yaml.safe_load(b) for b in _blocks(section, "yaml"))
    steps = [s["run"] for s in github["jobs"]["check"]["steps"] if "run" in s]
    commands = [*steps, *gitlab["gpu-policy"]["script"]]
    assert gitlab["gpu-policy"]["artifacts"]["reports"]["junit"]
    assert any(s.get("uses", "").startswith("github/codeql-action/upload-sarif") for s in
               github["jobs"]["check"]["steps"])  # fmt: skip
    shutil.copytree(ROOT / "examples", tmp_path / "manifests")
    shutil.copytree(ROOT / "rules", tmp_path / "policy")
    (tmp_path / "cluster").mkdir()
    shutil.copy(ROOT / "examples" / "inventory.yaml", tmp_path / "cluster" / "nodes.yaml")
    (tmp_path / "manifests" / "inventory.yaml").unlink()
    formats = set()
    for command in commands:
        words = shlex.split(command.replace("\\\n", " ").split(">")[0].split("||")[0])
        args = words[words.index("check") :]
        done = gpu_webhook(*args, cwd=tmp_path)
        assert done.returncode == 1, done.stderr  # examples/workloads.yaml has denials
        formats.add(args[args.index("-o") + 1])
        assert done.stdout
    assert formats == {"github", "sarif", "junit"}


def test_the_quick_start_check_prints_what_the_readme_shows() -> None:
    """The same step .ci/run's walkthrough takes in a fresh copy, here in the checkout."""
    readme = (ROOT / "README.md").read_text()
    command, shown, code = first_check(readme)
    assert command.startswith(".venv/bin/gpu-webhook check ")
    assert "DENIED" in shown
    assert "ALLOWED" in shown
    assert code == 1
    run_first_check(readme)


def test_the_helm_install_of_the_readme_renders_every_pod_with_the_pushed_image() -> None:
    """The README's helm install, as helm template with the same arguments (no cluster)."""
    (script,) = [b for b in _blocks(_section("Install in a cluster"), "sh") if "podman push" in b]
    pushed = re.search(r"podman push (\S+)", script)
    install = re.search(r"^helm install (.*?)(?<!\\)$", script.replace("\\\n", " "), re.M)
    assert pushed
    assert install
    words = shlex.split(install.group(1))
    assert "--create-namespace" in words
    words.remove("--create-namespace")
    done = subprocess.run([helm(), "template", *words], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]
    pods = [o["spec"]["template"]["spec"] for o in kind(objs, "Deployment")] + [
        o["spec"]["jobTemplate"]["spec"]["template"]["spec"] for o in kind(objs, "CronJob")
    ]
    assert {c["image"] for pod in pods for c in pod["containers"]} == {pushed.group(1)}


@pytest.mark.parametrize(
    "document",
    ["README.md", "CHANGELOG.md", "deploy/helm/gpu-webhook/README.md",
     *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))],
)  # fmt: skip
def test_every_relative_link_leads_to_a_file_of_the_repository(document: str) -> None:
    path = ROOT / document
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    missing = [t for t in targets if "://" not in t and not (path.parent / t).exists()]
    assert missing == []


def test_the_everyday_commands_run_on_the_repository_s_examples() -> None:
    """Each offline command of "Everyday commands", with the examples for the user's files;
    those that need a live cluster are only parsed (``--help`` of the same words)."""
    (block,) = _blocks(_section("Everyday commands"), "sh")
    ran = 0
    for line in block.splitlines():
        command = line.split("#", 1)[0].strip()
        if not command.startswith("gpu-webhook "):
            continue
        words = shlex.split(command)[1:]
        swap = {
            "my-manifests/": "examples/",
            "nodes.yaml": "examples/inventory.yaml",
            "policy/": "rules/",
        }
        words = [swap.get(w, w) for w in words]
        if "--kubeconfig" in words:
            done = gpu_webhook(*words[: words.index("--kubeconfig")], "--help")
            assert done.returncode == 0, (command, done.stderr)
            continue
        done = gpu_webhook(*words)
        assert done.returncode in (0, 1), (command, done.stderr)
        assert "Traceback" not in done.stderr
        ran += 1
    assert ran >= 4


def test_the_released_chart_of_the_readme_runs_the_released_image() -> None:
    """The README's first install pulls the released chart (oci://); this checkout's chart at
    that version, with no --set, runs the image the release workflow publishes beside it."""
    (script, *_) = _blocks(_section("Install in a cluster"), "sh")
    install = re.search(
        r"^helm install gpu-webhook oci://(\S+)/charts/gpu-webhook --version (\S+)",
        script.replace("\\\n", " "),
        re.M,
    )
    assert install
    registry, version = install.groups()
    chart = yaml.safe_load((ROOT / "deploy/helm/gpu-webhook/Chart.yaml").read_text())
    assert chart["version"] == version
    done = subprocess.run([helm(), "template", "gpu-webhook", "deploy/helm/gpu-webhook"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]
    pods = [o["spec"]["template"]["spec"] for o in kind(objs, "Deployment")]
    assert {c["image"] for pod in pods for c in pod["containers"]} == {
        f"{registry}/gpu-webhook:{version}"
    }
