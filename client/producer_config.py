"""The producer's settings, checked once (`ProducerConfig.create`), and the small rules
that depend only on them (`parse_acks`, `topic_batch_size`)."""

from __future__ import annotations

from typing import Final

import msgspec

from client.metadata import ClusterView
from client.transport import check_number
from minikafka.record_batch import HEADER_SIZE, Compression

#: Bytes of records per batch (estimated). Each batch is one acks=all round trip of the
#: replication pipeline, so large batches are what carry throughput; 1 MiB plus the
#: batch header stays within the broker's default `max.message.bytes` (1 MiB + 1 KiB).
DEFAULT_BATCH_SIZE: Final = 1 << 20


def parse_acks(acks: int | str) -> int:
    """`all` / -1 / 0 / 1 -> the wire value."""
    if isinstance(acks, str):
        text = acks.strip().lower()
        if text == "all":
            return -1
        try:
            acks = int(text)
        except ValueError:
            raise ValueError(f"acks must be 0, 1, -1 or 'all', got {acks!r}") from None
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
    return acks


def topic_batch_size(batch_size: int, view: ClusterView, topic: str) -> int:
    """`batch_size`, lowered so a full batch fits the largest batch the brokers accept
    for the topic (its `max.message.bytes`, or the broker default they report); record
    sizes are estimated generously, see `estimate_size`."""
    info = view.topics.get(topic)
    if info is None:
        return batch_size
    override = info.configs.get("max.message.bytes")
    limit = int(override) if override is not None and override.isdigit() else 0
    limit = limit or info.max_message_bytes
    if limit <= 0:
        return batch_size
    return max(1, min(batch_size, limit - HEADER_SIZE))


class ProducerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Checked producer settings (kafka-python's names; see `AsyncProducer`)."""

    acks: int
    idempotent: bool
    linger_ms: float
    batch_size: int
    buffer_memory: int
    max_request_size: int
    retries: int | None
    retry_backoff_ms: float
    request_timeout_ms: float
    delivery_timeout_ms: float
    max_block_ms: float
    metadata_max_age_ms: float
    max_in_flight: int
    compression: Compression

    @classmethod
    def create(
        cls,
        *,
        acks: int | str,
        linger_ms: float,
        batch_size: int,
        buffer_memory: int,
        max_request_size: int,
        retries: int | None,
        retry_backoff_ms: float,
        request_timeout_ms: float,
        delivery_timeout_ms: float,
        max_block_ms: float,
        metadata_max_age_ms: float,
        enable_idempotence: bool | None,
        max_in_flight_requests_per_connection: int,
        compression_type: str | None,
    ) -> ProducerConfig:
        """Check every setting; raise `KafkaConfigurationError` / `ValueError` naming
        the first bad one."""
        wire_acks = parse_acks(acks)
        for name, value, minimum in (
            ("linger_ms", linger_ms, 0),
            ("batch_size", batch_size, 1),
            ("buffer_memory", buffer_memory, 1),
            ("max_request_size", max_request_size, 1),
            ("retry_backoff_ms", retry_backoff_ms, 0),
            ("request_timeout_ms", request_timeout_ms, 1),
            ("delivery_timeout_ms", delivery_timeout_ms, 1),
            ("max_block_ms", max_block_ms, 0),
            ("metadata_max_age_ms", metadata_max_age_ms, 0),
        ):
            check_number(name, value, minimum=minimum)
        if retries is not None:
            check_number("retries", retries, minimum=0, integral=True)
        if enable_idempotence is None:
            enable_idempotence = wire_acks == -1
        max_in_flight = max_in_flight_requests_per_connection
        if enable_idempotence and wire_acks != -1:
            raise ValueError("enable_idempotence=True requires acks='all' (-1)")
        if enable_idempotence and not 1 <= max_in_flight <= 5:
            raise ValueError(
                "enable_idempotence=True requires max_in_flight_requests_per_connection <= 5"
            )
        if max_in_flight < 1:
            raise ValueError("max_in_flight_requests_per_connection must be >= 1")
        if batch_size <= 0 or buffer_memory < batch_size:
            raise ValueError("need 0 < batch_size <= buffer_memory")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError(
                "delivery_timeout_ms must be >= linger_ms + request_timeout_ms "
                f"({delivery_timeout_ms} < {linger_ms} + {request_timeout_ms})"
            )
        return cls(
            acks=wire_acks,
            idempotent=bool(enable_idempotence),
            linger_ms=linger_ms,
            batch_size=batch_size,
            buffer_memory=buffer_memory,
            max_request_size=max_request_size,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            max_block_ms=max_block_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            max_in_flight=max_in_flight,
            compression=Compression.parse(compression_type),
        )
