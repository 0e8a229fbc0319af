"""A DRA inventory of 25,600 devices (200 nodes x 128, as issue 35's) served by real
gunicorn over TLS with two workers, as deployed: the master parses the file once, compacts
it, and its workers take that copy through the fork instead of parsing their own. The pod
(master and workers, by proportional set size: a page the fork shares counts once) must
leave room under the deployment's memory limit for the memo's bound, the answers in
flight and the reviews being judged (docs/server.md's memory table), and reviews are
answered by the same workers throughout."""

from __future__ import annotations

import json

import pytest

from tests.dra_inventory import large_dra_inventory
from tests.rulesets import rules_dir
from tests.running import Server, pss_kib, reviews_answered
from tests.serving.test_memory import MIB, container_memory_limit
from webhook.admission.memo import POD_MEMO_BYTES
from webhook.files.certs import DEV_HOSTS, generate, write
from webhook.serving.worker.finishing import MAX_UNSENT_BYTES

pytestmark = pytest.mark.slow

# docs/server.md: eight 6 MiB reviews at once, beside the processes themselves.
REVIEWS_AT_ONCE = 8 * 6 * MIB


def test_a_25600_device_inventory_fits_beside_the_memo_and_answer_budgets(tmp_path):
    write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp_path)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(large_dra_inventory(200, 128)))
    server = Server(
        tmp=tmp_path,
        cert_dir=tmp_path,
        rules=rules_dir(tmp_path),
        inventory=inventory,
        ready_timeout=180,
    )
    try:
        server.wait_for_fresh_workers(set(), 2)
        workers = set(server.workers())
        assert reviews_answered(server, count=20, timeout=10) == [200] * 20
        held = sum(pss_kib(pid) for pid in [server.process.pid, *workers]) * 1024
        room = container_memory_limit() - POD_MEMO_BYTES - 2 * MAX_UNSENT_BYTES - REVIEWS_AT_ONCE
        assert held < room, f"the pod holds {held / MIB:.0f} MiB, {room / MIB:.0f} MiB left"
        assert reviews_answered(server, count=20, timeout=10) == [200] * 20
        assert set(server.workers()) == workers, "a worker was replaced"
    finally:
        Server.close_clients()
        assert server.stop() == 0, server.log.read_text()
