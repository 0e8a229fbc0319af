"""The gunicorn master's side of the inventory watcher: start it, restart it, stop it.

The watcher is a fresh interpreter (``python -m webhook.cluster.watcher``), not a fork:
the master has threads (health server, this monitor), and a fork would copy their locks.
Its socket lives in a private directory (mode 0700) that only this user can enter, made
when the watcher is first started and removed when it is stopped.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from webhook.cluster.reflector import Backoff

log = logging.getLogger("webhook.inventory.watcher")
SOCKET_NAME = "inventory.sock"
# Workers answer admissions while they wait; the watcher only delays the inventory when it
# waits. When both want the pod's CPU, the workers go first.
WATCHER_NICENESS = 10
# A watcher that ran this long before it died was working: restart it without waiting
# for the backoff built up by earlier crashes.
HEALTHY_RUN_SECONDS = 60.0


class WatcherProcess:
    """One watcher process, restarted with backoff whenever it exits until ``stop``."""

    label = "inventory watcher"

    def __init__(
        self,
        *,
        kubeconfig: str | None,
        log_level: str = "info",
        backoff: Backoff | None = None,
        context: str | None = None,
        status_rules: str | None = None,
        lease_namespace: str = "",
        match_conditions: str = "",
    ) -> None:
        self.kubeconfig = kubeconfig
        # Where the rule files are, for the replica that writes the rule objects' status.
        self.status_rules = status_rules
        self.lease_namespace = lease_namespace
        # The webhook configurations' name whose match conditions the Lease holder syncs.
        self.match_conditions = match_conditions
        self.context = context
        self.log_level = log_level
        self.backoff = backoff or Backoff(initial_seconds=0.5, cap_seconds=30.0)
        self.directory = ""
        self.restarts = 0
        # Called (in the master) each time the process is started again: the server counts.
        self.on_restart: Callable[[], None] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._keep_running, name="watcher", daemon=True)

    @property
    def socket_path(self) -> str:
        return os.path.join(self.directory, SOCKET_NAME)

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None else process.pid

    def start(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="gpu-webhook-inventory-")
        os.chmod(self.directory, 0o700)
        with self._lock:
            self._process = self._spawn()
        self._monitor.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stop the watcher (SIGTERM, then SIGKILL) and remove its directory."""
        self._stop.set()
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._monitor.is_alive():
            self._monitor.join(timeout_seconds)
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "webhook.cluster.watcher"]
        command += ["--socket", self.socket_path, "--log-level", self.log_level]
        command += ["--parent", str(os.getpid()), "--nice", str(WATCHER_NICENESS)]
        if self.kubeconfig:
            command += ["--kubeconfig", self.kubeconfig]
        if self.context:
            command += ["--context", self.context]
        if self.status_rules:
            command += ["--rules", self.status_rules]
            command += ["--lease-namespace", self.lease_namespace or "gpu-webhook"]
            if self.match_conditions:
                command += ["--sync-match-conditions", self.match_conditions]
        return command

    def _spawn(self) -> subprocess.Popen[bytes]:
        # The watcher runs the code this process runs, wherever it was imported from.
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, path]))}
        process = subprocess.Popen(self._command(), env=env, stdin=subprocess.DEVNULL)
        log.info("%s started", self.label, extra={"pid": process.pid})
        return process

    def _keep_running(self) -> None:
        while not self._stop.is_set():
            process = self._process
            assert process is not None
            started = time.monotonic()
            # gunicorn's master may reap the child first; wait then reports 0.
            code = process.wait()
            if self._stop.is_set():
                return
            if time.monotonic() - started > HEALTHY_RUN_SECONDS:
                self.backoff.reset()
            delay = self.backoff.next()
            log.warning(
                "%s exited with %s; starting it again in %.1f s",
                self.label,
                code,
                delay,
                extra={"pid": process.pid, "code": code, "retry_in_seconds": round(delay, 3)},
            )
            if self._stop.wait(delay):
                return
            with self._lock:
                if self._stop.is_set():
                    return
                self._process = self._spawn()
                self.restarts += 1
            if self.on_restart is not None:
                self.on_restart()
