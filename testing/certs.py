"""Certificates for a local TLS cluster: a CA, one broker certificate and one client
certificate, made with the `cryptography` package (no openssl process), as PEM files.

    files = ensure_certificates(Path(".epochlog/tls"))
    files.ca, files.broker_keystore, files.client_cert, files.client_key

The broker certificate names 127.0.0.1 and localhost (its subject alternative names) and serves
every broker of the cluster; it is good for both TLS roles, since a broker also dials other
brokers' SSL listener with it. `broker.keystore.pem` holds its private key then the certificate,
the form `ssl.keystore.location` takes with `ssl.keystore.type=PEM` (Kafka's KIP-651). The client
files are librdkafka's `ssl.certificate.location` and `ssl.key.location`; the client's subject
is `CN=client,OU=clients,O=epochlog` (principal `User:CN=client,OU=clients,O=epochlog` under the
DEFAULT mapping rule).

Files already there are kept (a cluster started again on its data dir keeps its CA, so clients'
settings stay good); a set with a file missing is made again whole. Keys are ECDSA P-256: quick to
make and to handshake with, and every client tested here takes them. Certificates last
VALID_DAYS; keys are written readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded when certificates are made, so the harness imports fast
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey as Key

VALID_DAYS = 825  # the longest life clients on macOS accept for a server certificate
CLIENT_SUBJECT = (("CN", "client"), ("OU", "clients"), ("O", "epochlog"))
BROKER_SUBJECT = (("CN", "broker"), ("OU", "brokers"), ("O", "epochlog"))


@dataclass(frozen=True)
class ClusterCertificates:
    ca: Path  # the CA certificate: every side's truststore (ssl.ca.location)
    broker_keystore: Path  # the brokers' key then certificate (ssl.keystore.location)
    client_cert: Path  # ssl.certificate.location
    client_key: Path  # ssl.key.location
    client_dn: str = "CN=client,OU=clients,O=epochlog"  # as RFC 2253 writes it


def certificate_files(folder: Path) -> ClusterCertificates:
    return ClusterCertificates(folder / "ca.pem", folder / "broker.keystore.pem",
                               folder / "client.pem", folder / "client.key")


def ensure_certificates(folder: Path, *, client_subject: tuple[tuple[str, str], ...]
                        = CLIENT_SUBJECT) -> ClusterCertificates:
    """The files under folder, made if any is missing (see the module's notes)."""
    files = certificate_files(folder)
    if all(p.exists() for p in (files.ca, folder / "ca.key", files.broker_keystore,
                                files.client_cert, files.client_key)):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _make_ca()
    _write(folder / "ca.key", _key_pem(ca_key), private=True)
    _write(files.ca, _cert_pem(ca_cert))
    broker_key = _new_key()
    broker_cert = _issue(ca_key, ca_cert, broker_key, BROKER_SUBJECT, server=True)
    _write(files.broker_keystore, _key_pem(broker_key) + _cert_pem(broker_cert), private=True)
    make_client_certificate(folder, ca_key, ca_cert, client_subject, "client")
    return files


def make_client_certificate(folder: Path, ca_key: Key, ca_cert: x509.Certificate,
                            subject: tuple[tuple[str, str], ...], name: str) -> tuple[Path, Path]:
    """<name>.pem and <name>.key under folder, signed by the CA; (cert, key)."""
    key = _new_key()
    cert = _issue(ca_key, ca_cert, key, subject, server=False)
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    _write(cert_path, _cert_pem(cert))
    _write(key_path, _key_pem(key), private=True)
    return cert_path, key_path


def load_ca(folder: Path) -> tuple[Key, x509.Certificate]:
    """(CA key, CA certificate) of a folder ensure_certificates made, to sign more."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey), "ensure_certificates makes EC keys"
    return key, x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())


# ------------------------------------------------------------------------------ the making
def _new_key() -> Key:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(subject: tuple[tuple[str, str], ...]) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME, "L": NameOID.LOCALITY_NAME,
            "ST": NameOID.STATE_OR_PROVINCE_NAME, "C": NameOID.COUNTRY_NAME}
    # RFC 2253 writes the last attribute first: list them in reverse so CN is printed first.
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(subject)])


def _make_ca() -> tuple[Key, x509.Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    key = _new_key()
    name = _name((("CN", "epochlog local CA"), ("O", "epochlog")))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _issue(ca_key: Key, ca_cert: x509.Certificate, key: Key,
           subject: tuple[tuple[str, str], ...], server: bool) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (x509.CertificateBuilder().subject_name(_name(subject))
               .issuer_name(ca_cert.subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _key_pem(key: Key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Written whole to a temp file, then renamed: a reader never sees half a key."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
