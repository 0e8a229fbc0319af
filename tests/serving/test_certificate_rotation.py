"""Certificate rotations on disk while real gunicorn serves TLS (issue 41): a chain through
an intermediate serves to clients that trust only the root, and a rotation to a pair that
would serve worse (expired a week ago, same CA) is refused: the old pair keeps serving,
the refusal is counted in /metrics and logged, and no worker is replaced."""

from __future__ import annotations

import ssl
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from prometheus_client.parser import text_string_to_metric_families

from tests import certchains
from tests.builders import INVENTORY, RULES, pod, review
from tests.certchains import DAY
from tests.running import Load, Server, mount, post, wait_until
from webhook.files.certs import ServingPair

pytestmark = pytest.mark.slow

ROOT = certchains.authority("root CA")
INTERMEDIATE = certchains.authority("intermediate CA", parent=ROOT)


def _files(pair: ServingPair) -> dict[str, bytes]:
    return {"ca.crt": pair.ca_crt, "tls.crt": pair.tls_crt, "tls.key": pair.tls_key}


def _leaf_der(pair: ServingPair) -> bytes:
    leaf = x509.load_pem_x509_certificates(pair.tls_crt)[0]
    return leaf.public_bytes(serialization.Encoding.DER)


def _served_leaf(server: Server) -> bytes:
    """The leaf a fresh connection gets, by a client trusting only the root (ca.crt)."""
    conn = server.connection()
    assert post(conn, "/mutate", review(pod()))[0] == 200
    assert isinstance(conn.sock, ssl.SSLSocket)
    served = conn.sock.getpeercert(binary_form=True)
    conn.close()
    assert served is not None
    return served


def _metric(server: Server, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(server.health("/metrics")[1]):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


@pytest.fixture
def chained(tmp_path):
    """A server whose Secret holds a leaf and its intermediate (tls.crt) and the root
    (ca.crt), as cert-manager writes them for an intermediate issuer."""
    pair = certchains.serving_pair(ROOT, chain=(INTERMEDIATE,))
    mount(tmp_path / "certs", _files(pair), version="1")
    running = Server(
        tmp=tmp_path, cert_dir=tmp_path / "certs", rules=RULES, inventory=INVENTORY, workers=2
    )
    running.wait_for_fresh_workers(set(), 2)
    yield running, pair
    Server.close_clients()
    assert running.stop() == 0, running.log.read_text()[-3000:]


def test_a_chain_through_an_intermediate_serves_clients_that_trust_only_the_root(chained):
    server, pair = chained
    assert server.client_context().get_ca_certs()[0]["subject"] == ((("commonName", "root CA"),),)
    assert _served_leaf(server) == _leaf_der(pair)


def test_a_rotation_to_an_expired_pair_of_the_same_ca_is_refused_and_the_old_pair_serves(
    chained,
):
    server, pair = chained
    workers = set(server.workers())
    assert _metric(server, "gpu_webhook_certificate_rejected") == 0
    assert _metric(server, "gpu_webhook_certificate_rejections_total", reason="expired") == 0
    expired = certchains.serving_pair(
        ROOT, chain=(INTERMEDIATE,), valid_from=-37 * DAY, valid_until=-7 * DAY
    )

    with Load(server, review(pod(gpus=1))) as load:
        assert load.wait_for(True)
        mount(server.cert_dir, _files(expired), version="2")
        wait_until(
            lambda: _metric(server, "gpu_webhook_certificate_rejected") == 1,
            timeout=10,
            what="the master refused the rotation at a scrape",
        )
        for _ in range(4):  # new connections reach both workers
            assert _served_leaf(server) == _leaf_der(pair)
        time.sleep(0.5)

    assert load.failures == []
    assert load.errors == []
    assert set(server.workers()) == workers
    assert (_metric(server, "gpu_webhook_certificate_rejections_total", reason="expired") or 0) >= 1
    log = server.log.read_text()
    assert "new TLS certificate not put in force" in log
    assert '"reason":"expired"' in log

    longer = certchains.serving_pair(ROOT, chain=(INTERMEDIATE,), valid_until=90 * DAY)
    mount(server.cert_dir, _files(longer), version="3")
    wait_until(
        lambda: _served_leaf(server) == _leaf_der(longer),
        timeout=10,
        what="the next good rotation is served",
    )
    wait_until(
        lambda: _metric(server, "gpu_webhook_certificate_rejected") == 0,
        timeout=10,
        what="the refusal clears",
    )
    assert set(server.workers()) == workers
