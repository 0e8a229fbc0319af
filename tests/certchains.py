"""Certificates the way other issuers make them, for the tests of what the webhook accepts:
a root, intermediates under it, serving leaves with any validity window, all ECDSA P-256.
``webhook.files.certs.generate`` throws its CA key away, so it cannot sign a second leaf
under the same CA; these keep it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.files.certs import DEV_HOSTS, ServingPair, key_usage, parse_san

DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _builder(
    subject: str,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    start: dt.datetime,
    end: dt.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def authority(name: str, *, parent: Authority | None = None, days: int = 3650) -> Authority:
    """A root CA, or an intermediate signed by ``parent``."""
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    issuer = parent.cert.subject if parent else _name(name)
    builder = (
        _builder(name, issuer, key, now - DAY, now + days * DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(key_usage(ca=True), critical=True)
    )
    if parent is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key()),
            critical=False,
        )
    return Authority(builder.sign(parent.key if parent else key, hashes.SHA256()), key)


def serving_pair(
    root: Authority,
    *,
    chain: tuple[Authority, ...] = (),
    valid_from: dt.timedelta = -DAY,
    valid_until: dt.timedelta = 30 * DAY,
    hosts: tuple[str, ...] = DEV_HOSTS,
) -> ServingPair:
    """A leaf for ``hosts`` signed by the last of ``chain`` (or ``root``), valid from
    ``valid_from`` to ``valid_until`` around now; ``tls.crt`` holds the leaf and then
    ``chain`` from the leaf's issuer up, ``ca.crt`` the root."""
    now = dt.datetime.now(dt.UTC)
    issuer = chain[-1] if chain else root
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        _builder(
            "gpu-webhook.dev.svc", issuer.cert.subject, key, now + valid_from, now + valid_until
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([parse_san(h) for h in hosts]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
            critical=False,
        )
        .sign(issuer.key, hashes.SHA256())
    )
    tls_crt = leaf.public_bytes(serialization.Encoding.PEM)
    tls_crt += b"".join(ca.pem() for ca in reversed(chain))
    tls_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ServingPair(ca_crt=root.pem(), tls_crt=tls_crt, tls_key=tls_key)
