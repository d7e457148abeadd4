"""TLS for every listener and channel: the one home of how certificates become gRPC
credentials.

A process is given `--tls-cert`, `--tls-key` and `--tls-ca` (PEM files), all three or none.
With them:

- its internal listener (the broker's `--listen`, the controller's `--listen`) requires a
  client certificate signed by the CA (mutual TLS): broker<->broker, broker<->controller and
  controller<->controller traffic, and clients of that listener, are authenticated;
- the broker's external listener serves TLS without asking for a client certificate (its
  clients are `User:ANONYMOUS`);
- every channel it opens (to the controller, to a partition leader, to a broker, to another
  controller) verifies the peer against the CA and presents the process's own certificate.

Without them everything is plaintext, exactly as before (`bind` and `open_channel` then
call the insecure gRPC functions).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc
import msgspec

from minikafka.config import ConfigError

_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_PEM_KEY_MARKER = b"PRIVATE KEY-----"


class TlsMaterial(msgspec.Struct, frozen=True, kw_only=True):
    """A certificate chain, its private key and the CA to trust (PEM bytes). A server
    has all three (`load_tls`); a client may lack its own certificate (then it cannot use
    a mutual-TLS listener) or the CA (then the system's trusted roots are used)."""

    cert_pem: bytes | None
    key_pem: bytes | None
    ca_pem: bytes | None


def _read(path: str, flag: str, marker: bytes, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    if marker not in data:
        raise ConfigError(f"{flag} {path}: not a PEM {what}")
    return data


def _read_optional(path: str | None, flag: str, marker: bytes, what: str) -> bytes | None:
    return None if path is None else _read(path, flag, marker, what)


def load_tls(
    cert: str | None, key: str | None, ca: str | None, *, prefix: str = "--tls"
) -> TlsMaterial | None:
    """The TLS material of `--tls-cert/--tls-key/--tls-ca` (None when none is given);
    ConfigError when only some are given or a file is unreadable or not PEM."""
    given = {"cert": cert, "key": key, "ca": ca}
    if all(value is None for value in given.values()):
        return None
    missing = [f"{prefix}-{name}" for name, value in given.items() if value is None]
    if missing:
        raise ConfigError(
            f"TLS needs {prefix}-cert, {prefix}-key and {prefix}-ca together; "
            f"missing {', '.join(missing)}"
        )
    assert cert is not None
    assert key is not None
    assert ca is not None
    return TlsMaterial(
        cert_pem=_read(cert, f"{prefix}-cert", _PEM_CERTIFICATE, "certificate"),
        key_pem=_read(key, f"{prefix}-key", _PEM_KEY_MARKER, "private key"),
        ca_pem=_read(ca, f"{prefix}-ca", _PEM_CERTIFICATE, "CA certificate"),
    )


def load_client_tls(cafile: str | None, certfile: str | None, keyfile: str | None) -> TlsMaterial:
    """A client's TLS material (kafka-python's `ssl_cafile`, `ssl_certfile`, `ssl_keyfile`):
    each optional, but a certificate and its key go together. ConfigError otherwise."""
    if (certfile is None) != (keyfile is None):
        raise ConfigError("ssl_certfile and ssl_keyfile go together: give both or neither")
    return TlsMaterial(
        cert_pem=_read_optional(certfile, "ssl_certfile", _PEM_CERTIFICATE, "certificate"),
        key_pem=_read_optional(keyfile, "ssl_keyfile", _PEM_KEY_MARKER, "private key"),
        ca_pem=_read_optional(cafile, "ssl_cafile", _PEM_CERTIFICATE, "CA certificate"),
    )


def server_credentials(tls: TlsMaterial, *, require_client_cert: bool) -> grpc.ServerCredentials:
    """Server credentials; `require_client_cert` makes the listener mutual TLS (a peer
    without a certificate signed by the CA cannot connect)."""
    assert tls.key_pem is not None, "a server needs its key"
    assert tls.cert_pem is not None, "a server needs its certificate"
    return grpc.ssl_server_credentials(
        [(tls.key_pem, tls.cert_pem)],
        root_certificates=tls.ca_pem if require_client_cert else None,
        require_client_auth=require_client_cert,
    )


def channel_credentials(tls: TlsMaterial) -> grpc.ChannelCredentials:
    """Channel credentials: verify the server against the CA (the system's roots without
    one), present our certificate when we have one."""
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
    )


def bind(
    server: grpc.aio.Server, address: str, tls: TlsMaterial | None, *, require_client_cert: bool
) -> int:
    """`server.add_secure_port` with `server_credentials`, or `add_insecure_port` without
    TLS; returns the bound port (0 or RuntimeError from gRPC when the bind failed)."""
    if tls is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(
        address, server_credentials(tls, require_client_cert=require_client_cert)
    )


def open_channel(
    address: str, options: Sequence[tuple[str, int]], tls: TlsMaterial | None
) -> grpc.aio.Channel:
    """A `grpc.aio` channel to `address`: secure with `channel_credentials` under TLS,
    insecure without."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, channel_credentials(tls), options=options)


def open_sync_channel(
    address: str, options: Sequence[tuple[str, int]], tls: TlsMaterial | None
) -> grpc.Channel:
    """As `open_channel`, for the blocking gRPC API (CLI tools, the Spark reader)."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, channel_credentials(tls), options=options)
