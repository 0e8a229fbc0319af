"""A real ``gpu-webhook serve`` (gunicorn, TLS) in a subprocess, and mounted-volume helpers."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.builders import ROOT, RULES, pod, review
from webhook.files.certs import DEV_HOSTS, generate, write


def command_line(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "webhook", *map(str, args)]


def command_environment(env: dict[str, str]) -> dict[str, str]:
    """The test run's environment, without a kubeconfig, with ``env`` on top."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    environment.pop("KUBECONFIG", None)
    return environment


def gpu_webhook(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, in its own process, with no ambient kubeconfig and no
    colour; ``env`` adds to the environment."""
    return subprocess.run(
        command_line(*args),
        cwd=cwd,
        env=command_environment({"NO_COLOR": "1", **(env or {})}),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def kubeconfig(directory: Path, url: str, token: str = "not-a-secret") -> str:
    """A kubeconfig with a bearer token for a loopback server that answers like the API."""
    path = directory / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: test, cluster: {{server: "{url}"}}}}]
users: [{{name: viewer, user: {{token: {token}}}}}]
contexts: [{{name: test, context: {{cluster: test, user: viewer}}}}]
current-context: test
"""
    )
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def mount(directory: Path, files: dict[str, bytes], *, version: str) -> None:
    """Lay ``files`` out as the kubelet mounts a ConfigMap or Secret: a timestamped
    directory, ``..data`` pointing at it and one symlink per key; a second call swaps
    ``..data`` atomically, which is all that happens on disk when the object changes."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"..{version}"
    target.mkdir()
    for name, data in files.items():
        (target / name).write_bytes(data)
    staging = directory / "..data_tmp"
    staging.symlink_to(target.name)
    staging.replace(directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


class Server:
    clients: list[http.client.HTTPSConnection] = []  # noqa: RUF012 - closed after each test

    @classmethod
    def close_clients(cls) -> None:
        while cls.clients:
            cls.clients.pop().close()

    def __init__(
        self,
        *,
        tmp: Path,
        cert_dir: Path,
        rules: Path,
        inventory: Path | None,
        workers: int = 2,
        extra: tuple[str, ...] = (),
        ready_timeout: float = 20.0,
    ) -> None:
        self.port = free_port()
        self.health_port = free_port()
        self.cert_dir = cert_dir
        self.log = tmp / f"server-{self.port}.log"
        args = [
            sys.executable, "-m", "webhook", "serve",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--health-port", str(self.health_port),
            "--cert-dir", str(cert_dir),
            "--rules", str(rules),
            "--workers", str(workers),
        ]  # fmt: skip
        if inventory is not None:
            args += ["--inventory", str(inventory)]
        args += extra
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.log.read_text()}")
            try:
                if self.health("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready in {timeout}s:\n{self.log.read_text()}")

    def health(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def connection(self) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(
            "localhost", self.port, context=self.client_context(), timeout=10
        )
        self.clients.append(conn)
        return conn

    def workers(self) -> list[int]:
        """The master's children that are gunicorn workers (the watcher is not forked)."""
        return workers_of(self.process.pid)

    def serving_workers(self) -> int:
        """How many workers have logged that they accept connections, since the start."""
        return self.log.read_text().count("is accepting connections")

    def wait_for_fresh_workers(self, gone: set[int], count: int, timeout: float = 40.0) -> None:
        """Until ``count`` workers run that are not in ``gone`` and all of them accept."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, f"the master exited:\n{self.log.read_text()}"
            now = set(self.workers())
            fresh = now - gone
            if len(now) == count and len(fresh) == count and self._accepting(fresh):
                return
            assert time.monotonic() < deadline, f"no fresh workers:\n{self.log.read_text()}"
            time.sleep(0.1)

    def _accepting(self, pids: set[int]) -> bool:
        text = self.log.read_text()
        return all(f"worker {pid} is accepting connections" in text for pid in pids)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def dev_certs(directory: Path, *, days: int = 1) -> Path:
    """A throwaway CA and a serving certificate for the dev hosts, written to ``directory``."""
    write(
        generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=days),
        directory,
    )
    return directory


def live_inventory_server(tmp: Path, api_url: str, *extra: str) -> Server:
    """``serve --kubeconfig``: the shipped rules and two workers, with no inventory file but
    the live one of the API server at ``api_url``, and fresh certificates in ``tmp/certs``;
    ``extra``: more flags."""
    return Server(
        tmp=tmp,
        cert_dir=dev_certs(tmp / "certs"),
        rules=RULES,
        inventory=None,
        workers=2,
        extra=("--kubeconfig", kubeconfig(tmp, api_url), *extra),
    )


def post(
    conn: http.client.HTTPSConnection,
    path: str,
    body: Any,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": content_type})
    reply = conn.getresponse()
    raw = reply.read()
    try:
        return reply.status, json.loads(raw)
    except ValueError:
        return reply.status, raw.decode(errors="replace")


def reviews_answered(server: Server, *, count: int, timeout: float) -> list[Any]:
    """Statuses of ``count`` GPU pod reviews, each on a fresh connection given ``timeout``
    (an error's repr where none came): what the attack tests ask of a server under attack."""
    statuses: list[Any] = []
    for _ in range(count):
        conn = server.connection()
        conn.timeout = timeout
        try:
            statuses.append(post(conn, "/mutate", review(pod(gpus=1)))[0])
        except (OSError, http.client.HTTPException) as error:
            statuses.append(repr(error))
        conn.close()
    return statuses


def workers_of(master: int) -> list[int]:
    """Children of ``master``, from /proc."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == master:
                children.append(int(entry.name))
    return children


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pss_kib(pid: int) -> int:
    """A process's proportional set size: its private pages plus its share of the pages it
    shares (a forked worker with its master), so that a pod's processes add up to what the
    pod really holds, where ``VmRSS`` counts a shared page in each process."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def footprint(server: Server) -> tuple[int, int, list[int], list[int]]:
    """The master's RSS (KiB) and open descriptors, then each worker's, sorted: what a soak
    compares before and after."""
    workers = server.workers()
    return (
        rss_kib(server.process.pid),
        open_fds(server.process.pid),
        sorted(rss_kib(pid) for pid in workers),
        sorted(open_fds(pid) for pid in workers),
    )


def wait_until(condition: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


class Load:
    """Reviews sent without pause from a few threads, each on its own kept-alive connection:
    ``answers`` (allowed or not), ``failures`` (answers other than 200) and ``errors``
    (connections lost, reconnected)."""

    def __init__(self, server: Server, body: Any, threads: int = 3) -> None:
        self.server = server
        self.body = body
        self.answers: list[bool] = []
        self.failures: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        conn = self.server.connection()
        while not self._stop.is_set():
            try:
                status, answer = post(conn, "/mutate", self.body)
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(repr(error))
                conn = self.server.connection()
                continue
            if status != 200:
                self.failures.append(f"{status}: {answer}")
            else:
                self.answers.append(answer["response"]["allowed"])

    def wait_for(self, allowed: bool, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.answers[-6:] == [allowed] * 6:
                return True
            time.sleep(0.05)
        return False
