"""The client's transport security: kafka-python's `security_protocol` and `ssl_*`
settings, checked once, as the TLS material every channel is opened with.

`security_protocol="PLAINTEXT"` (the default) opens plaintext channels; `"SSL"` opens TLS
channels that verify the broker's certificate against `ssl_cafile` (the system's trusted
roots without one) and present `ssl_certfile` / `ssl_keyfile` when given (needed on a
broker's mutual-TLS listener). SASL is not supported.
"""

from __future__ import annotations

from client.errors import KafkaConfigurationError
from minikafka.config import ConfigError
from minikafka.tls import TlsMaterial, load_client_tls

PROTOCOLS = ("PLAINTEXT", "SSL")


def client_tls(
    *,
    security_protocol: str,
    ssl_cafile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    ssl_check_hostname: bool,
) -> TlsMaterial | None:
    """The TLS material of these settings (None: plaintext); `KafkaConfigurationError`
    naming the setting when they are invalid or a file cannot be read."""
    if security_protocol not in PROTOCOLS:
        raise KafkaConfigurationError(
            f"security_protocol must be 'PLAINTEXT' or 'SSL', got {security_protocol!r}"
            + (" (SASL is not supported)" if str(security_protocol).startswith("SASL") else "")
        )
    given = [
        name
        for name, value in (
            ("ssl_cafile", ssl_cafile),
            ("ssl_certfile", ssl_certfile),
            ("ssl_keyfile", ssl_keyfile),
        )
        if value is not None
    ]
    if security_protocol == "PLAINTEXT":
        if given:
            raise KafkaConfigurationError(
                f"{', '.join(given)} given but security_protocol is 'PLAINTEXT'; "
                "set security_protocol='SSL' to use TLS"
            )
        return None
    if ssl_check_hostname is not True:
        raise KafkaConfigurationError(
            "ssl_check_hostname=False is not supported: gRPC always checks the broker's "
            "certificate names its address (give brokers certificates with their host names)"
        )
    try:
        return load_client_tls(ssl_cafile, ssl_certfile, ssl_keyfile)
    except ConfigError as exc:
        raise KafkaConfigurationError(str(exc)) from None
