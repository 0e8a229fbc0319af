"""Throwaway certificates for development only: a CA and a serving certificate for
localhost, so ``gpu-webhook serve --dev`` speaks TLS like the real thing.

Not for clusters: keys are written unencrypted and the CA signs anything we ask it to.
(To be folded into ``webhook.certs`` once that lands.)
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEV_DIR = Path("certs/dev")
LIFETIME = datetime.timedelta(days=30)
RENEW_BEFORE = datetime.timedelta(days=1)


def ensure_dev_certs(directory: Path = DEV_DIR) -> Path:
    """``ca.crt``, ``tls.crt`` and ``tls.key`` in ``directory``; made anew when missing or
    about to expire. Returns the directory."""
    if not _usable(directory / "tls.crt") or not (directory / "tls.key").exists():
        write_dev_certs(directory)
    return directory


def write_dev_certs(
    directory: Path, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-webhook dev CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    cert = (
        _builder(subject, ca_name, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(directory / "ca.crt", ca.public_bytes(pem), 0o644)
    key_bytes = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Key first, then certificate: a reloading server sees a matching pair once tls.crt moves.
    _write(directory / "tls.key", key_bytes, 0o600)
    _write(directory / "tls.crt", cert.public_bytes(pem), 0o644)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + LIFETIME)
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write beside, then rename: readers never see half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _usable(path: Path) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return False
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > RENEW_BEFORE
