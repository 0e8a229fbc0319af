"""The tests need nothing but the checkout: every file they read lives under the repository,
and every copied file says where it came from."""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from tests.builders import APISERVER, CORPUS, FIXTURES, ROOT

INDEXES = [
    pytest.param(CORPUS, ["INDEX.tsv", "_unparseable/UNPARSEABLE.tsv"], id="corpus"),
    pytest.param(ROOT / "tests" / "fixtures", ["INDEX.tsv"], id="fixtures"),
]
ORIGIN = ("source_repo", "source_path", "commit_or_version_if_known", "license_if_known")
OUTSIDE = re.compile(r"/work/|\.\./shared|\bshared/(corpus|fixtures)")
CODE = ["tests", "bench", "scripts", "webhook", ".ci"]
COPIES = {CORPUS, FIXTURES.parent}


def _rows(directory: Path, indexes: list[str]) -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    for index in indexes:
        with (directory / index).open(newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                rows[next(iter(row.values()))] = row
    return rows


@pytest.mark.parametrize(("directory", "indexes"), INDEXES)
def test_every_copied_file_has_its_origin_in_an_index(directory: Path, indexes: list[str]) -> None:
    rows = _rows(directory, indexes)
    data = {
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and p.suffix not in {".tsv", ".md"}
    }
    assert data, f"nothing copied into {directory}"
    assert sorted(data - set(rows)) == [], "copied files without a row in the index"
    assert sorted(set(rows) - data) == [], "index rows naming files that are not there"
    for path, row in rows.items():
        missing = [key for key in ORIGIN if not (row.get(key) or "").strip()]
        assert missing == [], f"{path}: no {', '.join(missing)}"


def test_the_recorded_api_server_bytes_are_in_the_repository() -> None:
    assert (APISERVER / "node-list.json").is_file()
    assert (APISERVER / "kubectl-get-nodes.yaml").is_file()


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *CODE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:  # a copy without .git: walk the directories instead
        paths = [p for top in CODE for p in (ROOT / top).rglob("*") if p.is_file()]
    else:
        paths = [ROOT / line for line in listed.stdout.splitlines()]
    return [
        p
        for p in paths
        if p.suffix in {".py", ".sh", ".toml", ".yaml", ".md", ""}
        and p.is_file()  # webhook/data/rules is a link to a directory (rules/)
        and not any(copy in p.parents for copy in COPIES)
        and "__pycache__" not in p.parts
        and p != Path(__file__)
    ]


def test_no_code_reads_a_path_outside_the_checkout() -> None:
    offenders = []
    for path in _tracked_text_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        offenders += [
            f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line)
        ]
    assert offenders == []
