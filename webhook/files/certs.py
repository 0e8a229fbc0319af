"""A private CA and the webhook's serving certificate, with the checks that catch a bad pair.

The API server reaches the webhook through its Service, so the serving certificate must name
every form of the Service's DNS name, and the API server trusts only the CA that
``caBundle`` holds. Nothing here talks to a cluster: ``webhook.cluster.certinstall`` stores
what this module makes.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
DEFAULT_DAYS = 365
# Certificates start a little in the past so a node whose clock runs behind still accepts them.
_BACKDATE = dt.timedelta(minutes=5)

SubjectName = x509.DNSName | x509.IPAddress
_T = TypeVar("_T")


class CertError(Exception):
    """Bad input: a file that is missing or unreadable, or a value that cannot be used."""


@dataclass(frozen=True, slots=True)
class ServingPair:
    """PEM bytes as stored on disk and in the TLS Secret."""

    ca_crt: bytes
    tls_crt: bytes
    tls_key: bytes

    def ca(self) -> x509.Certificate:
        return _load_cert(self.ca_crt, CA_FILE)

    def leaf(self) -> x509.Certificate:
        return _load_cert(self.tls_crt, CERT_FILE)

    def intermediates(self) -> list[x509.Certificate]:
        """The certificates after the leaf in ``tls.crt``: the chain a server sends with its
        leaf (cert-manager writes an intermediate CA's chain so), which clients that trust
        only the root need to verify it."""
        try:
            return x509.load_pem_x509_certificates(self.tls_crt)[1:]
        except ValueError:
            raise CertError(f"{CERT_FILE}: not a PEM certificate chain") from None

    def roots(self) -> list[x509.Certificate]:
        """Every certificate of ``ca.crt`` (a bundle during a CA rotation holds two)."""
        try:
            return x509.load_pem_x509_certificates(self.ca_crt)
        except ValueError:
            raise CertError(f"{CA_FILE}: not a PEM certificate") from None


def service_names(service: str, namespace: str) -> tuple[str, ...]:
    """Every name a client inside the cluster may use for the Service."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def parse_san(value: str) -> SubjectName:
    """An IP address when ``value`` reads as one, else a DNS name."""
    text = value.strip()
    if not text:
        raise CertError("--san: empty value; give a DNS name or an IP address")
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        return x509.DNSName(text)


def generate(
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    days: int = DEFAULT_DAYS,
    now: dt.datetime | None = None,
) -> ServingPair:
    """A fresh CA and a serving certificate signed by it, both ECDSA P-256.

    The CA's key is thrown away: nothing ever signs with it again, so nothing has to guard
    it. Renewal makes a new CA and ``ca_bundle`` keeps the old one trusted meanwhile.
    """
    if days < 1:
        raise CertError(f"--days: {days} is not a positive number of days")
    start = (now or dt.datetime.now(dt.UTC)) - _BACKDATE
    end = start + _BACKDATE + dt.timedelta(days=days)
    names = _unique(
        [*map(x509.DNSName, service_names(service, namespace))] + [parse_san(s) for s in extra_sans]
    )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace} CA")])
    ca = (
        _builder(subject=ca_name, issuer=ca_name, public=ca_key.public_key(), start=start, end=end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")])
    leaf = (
        _builder(subject=leaf_name, issuer=ca_name, public=key.public_key(), start=start, end=end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingPair(
        ca_crt=ca.public_bytes(serialization.Encoding.PEM),
        tls_crt=leaf.public_bytes(serialization.Encoding.PEM),
        tls_key=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def write(pair: ServingPair, directory: Path) -> list[Path]:
    """Write the three files; the key is created 0600 so it is never readable by others.

    Each file is written beside and renamed into place, the key before the certificate, so
    a server that reloads when ``tls.crt`` changes never pairs a new certificate with an
    old key or reads half a file.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data, mode in (
        (CA_FILE, pair.ca_crt, 0o644),
        (KEY_FILE, pair.tls_key, 0o600),
        (CERT_FILE, pair.tls_crt, 0o644),
    ):
        path = directory / name
        temporary = directory / f".{name}.tmp"
        temporary.unlink(missing_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)  # the umask may have taken bits away
        os.replace(temporary, path)
        written.append(path)
    return written


DEV_HOSTS = ("localhost", "127.0.0.1", "::1")
DEV_DAYS = 30


def ensure_dev(directory: Path, *, now: dt.datetime | None = None) -> Path:
    """Throwaway certificates for ``gpu-webhook serve --dev``: a CA and a serving pair for
    localhost, made anew when missing, unreadable, not a valid pair for localhost or within
    a day of expiry. Not for clusters (``certs generate`` and ``certs install`` are)."""
    moment = now or dt.datetime.now(dt.UTC)
    try:
        pair = read(directory)
        # Anything else written over them (another service's pair) is replaced too.
        fresh = (
            not expires_within(pair, dt.timedelta(days=1), moment)
            and not inspect(pair, required=DEV_HOSTS, now=moment).problems
        )
    except (CertError, ValueError):
        fresh = False
    if not fresh:
        pair = generate(
            service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=DEV_DAYS, now=now
        )
        write(pair, directory)
    return directory


def read(directory: Path) -> ServingPair:
    if not directory.is_dir():
        raise CertError(f"{directory}: not a directory; give the --out of 'certs generate'")
    data = {}
    for name in (CA_FILE, CERT_FILE, KEY_FILE):
        try:
            data[name] = (directory / name).read_bytes()
        except OSError as err:
            raise CertError(f"{directory / name}: cannot read ({err.strerror})") from None
    return ServingPair(ca_crt=data[CA_FILE], tls_crt=data[CERT_FILE], tls_key=data[KEY_FILE])


@dataclass(frozen=True, slots=True)
class Report:
    """What ``certs inspect`` shows, and every reason the pair would not serve."""

    ca_subject: str
    subject: str
    sans: tuple[str, ...]
    not_after: dt.datetime
    problems: tuple[str, ...]

    def lines(self) -> list[str]:
        out = [
            f"CA:        {self.ca_subject}",
            f"subject:   {self.subject}",
            f"SANs:      {', '.join(self.sans)}",
            f"expires:   {self.not_after.isoformat()}",
        ]
        out += [f"problem:   {p}" for p in self.problems]
        return out


def inspect(
    pair: ServingPair, *, required: Sequence[str] = (), now: dt.datetime | None = None
) -> Report:
    """Verify the chain for every SAN the certificate names, and for each ``required`` name,
    with the intermediates ``tls.crt`` holds after its leaf, as a TLS client gets them.

    Raises ``CertError`` only when the bytes are not certificates or a key at all.
    """
    when = now or dt.datetime.now(dt.UTC)
    ca, leaf, chain, roots = pair.ca(), pair.leaf(), pair.intermediates(), pair.roots()
    problems = []
    if not _key_matches(pair.tls_key, leaf):
        problems.append(f"{KEY_FILE} does not belong to {CERT_FILE}")
    sans = _sans(leaf)
    if not sans:
        problems.append(f"{CERT_FILE} names no DNS or IP SAN; TLS clients will refuse it")
    for missing in [n for n in required if parse_san(n) not in sans]:
        problems.append(f"SANs lack {missing}")
    for name in sans:
        problem = _verify(roots, leaf, chain, name=name, now=when)
        if problem:
            problems.append(f"{_text(name)}: {problem}")
            break  # the chain fails the same way for every name
    return Report(
        ca_subject=ca.subject.rfc4514_string(),
        subject=leaf.subject.rfc4514_string(),
        sans=tuple(_text(n) for n in sans),
        not_after=leaf.not_valid_after_utc,
        problems=tuple(problems),
    )


def expires_within(pair: ServingPair, window: dt.timedelta, now: dt.datetime) -> bool:
    return min(pair.leaf().not_valid_after_utc, pair.ca().not_valid_after_utc) <= now + window


def ca_bundle(ca_crt: bytes, current: bytes, now: dt.datetime) -> bytes:
    """The CA first, then the CAs of ``current`` that have not expired.

    Keeping the previous CA means pods still serving the old certificate stay trusted while
    they pick up the new one; it drops out when it expires. Unparseable entries are dropped.
    """
    try:
        old = x509.load_pem_x509_certificates(current) if current.strip() else []
    except ValueError:
        old = []
    new = _load_cert(ca_crt, CA_FILE)
    kept = [new] + [c for c in old if c != new and c.not_valid_after_utc > now]
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in _unique(kept))


def trusts(bundle: bytes, ca_crt: bytes) -> bool:
    try:
        return _load_cert(ca_crt, CA_FILE) in x509.load_pem_x509_certificates(bundle)
    except ValueError:
        return False


def _builder(
    *,
    subject: x509.Name,
    issuer: x509.Name,
    public: ec.EllipticCurvePublicKey,
    start: dt.datetime,
    end: dt.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    )


def key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs; a serving leaf signs its handshakes (ECDSA)."""
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _verify(
    roots: list[x509.Certificate],
    leaf: x509.Certificate,
    intermediates: list[x509.Certificate],
    *,
    name: SubjectName,
    now: dt.datetime,
) -> str | None:
    """As a client trusting only ``ca.crt`` would: the intermediates the server sends after
    its leaf (``tls.crt``) may complete the path, as they do in a TLS handshake."""
    verifier = PolicyBuilder().store(Store(roots)).time(now).build_server_verifier(name)
    try:
        verifier.verify(leaf, intermediates)
    except VerificationError as err:
        reason = str(err).split(" (encountered", 1)[0]
        return f"does not verify against {CA_FILE}: {reason}"
    return None


def _key_matches(key_pem: bytes, leaf: x509.Certificate) -> bool:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise CertError(f"{KEY_FILE}: not an unencrypted PEM private key") from None
    return key.public_key() == leaf.public_key()


def _load_cert(data: bytes, name: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise CertError(f"{name}: not a PEM certificate") from None


def _sans(cert: x509.Certificate) -> list[SubjectName]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return [n for n in ext.value if isinstance(n, x509.DNSName | x509.IPAddress)]


def _text(name: SubjectName) -> str:
    return str(name.value)


def _unique(items: Iterable[_T]) -> list[_T]:
    seen: list[_T] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
