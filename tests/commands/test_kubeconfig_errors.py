"""Every command that reads a kubeconfig says what is wrong with the cluster in one line
and exits 2: a server nobody listens on, a TLS certificate it cannot trust, a forbidden
answer, a kubeconfig that is not YAML or not a kubeconfig, a context it lacks. Never a
traceback."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.builders import RULES
from tests.running import command_environment, command_line, free_port, gpu_webhook, kubeconfig
from webhook.files.certs import DEV_HOSTS, generate, write

pytestmark = pytest.mark.slow

GPU_POD = str(Path(__file__).resolve().parents[2] / "examples/gpu-pod.yaml")

# Each command as a user would point it at a cluster: (what it is, its arguments).
COMMANDS = [
    pytest.param(["certs", "install"], id="certs-install"),
    pytest.param(["check", GPU_POD, "--rules", RULES], id="check"),
    pytest.param(["audit", "--rules", RULES], id="audit"),
    pytest.param(["explain", "pod", "train-0", "-n", "team-a", "--rules", RULES], id="explain"),
    pytest.param(["inventory"], id="inventory"),
]


class Forbidding(BaseHTTPRequestHandler):
    """An API server that knows the caller and refuses everything, as RBAC does."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _refuse(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f'nodes is forbidden: User "viewer" cannot get path "{self.path}"',
                "reason": "Forbidden",
                "code": 403,
            }
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = _refuse


def _serve(context: ssl.SSLContext | None) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Forbidding)
    server.daemon_threads = True
    scheme = "http"
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def forbidding() -> Iterator[str]:
    yield from _serve(None)


@pytest.fixture
def untrusted(tmp_path: Path) -> Iterator[str]:
    """HTTPS with a certificate of a CA the kubeconfig does not name."""
    pair = tmp_path / "server-pair"
    write(generate(service="api", namespace="test", extra_sans=DEV_HOSTS), pair)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair / "tls.crt", pair / "tls.key")
    yield from _serve(context)


def run(tmp_path: Path, command: list[str], *extra: str) -> tuple[int, list[str]]:
    done = gpu_webhook(*command, *extra, cwd=tmp_path)
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()


def assert_one_line(code: int, lines: list[str], command: list[str], *words: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith(f"gpu-webhook {command[0]}: "), lines
    assert "Traceback" not in lines[0]
    for word in words:
        assert word in lines[0], lines


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_port_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{free_port()}")
    code, lines = run(tmp_path, command, "--kubeconfig", config)
    assert_one_line(code, lines, command, "127.0.0.1", "refused")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_untrusted_certificate_is_one_line_and_exit_2(
    tmp_path: Path, untrusted: str, command: list[str]
) -> None:
    code, lines = run(tmp_path, command, "--kubeconfig", kubeconfig(tmp_path, untrusted))
    assert_one_line(code, lines, command, "certificate verify failed")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_forbidden_answer_is_one_line_and_exit_2(
    tmp_path: Path, forbidding: str, command: list[str]
) -> None:
    code, lines = run(tmp_path, command, "--kubeconfig", kubeconfig(tmp_path, forbidding))
    assert_one_line(code, lines, command, "403", "forbidden")


BROKEN = [
    pytest.param("clusters: [\n  - oops: {\n", "not YAML at line 2", id="not-yaml"),
    pytest.param("just a string\n", "not a kubeconfig", id="not-a-mapping"),
    pytest.param("apiVersion: v1\nkind: Config\n", "current-context", id="no-context"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("text", "said"), BROKEN)
def test_a_broken_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, command: list[str], text: str, said: str
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(text)
    code, lines = run(tmp_path, command, "--kubeconfig", str(config))
    assert_one_line(code, lines, command, str(config), said)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_context_the_kubeconfig_lacks_is_one_line_that_names_those_it_has(
    tmp_path: Path, command: list[str]
) -> None:
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{free_port()}")
    code, lines = run(tmp_path, command, "--kubeconfig", config, "--context", "prod")
    assert_one_line(code, lines, command, "no context 'prod'", "contexts: test")


@pytest.mark.parametrize(("text", "said"), BROKEN[:2])
def test_serve_refuses_a_broken_kubeconfig_in_one_line(
    tmp_path: Path, text: str, said: str
) -> None:
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS), tmp_path / "c")
    config = tmp_path / "kubeconfig"
    config.write_text(text)
    command = ["serve", "--host", "127.0.0.1", "--cert-dir", str(tmp_path / "c")]
    code, lines = run(tmp_path, command, "--rules", RULES, "--kubeconfig", str(config))
    assert_one_line(code, lines, command, str(config), said)


def two_contexts(tmp_path: Path, *, live: str) -> Path:
    """A kubeconfig whose current context "gone" points at a closed port, and whose context
    "live" points at ``live``."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- {{name: gone, cluster: {{server: "https://127.0.0.1:{free_port()}"}}}}
- {{name: live, cluster: {{server: "{live}"}}}}
users: [{{name: viewer, user: {{token: not-a-secret}}}}]
contexts:
- {{name: gone, context: {{cluster: gone, user: viewer}}}}
- {{name: live, context: {{cluster: live, user: viewer}}}}
current-context: gone
"""
    )
    return config


@pytest.mark.parametrize("command", COMMANDS)
def test_context_picks_the_cluster_as_kubectl_does(
    tmp_path: Path, forbidding: str, command: list[str]
) -> None:
    """The current context points at a closed port; ``--context`` at a server that answers
    (403): the answer proves which one was used."""
    config = two_contexts(tmp_path, live=forbidding)
    code, lines = run(tmp_path, command, "--kubeconfig", str(config), "--context", "live")
    assert_one_line(code, lines, command, "403")


def test_serve_refuses_a_context_its_kubeconfig_lacks_in_one_line(tmp_path: Path) -> None:
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS), tmp_path / "c")
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{free_port()}")
    command = ["serve", "--host", "127.0.0.1", "--cert-dir", str(tmp_path / "c")]
    code, lines = run(
        tmp_path, command, "--rules", RULES, "--kubeconfig", config, "--context", "prod"
    )
    assert_one_line(code, lines, command, "no context 'prod'", "contexts: test")


def test_serve_watches_the_cluster_of_its_context(tmp_path: Path, forbidding: str) -> None:
    """The inventory watcher (a process of its own) is started with the context too: it
    says which API server it watches."""
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS), tmp_path / "c")
    config = two_contexts(tmp_path, live=forbidding)
    process = subprocess.Popen(
        command_line(
            "serve", "--host", "127.0.0.1", "--port", str(free_port()),
            "--health-port", str(free_port()), "--cert-dir", tmp_path / "c", "--rules", RULES,
            "--kubeconfig", config, "--context", "live", "--workers", "1",
        ),
        cwd=tmp_path, env=command_environment({}), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        watched = ""
        while time.monotonic() < deadline and not watched:
            line = process.stderr.readline()
            if not line:
                break
            if "inventory watcher listening" in line:
                watched = json.loads(line)["api"]
        assert watched == forbidding
    finally:
        process.terminate()
        process.wait(30)
        if process.stderr is not None:
            process.stderr.close()
