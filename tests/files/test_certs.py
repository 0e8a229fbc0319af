"""The generated pair serves: checked by cryptography's verifier and by a real TLS handshake."""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from tests import certchains
from tests.builders import RULES
from tests.running import Server, gpu_webhook
from webhook.files import certs

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
SERVICE_NAMES = [
    "gpu-webhook",
    "gpu-webhook.gpu-webhook",
    "gpu-webhook.gpu-webhook.svc",
    "gpu-webhook.gpu-webhook.svc.cluster.local",
]


@pytest.fixture(scope="module")
def pair() -> certs.ServingPair:
    return certs.generate(
        service="gpu-webhook",
        namespace="gpu-webhook",
        extra_sans=["webhook.example.org", "127.0.0.1", "::1"],
        days=90,
        now=NOW,
    )


def _subject(name: str) -> x509.DNSName | x509.IPAddress:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _verify(pair: certs.ServingPair, name: str, when: dt.datetime) -> None:
    ca = x509.load_pem_x509_certificate(pair.ca_crt)
    leaf = x509.load_pem_x509_certificate(pair.tls_crt)
    verifier = PolicyBuilder().store(Store([ca])).time(when).build_server_verifier(_subject(name))
    verifier.verify(leaf, [])


@pytest.mark.parametrize(
    "name", [*SERVICE_NAMES, "webhook.example.org", "127.0.0.1", "::1"], ids=str
)
def test_the_chain_verifies_for_every_service_name_and_extra_san(pair, name):
    _verify(pair, name, NOW + dt.timedelta(days=1))


@pytest.mark.parametrize(
    ("name", "when"),
    [
        pytest.param("other.gpu-webhook.svc", NOW, id="a-name-not-in-the-sans"),
        pytest.param("gpu-webhook.gpu-webhook.svc", NOW + dt.timedelta(days=91), id="expired"),
        pytest.param("gpu-webhook.gpu-webhook.svc", NOW - dt.timedelta(hours=1), id="not-yet"),
    ],
)
def test_the_verifier_refuses_what_the_pair_does_not_cover(pair, name, when):
    with pytest.raises(VerificationError):
        _verify(pair, name, when)


def test_both_keys_are_ecdsa_p256(pair):
    for cert in (pair.ca(), pair.leaf()):
        key = cert.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey)
        assert isinstance(key.curve, ec.SECP256R1)


def test_files_are_written_with_the_key_readable_by_its_owner_only(pair, tmp_path):
    certs.write(pair, tmp_path / "out")
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    assert modes == {"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600}
    assert certs.read(tmp_path / "out") == pair


def test_inspect_finds_nothing_wrong_with_a_fresh_pair(pair):
    report = certs.inspect(pair, required=SERVICE_NAMES, now=NOW)
    assert report.problems == ()
    assert report.sans == (*SERVICE_NAMES, "webhook.example.org", "127.0.0.1", "::1")


def _other() -> certs.ServingPair:
    return certs.generate(service="other", namespace="elsewhere", now=NOW)


@pytest.mark.parametrize(
    ("change", "required", "when", "problem"),
    [
        pytest.param(
            lambda p: dataclasses.replace(p, ca_crt=_other().ca_crt),
            [],
            NOW,
            "does not verify against ca.crt",
            id="signed-by-another-ca",
        ),
        pytest.param(
            lambda p: dataclasses.replace(p, tls_key=_other().tls_key),
            [],
            NOW,
            "tls.key does not belong to tls.crt",
            id="key-of-another-certificate",
        ),
        pytest.param(lambda p: p, ["gpu-webhook.other-ns.svc"], NOW, "SANs lack", id="missing-san"),
        pytest.param(
            lambda p: p, [], NOW + dt.timedelta(days=365), "not valid at validation", id="expired"
        ),
    ],
)
def test_inspect_reports_a_pair_that_would_not_serve(pair, change, required, when, problem):
    report = certs.inspect(change(pair), required=required, now=when)
    assert any(problem in p for p in report.problems), report.problems


def test_renewal_is_due_only_inside_the_window(pair):
    window = dt.timedelta(days=30)
    assert not certs.expires_within(pair, window, NOW + dt.timedelta(days=59))
    assert certs.expires_within(pair, window, NOW + dt.timedelta(days=61))


def test_the_ca_bundle_keeps_the_previous_ca_until_it_expires(pair):
    newer = certs.generate(service="gpu-webhook", namespace="gpu-webhook", now=NOW)
    bundle = certs.ca_bundle(newer.ca_crt, pair.ca_crt, NOW)
    assert x509.load_pem_x509_certificates(bundle) == [newer.ca(), pair.ca()]
    assert certs.ca_bundle(newer.ca_crt, bundle, NOW) == bundle
    after_expiry = NOW + dt.timedelta(days=100)
    assert certs.ca_bundle(newer.ca_crt, bundle, after_expiry) == newer.ca_crt
    assert certs.trusts(bundle, pair.ca_crt)
    assert not certs.trusts(newer.ca_crt, pair.ca_crt)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """``gpu-webhook serve`` itself, serving a freshly generated pair."""
    root = tmp_path_factory.mktemp("tls")
    pair = certs.generate(service="gpu-webhook", namespace="gpu-webhook")
    certs.write(pair, root / "certs")
    server = Server(tmp=root, cert_dir=root / "certs", rules=RULES, inventory=None, workers=1)
    yield server.port, root / "certs"
    assert server.stop() == 0, server.log.read_text()


def _get(port: int, cafile: Path, hostname: str) -> bytes:
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=hostname) as tls,
    ):
        request = f"POST /mutate HTTP/1.1\r\nHost: {hostname}\r\nConnection: close\r\n"
        tls.sendall(
            (request + "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}").encode()
        )
        chunks = []
        while chunk := tls.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.slow
@pytest.mark.parametrize("hostname", SERVICE_NAMES, ids=str)
def test_a_tls_client_trusting_the_ca_reaches_the_server_by_service_name(tls_server, hostname):
    port, directory = tls_server
    response = _get(port, directory / "ca.crt", hostname)
    assert response.startswith(b"HTTP/1.1 400"), "the webhook answered: not an AdmissionReview"
    assert b"AdmissionReview" in response


@pytest.mark.slow
def test_a_tls_client_refuses_the_server_under_another_name(tls_server):
    port, directory = tls_server
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        _get(port, directory / "ca.crt", "gpu-webhook.default.svc")


@pytest.mark.slow
def test_a_tls_client_trusting_another_ca_refuses_the_server(tls_server, tmp_path):
    port, _ = tls_server
    certs.write(_other(), tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        _get(port, tmp_path / "ca.crt", "gpu-webhook.gpu-webhook.svc")


# --- chains through an intermediate CA (issue 41) ------------------------------------------


@pytest.fixture(scope="module")
def root() -> certchains.Authority:
    return certchains.authority("root CA")


@pytest.fixture(scope="module")
def intermediate(root) -> certchains.Authority:
    return certchains.authority("intermediate CA", parent=root)


def test_inspect_verifies_a_leaf_through_the_intermediate_tls_crt_carries(root, intermediate):
    pair = certchains.serving_pair(root, chain=(intermediate,))
    assert len(x509.load_pem_x509_certificates(pair.tls_crt)) == 2
    report = certs.inspect(pair, required=certs.DEV_HOSTS)
    assert report.problems == ()
    assert report.subject == "CN=gpu-webhook.dev.svc"


def test_inspect_verifies_through_two_intermediates(root, intermediate):
    second = certchains.authority("issuing CA", parent=intermediate)
    pair = certchains.serving_pair(root, chain=(intermediate, second))
    assert certs.inspect(pair).problems == ()


def _leaf_only(pair: certs.ServingPair) -> certs.ServingPair:
    first = x509.load_pem_x509_certificates(pair.tls_crt)[0]
    return dataclasses.replace(pair, tls_crt=first.public_bytes(serialization.Encoding.PEM))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda root, intermediate: _leaf_only(
                certchains.serving_pair(root, chain=(intermediate,))
            ),
            id="the-leaf-without-its-intermediate",
        ),
        pytest.param(
            lambda root, _: certchains.serving_pair(
                root, chain=(certchains.authority("other", parent=certchains.authority("x")),)
            ),
            id="an-intermediate-of-another-root",
        ),
    ],
)
def test_inspect_refuses_a_leaf_with_no_path_to_the_root(root, intermediate, make):
    (problem,) = certs.inspect(make(root, intermediate)).problems
    assert "does not verify against ca.crt" in problem


def test_certs_inspect_exits_0_for_a_chain_the_root_trusts(root, intermediate, tmp_path):
    certs.write(certchains.serving_pair(root, chain=(intermediate,)), tmp_path)
    done = gpu_webhook("certs", "inspect", tmp_path, "--san", "localhost")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "problem" not in done.stdout
