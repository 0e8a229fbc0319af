#!/usr/bin/env python3
"""A new user's first minutes, as the README tells them: run by ``.ci/run`` in a fresh copy.

Terminal 1 runs the README's serve command and leaves it running; once it answers,
terminal 2 runs the README's first ``check`` (its output must be what the README shows) and
then the README's test command. Then Ctrl-C stops the server. Each step's output
is checked for what the README promises: install progress, the dev banner, a server that
answers on loopback, the whole check passing, a clean stop. Standard library only: it runs
before anything is installed.

    python3 tests/newcomer/walkthrough.py --serve ./scripts/serve --test ./scripts/test [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SECONDS = 900  # a first install on a slow mirror; the server answers in seconds after
STOP_SECONDS = 40  # gunicorn's graceful timeout is 20 s
DEFAULT_PORTS = (8443, 8080)


class WalkthroughError(Exception):
    pass


def quick_start_commands(readme: str) -> list[str]:
    """The commands of the README's first shell block under "Quick start", comments cut."""
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    if block is None:
        raise WalkthroughError("the README's Quick start has no ```sh block")
    lines = (line.split("#", 1)[0].strip() for line in block.group(1).splitlines())
    return [line for line in lines if line]


def first_check(readme: str) -> tuple[str, str, int]:
    """The quick start's one ``check``: its command line, the output the README shows, and
    the exit code it says (``(exit code N)`` after the block)."""
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```console\n\$ (.*?)\n(.*?)```\n(.*)", section, re.S)
    if block is None:
        raise WalkthroughError("the README's Quick start shows no check with its output")
    code = re.search(r"\(exit code (\d+)\)", block.group(3))
    if code is None:
        raise WalkthroughError("the README's Quick start does not say the check's exit code")
    return block.group(1), block.group(2), int(code.group(1))


def run_first_check(readme: str) -> None:
    """The README's first ``check``, run as shown: the output it shows, the exit code it says."""
    command, shown, code = first_check(readme)
    done = subprocess.run(
        shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    if done.stdout != shown:
        raise WalkthroughError(
            f"{command} printed:\n{done.stdout}\nnot, as the README shows:\n{shown}"
        )
    if done.returncode != code:
        raise WalkthroughError(f"{command} exited {done.returncode}, the README says {code}")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _any_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_server(command: str, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    ports = DEFAULT_PORTS
    extra: list[str] = []
    if not all(_free(p) for p in ports):
        # A shared machine may already serve there; a new user's machine would not.
        ports = (_any_port(), _any_port())
        extra = ["--port", str(ports[0]), "--health-port", str(ports[1])]
        print(f"walkthrough: default ports busy here; serving on {ports}", flush=True)
    out = log.open("wb")
    process = subprocess.Popen(
        [command, *extra], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    return process, ports[0], ports[1]


def wait_until_serving(process: subprocess.Popen[bytes], log: Path, health_port: int) -> None:
    deadline = time.monotonic() + INSTALL_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise WalkthroughError(f"serve exited with {process.returncode}:\n{_tail(log)}")
        try:
            status, body = _get(f"http://127.0.0.1:{health_port}/readyz")
        except OSError:
            time.sleep(1)
            continue
        if status == 200:
            if body != "ready\n":
                raise WalkthroughError(f"/readyz answered {body!r}")
            return
        time.sleep(1)
    raise WalkthroughError(f"serve did not become ready in {INSTALL_SECONDS} s:\n{_tail(log)}")


def check_server(log: Path, port: int, health_port: int, *, installed: bool) -> None:
    said = log.read_text(errors="replace")
    if installed:
        for step in ("bootstrap: creating .venv", "bootstrap: (1/2)", "bootstrap: (2/2)"):
            if step not in said:
                raise WalkthroughError(f"no install progress ({step!r}) in:\n{_tail(log)}")
        if "Successfully installed" not in said:
            raise WalkthroughError(f"pip's own progress is not shown:\n{_tail(log)}")
    if "license" in said.lower() and "deprecat" in said.lower():
        raise WalkthroughError("the install still warns about the project's license")
    banner = f"gpu-webhook (dev): https://localhost:{port}/mutate"
    if banner not in said:
        raise WalkthroughError(f"no dev banner {banner!r} in:\n{_tail(log)}")
    if _get(f"http://127.0.0.1:{health_port}/healthz") != (200, "ok\n"):
        raise WalkthroughError("/healthz does not answer ok")
    # What the banner says to try: a recorded review, checked against the dev CA.
    context = ssl.create_default_context(cafile=str(ROOT / "certs/dev/ca.crt"))
    body = (ROOT / "tests/fixtures/admission/pod-gpu-limits-mutate-Pod-CREATE.json").read_bytes()
    request = urllib.request.Request(
        f"https://localhost:{port}/mutate",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10, context=context) as reply:
        answer = json.loads(reply.read())
    if answer["response"]["allowed"] is not True or "patch" not in answer["response"]:
        raise WalkthroughError(f"the banner's example was not allowed and patched: {answer}")


def run_tests(command: str, pytest_args: list[str]) -> str:
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            [command, *pytest_args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert process.stdout is not None
        for line in process.stdout:  # shown as it comes, as in a terminal, and kept
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            out.write(line)
        code = process.wait()
        out.seek(0)
        said = out.read().decode(errors="replace")
    if code != 0:
        raise WalkthroughError(f"{command} exited with {code}")
    for step in ("== ruff format", "== ruff lint", "== mypy", "== layering", "== pytest"):
        if step not in said:
            raise WalkthroughError(f"{command} did not run {step!r}")
    if not re.search(r"^=+ \d+ passed", said, re.M) and "no tests were selected" not in said:
        raise WalkthroughError(f"{command} printed no pytest summary")
    return said


def stop_server(process: subprocess.Popen[bytes], log: Path) -> None:
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in terminal 1
    try:
        process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise WalkthroughError(f"serve did not stop within {STOP_SECONDS} s of Ctrl-C") from None
    if "Traceback" in log.read_text(errors="replace"):
        raise WalkthroughError(f"serve printed a traceback:\n{_tail(log, 60)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", required=True, help="terminal 1's command (required)")
    parser.add_argument("--test", required=True, help="terminal 2's command (required)")
    parser.add_argument("pytest_args", nargs="*", help="passed to the test command (default: none)")
    args = parser.parse_args()
    try:
        commands = quick_start_commands((ROOT / "README.md").read_text())
        if commands != [args.serve, args.test]:
            raise WalkthroughError(f"the README's Quick start says {commands}")
        installed = not (ROOT / ".venv").exists()
        with tempfile.TemporaryDirectory(prefix="gpu-webhook-serve-") as scratch:
            log = Path(scratch) / "serve.log"
            print(f"walkthrough: terminal 1: {args.serve}", flush=True)
            server, port, health_port = start_server(args.serve, log)
            try:
                wait_until_serving(server, log, health_port)
                check_server(log, port, health_port, installed=installed)
                readme = (ROOT / "README.md").read_text()
                print("walkthrough: terminal 2: the quick start's check", flush=True)
                run_first_check(readme)
                print(f"walkthrough: serving on {port}; terminal 2: {args.test}", flush=True)
                run_tests(args.test, args.pytest_args)
            finally:
                if server.poll() is None:
                    stop_server(server, log)
            print(f"walkthrough: terminal 1 output:\n{_tail(log, 12)}", flush=True)
    except WalkthroughError as exc:
        print(f"walkthrough: FAILED: {exc}", file=sys.stderr)
        return 1
    print("walkthrough: the README's commands work in a fresh copy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
