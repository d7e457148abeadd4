"""Parse and validate the Spark sink's options (names mirror Spark's Kafka sink).

`df.write.format("minikafka")` / `df.writeStream.format("minikafka")` take
`kafka.bootstrap.servers` (alias `bootstrap.servers`), an optional `topic` (which
overrides the `topic` column, as in Spark) and `kafka.<producer setting>` options in
Kafka's dotted names, handed to the task's `Producer` under their Python names, TLS
(`kafka.security.protocol=SSL`, `kafka.ssl.cafile|certfile|keyfile`) included. Pure:
no I/O, no pyspark; `parse_sink_options` raises `SinkOptionError` naming the option and
the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from client.spark.errors import SinkOptionError, SourceOptionError
from client.spark.options import TLS_OPTIONS, parse_bootstrap, parse_tls


def _int(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise SinkOptionError(f"{name} must be an integer, got {raw!r}") from None


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise SinkOptionError(f"{name} must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _text(name: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise SinkOptionError(f"{name} must not be empty")
    return value


def _compression(name: str, raw: str) -> str | None:
    value = raw.strip().lower()
    return None if value in ("", "none") else value


#: `kafka.<name>` sink options -> (Producer keyword, converter). Kafka's dotted names,
#: as Spark's Kafka sink passes them to its producer.
PRODUCER_OPTIONS: Final[Mapping[str, tuple[str, Callable[[str, str], Any]]]] = {
    "acks": ("acks", _text),
    "linger.ms": ("linger_ms", _int),
    "batch.size": ("batch_size", _int),
    "buffer.memory": ("buffer_memory", _int),
    "max.request.size": ("max_request_size", _int),
    "retries": ("retries", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "max.block.ms": ("max_block_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "enable.idempotence": ("enable_idempotence", _bool),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int),
    "compression.type": ("compression_type", _compression),
    "client.id": ("client_id", _text),
}

#: Producer settings of the sink unless a `kafka.*` option says otherwise: acks=all
#: makes each task's producer idempotent (its retries write no duplicates).
DEFAULT_PRODUCER_CONFIG: Final[Mapping[str, Any]] = {"acks": "all", "client_id": "minikafka-spark"}

#: Options Spark itself adds to a write's options; they mean nothing to the sink.
_SPARK_OWN: Final = frozenset({"path", "checkpointlocation"})


def valid_option_names() -> str:
    """The sink's options, for error messages."""
    return "kafka.bootstrap.servers (alias bootstrap.servers), topic, " + ", ".join(
        [*(f"kafka.{name}" for name in PRODUCER_OPTIONS), *TLS_OPTIONS]
    )


def _bootstrap(value: str) -> tuple[str, ...]:
    try:
        return parse_bootstrap(value)
    except SourceOptionError as exc:
        raise SinkOptionError(str(exc)) from None


class SinkOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Validated options of one minikafka sink."""

    bootstrap_servers: tuple[str, ...]
    #: The `topic` option: every row goes there, whatever its `topic` column says.
    topic: str | None = None
    #: Keyword arguments of the task's `Producer` (defaults included).
    producer_config: dict[str, Any]


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Validate the options of `df.write(Stream).format("minikafka")`."""
    options = {str(k).lower(): str(v) for k, v in raw.items()}
    config: dict[str, Any] = dict(DEFAULT_PRODUCER_CONFIG)
    for name in sorted(options):
        if name in _SPARK_OWN or name in ("topic", "kafka.bootstrap.servers", "bootstrap.servers"):
            continue
        if name in TLS_OPTIONS:
            continue
        setting = (
            PRODUCER_OPTIONS.get(name.removeprefix("kafka.")) if name[:6] == "kafka." else None
        )
        if setting is None:
            raise SinkOptionError(
                f"unknown option {name!r} for the minikafka sink; supported: "
                + valid_option_names()
            )
        keyword, convert = setting
        config[keyword] = convert(name, options[name])

    try:
        tls = parse_tls(options)
    except SourceOptionError as exc:
        raise SinkOptionError(str(exc)) from None
    if tls is not None:  # the files are read where the producer is built: on the executor
        config.update(
            security_protocol="SSL",
            ssl_cafile=tls.ssl_cafile,
            ssl_certfile=tls.ssl_certfile,
            ssl_keyfile=tls.ssl_keyfile,
        )

    servers = options.get("kafka.bootstrap.servers") or options.get("bootstrap.servers")
    if not servers:
        raise SinkOptionError(
            "option kafka.bootstrap.servers (or bootstrap.servers) is required, "
            "e.g. '127.0.0.1:9092'"
        )
    bootstrap = _bootstrap(servers)
    if (
        "kafka.bootstrap.servers" in options
        and "bootstrap.servers" in options
        and _bootstrap(options["bootstrap.servers"]) != bootstrap
    ):
        raise SinkOptionError(
            "kafka.bootstrap.servers and bootstrap.servers are both set and differ; give one"
        )
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise SinkOptionError("option topic must not be empty")
    return SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic.strip() if topic is not None else None,
        producer_config=config,
    )
