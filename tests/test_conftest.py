"""scripts/test's two phases together run every test once: the parallel phase all but the
tests marked serial, the serial phase only those."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.builders import ROOT

# A module of serial tests and one without any, beside each other.
FILES = ["tests/serving/test_soak.py", "tests/serving/test_health.py"]
COLLECT = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]


def collected(*args: str) -> set[str]:
    done = subprocess.run(
        [*COLLECT, *FILES, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_the_phases_split_the_tests_by_the_serial_mark_and_lose_none() -> None:
    every = collected()
    parallel = collected("--phase", "parallel")
    serial = collected("--phase", "serial")

    assert serial == collected("-m", "serial")
    assert serial
    assert parallel.isdisjoint(serial)
    assert parallel | serial == every
