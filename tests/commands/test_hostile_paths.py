"""Commands given paths that are not manifest files (issue 27): a FIFO, a device, a file
over the cap, a directory where a file is meant. Each is refused in one line on stderr,
naming the file and what to do, with exit code 2, at once: ``check /dev/zero`` used to read
until a MemoryError (exit 1, "denied"), and ``check some.fifo`` waited forever."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.builders import INVENTORY, ROOT, RULES
from tests.running import command_environment, command_line
from webhook.files.manifests import MAX_FILE_BYTES

pytestmark = pytest.mark.slow

PROMPT_SECONDS = 15  # a command that waited on a FIFO would be killed at 60
POD = ROOT / "examples" / "gpu-pod.yaml"


def run(
    *args: str | Path, stdin: object = subprocess.DEVNULL
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        command_line(*args),
        cwd=ROOT,
        env=command_environment({"NO_COLOR": "1"}),
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, time.monotonic() - started


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pods.yaml"  # named like a manifest: the name decides nothing
    os.mkfifo(path)
    return path


@pytest.fixture
def over_the_cap(tmp_path: Path) -> Path:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as out:  # sparse: costs no disk
        out.truncate(MAX_FILE_BYTES + 1)
    return path


def hostile(name: str, fifo: Path, over_the_cap: Path) -> tuple[Path, str]:
    return {
        "fifo": (fifo, "is a FIFO (named pipe), not a regular file"),
        "device": (Path("/dev/zero"), "is a character device, not a regular file"),
        "over the cap": (over_the_cap, "holds more than 64 MiB"),
    }[name]


def assert_refused_in_one_line(
    done: subprocess.CompletedProcess[str], took: float, path: Path, said: str
) -> None:
    assert took < PROMPT_SECONDS
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert str(path) in line
    assert said in line
    assert "Traceback" not in done.stderr


KINDS = ["fifo", "device", "over the cap"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("check",), id="check PATH"),
        pytest.param(("check", "-f"), id="check -f"),
        pytest.param(("audit", "-f"), id="audit -f"),
    ],
)
def test_a_manifest_path_that_is_no_regular_file_is_refused_at_once(
    command: tuple[str, ...], kind: str, fifo: Path, over_the_cap: Path
) -> None:
    path, said = hostile(kind, fifo, over_the_cap)

    done, took = run(*command, path, "--rules", RULES, "--inventory", INVENTORY)

    assert_refused_in_one_line(done, took, path, said)


@pytest.mark.parametrize("kind", [*KINDS, "directory"])
@pytest.mark.parametrize("command", ["check", "audit"])
def test_an_inventory_that_is_no_regular_file_is_refused_at_once(
    command: str, kind: str, fifo: Path, over_the_cap: Path, tmp_path: Path
) -> None:
    if kind == "directory":
        path, said = tmp_path, "is a directory, not a file"
    else:
        path, said = hostile(kind, fifo, over_the_cap)
    args = ("check", POD) if command == "check" else ("audit", "-f", POD)

    done, took = run(*args, "--rules", RULES, "--inventory", path)

    assert_refused_in_one_line(done, took, path, said)
    assert "the inventory is not usable" in done.stderr


def test_standard_input_is_capped_too() -> None:
    with open("/dev/zero", "rb") as endless:
        done, took = run("check", "-", "--rules", RULES, "--inventory", INVENTORY, stdin=endless)

    assert took < PROMPT_SECONDS
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "-: standard input holds more than 64 MiB" in line


def test_standard_input_still_works() -> None:
    with POD.open("rb") as pods:
        done, _ = run("check", "-", "--rules", RULES, "--inventory", INVENTORY, stdin=pods)

    assert done.returncode == 0, done.stderr
    assert "allowed" in done.stdout


@pytest.mark.parametrize("command", [("check",), ("audit", "-f")])
def test_a_directory_still_walks_its_regular_files_and_passes_over_a_fifo(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    (tmp_path / "pod.yaml").write_bytes(POD.read_bytes())
    os.mkfifo(tmp_path / "stuck.yaml")

    done, took = run(*command, tmp_path, "--rules", RULES, "--inventory", INVENTORY)

    assert took < PROMPT_SECONDS
    assert done.returncode == 0, done.stderr
    assert "stuck.yaml" not in done.stderr
    assert "gpu-pod" in done.stdout or "1 object" in done.stdout
