"""Fixtures of the serving tests: the loopback API server of the cluster tests (for the
server's background audit), and the two-worker TLS server the hostile tests attack."""

from collections.abc import Iterator

import pytest

from tests.builders import INVENTORY, RULES
from tests.cluster.conftest import fake_api  # noqa: F401 - a fixture, found by pytest here
from tests.running import Server
from webhook.files.certs import DEV_HOSTS, generate, write


@pytest.fixture(scope="module")
def attacked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Real gunicorn with two workers over TLS (a throwaway CA), the shipped rules and the
    example inventory; ``first_workers`` holds the pids it started with, so a test can tell
    that an attack ended none."""
    tmp = tmp_path_factory.mktemp("attacked")
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
    running = Server(tmp=tmp, cert_dir=tmp, rules=RULES, inventory=INVENTORY, workers=2)
    running.wait_for_fresh_workers(set(), 2)
    running.first_workers = set(running.workers())
    yield running
    assert running.stop() == 0, running.log.read_text()[-3000:]
