"""How the client secures its connections, with aiokafka's option names.

`Producer`, `Consumer` and `Admin` take `security_protocol` ("PLAINTEXT", the default, or
"SSL") and `ssl_context` (an `ssl.SSLContext`). `create_ssl_context(cafile=..., certfile=...,
keyfile=...)` builds one from PEM files, as aiokafka's helper of the same name does: the CA that
signed the brokers' certificates, and for mutual TLS the client's certificate and key.

Where we differ from aiokafka: `security_protocol="SSL"` without an `ssl_context` uses
`create_ssl_context()` (the system's trusted CAs, names checked), as Java's client does with its
default truststore; aiokafka refuses it. SASL_PLAINTEXT and SASL_SSL are refused: SASL is not
built yet. TLS 1.2 is the least version accepted.
"""

from __future__ import annotations

import ssl

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL")
NOT_YET = ("SASL_PLAINTEXT", "SASL_SSL")


def create_ssl_context(*, cafile: str | None = None, capath: str | None = None,
                       cadata: str | bytes | None = None, certfile: str | None = None,
                       keyfile: str | None = None, password: str | None = None,
                       crlfile: str | None = None) -> ssl.SSLContext:
    """An SSLContext for connecting to brokers: their certificate checked (against cafile/
    capath/cadata, else the system's CAs) and their name checked; certfile/keyfile give our
    own certificate for mutual TLS; crlfile adds a revocation list (leaf certificates)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, capath=capath,
                                     cadata=cadata)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if crlfile is not None:
        ctx.load_verify_locations(crlfile)
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if certfile is not None:
        ctx.load_cert_chain(certfile, keyfile, password)
    return ctx


def context_for(security_protocol: str, ssl_context: ssl.SSLContext | None
                ) -> ssl.SSLContext | None:
    """The context connections use: None for PLAINTEXT. ValueError for an unknown protocol or
    a SASL one."""
    protocol = security_protocol.upper()
    if protocol in NOT_YET:
        raise ValueError(f"security_protocol={security_protocol!r}: SASL is not built yet; "
                         f"use PLAINTEXT or SSL")
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security_protocol={security_protocol!r}: expected one of "
                         f"{', '.join(SECURITY_PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        return None
    return ssl_context if ssl_context is not None else create_ssl_context()
