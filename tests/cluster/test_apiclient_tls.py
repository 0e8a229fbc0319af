"""The API client over TLS, as every real cluster is reached: the cluster's CA, a client
certificate, and a kubeconfig that embeds them (the kubernetes loader writes them to files)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.cluster.replayserver import Body, ReplayServer, fixture
from webhook.cluster.apiclient import ApiClient, ApiEndpoint, ApiError, api_endpoint_from_kubeconfig
from webhook.engine.resources.inventory import node_from_json


def _cert(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer or (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class Pki:
    def __init__(self, directory: Path) -> None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert("test-ca", ca_key, None, ca=True)
        issuer = (ca.subject, ca_key)
        self.files: dict[str, Path] = {}
        self.pems: dict[str, bytes] = {"ca": _pem(ca)}
        for role in ("server", "client"):
            key = ec.generate_private_key(ec.SECP256R1())
            self.pems[role] = _pem(_cert(f"{role}", key, issuer))
            self.pems[f"{role}-key"] = _key_pem(key)
        for name, pem in self.pems.items():
            path = directory / f"{name}.pem"
            path.write_bytes(pem)
            self.files[name] = path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def server(pki: Pki) -> Iterator[ReplayServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.files["ca"]))
    context.load_cert_chain(pki.files["server"], pki.files["server-key"])
    context.verify_mode = ssl.CERT_REQUIRED
    replay = ReplayServer(ssl_context=context).start()
    yield replay
    replay.stop()


def test_nodes_are_listed_with_the_cluster_ca_and_a_client_certificate(
    pki: Pki, server: ReplayServer
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    endpoint = ApiEndpoint(
        host=server.url,
        ca_file=str(pki.files["ca"]),
        cert_file=str(pki.files["client"]),
        key_file=str(pki.files["client-key"]),
    )
    client = ApiClient(endpoint)
    try:
        nodes, version = client.list("/api/v1/nodes", parse=node_from_json)
    finally:
        client.close()
    assert (len(nodes), version) == (4, "217")


def test_a_server_the_ca_did_not_sign_is_refused(
    pki: Pki, server: ReplayServer, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "other-cluster"
    elsewhere.mkdir()
    other = Pki(elsewhere)
    client = ApiClient(ApiEndpoint(host=server.url, ca_file=str(other.files["ca"])))
    try:
        with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
            client.list("/api/v1/nodes", parse=node_from_json)
    finally:
        client.close()


def test_a_kubeconfig_with_embedded_certificates_reaches_the_server(
    pki: Pki, server: ReplayServer, tmp_path: Path
) -> None:
    server.lists.append(Body(fixture("node-list.json")))

    def data(name: str) -> str:
        return base64.b64encode(pki.pems[name]).decode()

    config = tmp_path / "kubeconfig"
    config.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: tls
  cluster: {{server: "{server.url}", certificate-authority-data: {data("ca")}}}
users:
- name: admin
  user: {{client-certificate-data: {data("client")}, client-key-data: {data("client-key")}}}
contexts:
- name: tls
  context: {{cluster: tls, user: admin}}
current-context: tls
"""
    )
    client = ApiClient(api_endpoint_from_kubeconfig(str(config)))
    try:
        nodes, _ = client.list("/api/v1/nodes", parse=node_from_json)
    finally:
        client.close()
    assert {n.name for n in nodes} == {"cpu-0", "gpu-a100-0", "gpu-h100-mig-0", "gpu-t4-0"}
    assert "Authorization" not in server.list_requests()[0].headers
