"""What a team pins: one version everywhere it is shown, the license files, the shipped rules."""

from __future__ import annotations

import hashlib
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

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
