"""The consumer's settings, checked once (`ConsumerConfig.create`), and the checks of
its call arguments (topic names, partitions, poll limits) with clear errors."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

from client.errors import KafkaConfigurationError
from client.offset_rules import OffsetReset
from client.records import TopicPartition
from client.transport import check_number, check_topic_name

IsolationLevel = Literal["read_uncommitted", "read_committed"]
#: What `seek_to_beginning` / `seek_to_end` take: partitions, or lists of them.
PartitionArg = TopicPartition | Iterable[TopicPartition]


class ConsumerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Checked consumer settings (kafka-python's names; see `AsyncConsumer`)."""

    auto_offset_reset: OffsetReset
    reset_on_truncation: bool
    fetch_max_wait_ms: float
    fetch_min_bytes: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    client_rack: str | None
    request_timeout_ms: float
    retry_backoff_ms: float
    metadata_max_age_ms: float
    consumer_timeout_ms: float
    isolation_level: IsolationLevel

    @classmethod
    def create(
        cls,
        *,
        auto_offset_reset: OffsetReset,
        reset_on_truncation: bool,
        fetch_max_wait_ms: float,
        fetch_min_bytes: int,
        fetch_max_bytes: int,
        max_partition_fetch_bytes: int,
        max_poll_records: int,
        client_rack: str | None,
        request_timeout_ms: float,
        retry_backoff_ms: float,
        metadata_max_age_ms: float,
        consumer_timeout_ms: float,
        isolation_level: str,
    ) -> ConsumerConfig:
        """Check every setting; raise `KafkaConfigurationError` naming the first bad one."""
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise KafkaConfigurationError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', "
                f"got {auto_offset_reset!r}"
            )
        check_number("max_poll_records", max_poll_records, minimum=1, integral=True)
        check_number("fetch_max_wait_ms", fetch_max_wait_ms, minimum=0)
        check_number("fetch_min_bytes", fetch_min_bytes, minimum=0, integral=True)
        check_number("fetch_max_bytes", fetch_max_bytes, minimum=1, integral=True)
        check_number(
            "max_partition_fetch_bytes", max_partition_fetch_bytes, minimum=1, integral=True
        )
        check_number("request_timeout_ms", request_timeout_ms, minimum=1)
        check_number("retry_backoff_ms", retry_backoff_ms, minimum=0)
        check_number("metadata_max_age_ms", metadata_max_age_ms, minimum=0)
        check_number("consumer_timeout_ms", consumer_timeout_ms, minimum=0)
        if request_timeout_ms <= fetch_max_wait_ms:
            raise KafkaConfigurationError(
                f"request_timeout_ms ({request_timeout_ms}) must be larger than "
                f"fetch_max_wait_ms ({fetch_max_wait_ms})"
            )
        if client_rack is not None and not isinstance(client_rack, str):
            raise KafkaConfigurationError(f"client_rack must be a str, got {client_rack!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise KafkaConfigurationError(
                "isolation_level must be 'read_uncommitted' or 'read_committed', got "
                f"{isolation_level!r}"
            )
        return cls(
            auto_offset_reset=auto_offset_reset,
            reset_on_truncation=reset_on_truncation,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records,
            client_rack=client_rack or None,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            consumer_timeout_ms=consumer_timeout_ms,
            isolation_level=isolation_level,  # type: ignore[arg-type]
        )


def topic_names(topics: Iterable[object], what: str) -> list[str]:
    """Topic names from `topics`; a list (or other non-str iterable) among them is
    flattened, so `Consumer(["a", "b"])` means `Consumer("a", "b")`."""
    names: list[str] = []
    for item in topics:
        if isinstance(item, str):
            names.append(check_topic_name(item))
        elif isinstance(item, Iterable):
            names.extend(check_topic_name(t) for t in item)
        else:
            raise TypeError(f"{what}: topics must be str, got {type(item).__name__} {item!r}")
    return names


def topic_partition(item: object, what: str) -> TopicPartition:
    """`item` as a `TopicPartition`; a plain `(topic, partition)` tuple is accepted."""
    if isinstance(item, tuple) and len(item) == 2:
        topic, partition = item
        if isinstance(partition, int) and not isinstance(partition, bool) and partition >= 0:
            return TopicPartition(check_topic_name(topic), partition)
        raise TypeError(f"{what}: the partition of {item!r} must be an int >= 0, got {partition!r}")
    raise TypeError(
        f"{what} takes TopicPartition(topic, partition) values, got {type(item).__name__} {item!r}"
    )


def partition_args(partitions: Sequence[object], what: str) -> list[TopicPartition]:
    """`*partitions` arguments as TopicPartitions; a list of them is accepted too
    (`seek_to_end([tp1, tp2])` as well as `seek_to_end(tp1, tp2)`)."""
    result: list[TopicPartition] = []
    for item in partitions:
        if isinstance(item, str) or (isinstance(item, tuple) and item and isinstance(item[0], str)):
            result.append(topic_partition(item, what))
        elif isinstance(item, Iterable):
            result.extend(topic_partition(tp, what) for tp in item)
        else:
            result.append(topic_partition(item, what))
    return result


def check_poll_args(timeout_ms: object, max_records: object) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int | float):
        raise TypeError(f"timeout_ms must be a number of milliseconds, got {timeout_ms!r}")
    if not timeout_ms >= 0:
        raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
    if max_records is not None and (
        isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
    ):
        raise ValueError(f"max_records must be a positive int (or None), got {max_records!r}")


def check_timestamps(timestamps: object) -> dict[TopicPartition, int]:
    """`offsets_for_times` argument: {TopicPartition: timestamp in ms >= 0}."""
    if not isinstance(timestamps, dict):
        raise TypeError(
            "offsets_for_times() takes {TopicPartition: timestamp_ms}, got "
            f"{type(timestamps).__name__}"
        )
    checked: dict[TopicPartition, int] = {}
    for tp, timestamp in timestamps.items():
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
            raise ValueError(
                f"offsets_for_times(): the timestamp of {tp!r} must be an int >= 0 "
                f"(milliseconds since the epoch), got {timestamp!r}"
            )
        checked[topic_partition(tp, "offsets_for_times()")] = timestamp
    return checked
