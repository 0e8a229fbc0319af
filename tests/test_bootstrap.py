"""scripts/bootstrap, which both of the README's first commands run: started together (two
terminals, as the quick start says), one waits for the other instead of both upgrading pip
in the same .venv (issue 42: serve died with ``ModuleNotFoundError:
pip._internal.cli.spinners``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.builders import ROOT

BOOTSTRAP = ROOT / "scripts" / "bootstrap"
# An interpreter that installs nothing: the version check passes, ``-m venv DIR`` makes
# DIR/bin/python a copy of itself, and ``-m pip`` logs its start and end around a pause
# (the window in which a second pip would have started beside it).
STUB_PYTHON = """#!/bin/sh
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
  "-m pip") echo "start $PPID" >> "$PIP_LOG"; sleep 0.5; echo "end $PPID" >> "$PIP_LOG" ;;
esac
exit 0
"""


def test_the_lock_is_taken_before_any_install_step() -> None:
    lines = BOOTSTRAP.read_text().splitlines()
    code = [ln.split("#", 1)[0] for ln in lines]
    locked = next(i for i, ln in enumerate(code) if re.search(r"\bflock 9\b", ln))
    installs = [
        i for i, ln in enumerate(code) if re.search(r"-m venv|-m pip|apt-get|rm -rf \.venv", ln)
    ]
    assert installs
    assert locked < min(installs)
    assert ".bootstrap.lock" in (ROOT / ".gitignore").read_text().splitlines()


def test_two_bootstraps_started_together_install_once_one_after_the_other(
    tmp_path: Path,
) -> None:
    if shutil.which("flock") is None:
        raise AssertionError("flock (util-linux) is missing: scripts/bootstrap cannot lock")
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(BOOTSTRAP, checkout / "scripts" / "bootstrap")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    stub = tmp_path / "python3"
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    log = tmp_path / "pip.log"
    env = {**os.environ, "PYTHON": str(stub), "PIP_LOG": str(log)}
    both = [
        subprocess.Popen(
            [str(checkout / "scripts" / "bootstrap")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    said = [p.communicate(timeout=60)[0] for p in both]
    assert [p.returncode for p in both] == [0, 0], said
    runs = log.read_text().splitlines()
    # The first installs (pip upgraded, then the project), the second finds .venv ready.
    assert [line.split()[0] for line in runs] == ["start", "end", "start", "end"], runs
    assert len({line.split()[1] for line in runs}) == 1, runs
    assert sum("bootstrap: .venv is ready" in s for s in said) == 1, said
