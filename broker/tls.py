"""TLS for the broker: the server context of its SSL listeners, the client context it dials
other brokers with when the inter-broker listener is SSL, and a connection's principal.

Settings, in Kafka's broker names (KIP-651's PEM form): `ssl.keystore.type=PEM` with
`ssl.keystore.location` (one PEM file: the private key and the certificate chain, the broker's
own certificate first), `ssl.key.password` (if the key is encrypted), `ssl.truststore.type=PEM`
with `ssl.truststore.location` (the CA certificates trusted for peers), `ssl.client.auth`
(none | requested | required), `ssl.endpoint.identification.algorithm` (https: a broker dialing
another checks its certificate's name; empty: no check) and `ssl.principal.mapping.rules`
(principal.py). Only PEM: JKS and PKCS12 are Java's stores, and Python's ssl module reads PEM.

TLS 1.2 is the least version either side accepts. A handshake is bounded by
`ssl_handshake_timeout_ms` (asyncio's `ssl_handshake_timeout`): a peer that never finishes it
holds a socket that long, no longer. A peer speaking plaintext to a TLS port, or TLS to a
plaintext one, fails the handshake or sends a frame of absurd size: either way that connection
closes and nothing else notices.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any

from .principal import ANONYMOUS, NoMatchingRule, Rule, map_dn, user

log = logging.getLogger("epochlog.tls")

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class TlsFiles:
    keystore: str  # PEM: private key and certificate chain
    truststore: str  # PEM: trusted CA certificates ("" : the system's)
    key_password: str = ""
    client_auth: str = "none"
    check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https


class TlsSettingsError(Exception):
    """A TLS file that cannot be read or used; the message names the setting (never the
    password)."""


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """For the SSL listeners. TlsSettingsError when a file is missing or wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _keystore(ctx, files)
    ctx.verify_mode = CLIENT_AUTH[files.client_auth]
    if files.client_auth != "none":
        _trust(ctx, files.truststore, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """For dialing other brokers' SSL inter-broker listener: our certificate as the client's
    (their ssl.client.auth may require one), their certificate checked against the truststore."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = files.check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    _trust(ctx, files.truststore, ssl.Purpose.SERVER_AUTH)
    _keystore(ctx, files)
    return ctx


def _keystore(ctx: ssl.SSLContext, files: TlsFiles) -> None:
    try:
        ctx.load_cert_chain(files.keystore, password=files.key_password or None)
    except (OSError, ssl.SSLError) as exc:  # ssl.SSLError is an OSError; said apart for mypy
        raise TlsSettingsError(f"ssl_keystore_location {files.keystore}: cannot load the key "
                               f"and certificate chain (PEM; with ssl_key_password if the key "
                               f"is encrypted): {exc}") from None


def _trust(ctx: ssl.SSLContext, truststore: str, purpose: ssl.Purpose) -> None:
    if truststore:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSettingsError(f"ssl_truststore_location {truststore}: cannot load CA "
                                   f"certificates (PEM): {exc}") from None
    else:
        ctx.load_default_certs(purpose)


def subject_dn(der: bytes) -> str:
    """A certificate's subject as RFC 2253 writes it (CN first), as Java's getName() does."""
    from cryptography import x509  # loaded on the first client certificate only

    dn: str = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return dn


def principal_of(transport: Any, rules: tuple[Rule, ...]) -> str:
    """The principal of a TLS connection once its handshake is done: `User:` and the mapped
    subject DN of the client's certificate, or User:ANONYMOUS without one. NoMatchingRule when
    no mapping rule applies (the caller closes the connection)."""
    ssl_object = transport.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return ANONYMOUS
    return user(map_dn(rules, subject_dn(der)))


__all__ = ["ANONYMOUS", "NoMatchingRule", "TlsFiles", "TlsSettingsError", "client_context",
           "principal_of", "server_context", "subject_dn"]
