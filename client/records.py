"""The client's public value types and the decoding of fetched batches into records.

`TopicPartition`, `RecordMetadata`, `OffsetAndTimestamp` are named tuples and
`ConsumerRecord` a struct, all with kafka-python's field names; `NewTopic` describes a
topic to create. `decode_fetched` turns the bytes of a fetch response into
`ConsumerRecord`s with one msgspec call per batch, skipping records below the consumer's
position (a fetch returns whole batches).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import count
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec

from minikafka.record_batch import CorruptBatchError, TimestampType, decode_rows, parse_header


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record was written (kafka-python's fields): `offset` is -1 for
    acks=0; `log_start_offset` is the partition's log start when it was written (-1:
    not known); the serialized sizes are -1 for a missing key, value or headers."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int = int(TimestampType.CREATE_TIME)
    log_start_offset: int = -1
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    serialized_header_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetAndTimestamp(NamedTuple):
    """`offsets_for_times` answer: the first offset whose timestamp is at least the one
    asked for, with that record's timestamp (kafka-python's type)."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


class OffsetAndMetadata(NamedTuple):
    """A committed offset (kafka-python's type): the next offset to consume, free-form
    metadata, and the leader epoch of the record before it (-1: not known)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerRecord(msgspec.Struct, frozen=True, gc=False):
    """One consumed record (kafka-python's field names, in kafka-python's order).

    `headers` is a list of `(str, bytes)` pairs, or an empty tuple when the record has
    none. (A frozen, GC-untracked msgspec struct: building one per record is 2-3x
    cheaper than a named tuple, which matters at a million records per second.)
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes]]
    leader_epoch: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class NewTopic(msgspec.Struct, frozen=True):
    """A topic to create with `Admin.create_topics`:
    `NewTopic(name, num_partitions, replication_factor, configs)`."""

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] = msgspec.field(default_factory=dict)


class FetchedBatches(msgspec.Struct, frozen=True, kw_only=True):
    """What a fetch response holds for one partition, decoded down to records."""

    records: list[ConsumerRecord]
    #: Offset after the last batch in the response (the next offset to fetch).
    next_fetch_offset: int
    #: Leader epoch of the last batch in the response (-1 when there was none).
    last_epoch: int
    #: Leader epoch of the last returned record's batch (-1 when no record returned).
    last_record_epoch: int
    #: With `stop_at_corrupt`: the damaged batch decoding stopped at (None: none), the
    #: offset it stopped at (the first record not returned), and the offset after the
    #: damaged batch as its header claims it (-1 when the header itself is damaged).
    corrupt: CorruptBatchError | None = None
    corrupt_offset: int = -1
    corrupt_next_offset: int = -1


#: Applied to non-None keys / values only.
Deserializer = Callable[[bytes], Any]

_NO_HEADERS: tuple[()] = ()
_row_delta = attrgetter("timestamp_delta_ms")


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    *,
    position: int,
    key_deserializer: Deserializer | None = None,
    value_deserializer: Deserializer | None = None,
    stop_at_corrupt: bool = False,
) -> FetchedBatches:
    """Decode every batch of `data`, keeping the records at offsets >= `position`.

    A damaged batch raises `minikafka.record_batch.CorruptBatchError`, or, with
    `stop_at_corrupt`, ends the decoding: the records before it are returned and
    `corrupt` says where and why.
    """
    records: list[ConsumerRecord] = []
    next_fetch_offset = position
    last_epoch = -1
    last_record_epoch = -1
    view = memoryview(data)
    pos = 0
    end = len(view)
    while pos < end:
        claimed_next = -1
        try:
            header = parse_header(view, pos, verify_crc=False)
            claimed_next = header.next_offset
            next_offset = header.next_offset
            if next_offset <= position:
                last_epoch = header.leader_epoch
                next_fetch_offset = max(next_fetch_offset, next_offset)
                pos += header.size
                continue
            header, rows = decode_rows(view[pos : pos + header.size])
        except CorruptBatchError as exc:
            if not stop_at_corrupt:
                raise
            return FetchedBatches(
                records=records,
                next_fetch_offset=next_fetch_offset,
                last_epoch=last_epoch,
                last_record_epoch=last_record_epoch,
                corrupt=exc,
                corrupt_offset=next_fetch_offset,
                corrupt_next_offset=claimed_next,
            )
        pos += header.size
        base = header.base_offset
        epoch = header.leader_epoch
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
            ts_type = int(TimestampType.LOG_APPEND_TIME)
            fixed_ts: int | None = header.max_timestamp_ms
        else:
            ts_type = int(TimestampType.CREATE_TIME)
            fixed_ts = None
        first_ts = header.first_timestamp_ms
        skip = max(0, position - base)
        if skip:
            rows = rows[skip:]
        if key_deserializer is None and value_deserializer is None and fixed_ts is None:
            # The common case, one comprehension per batch (a million records a second).
            # Records with the same timestamp share one int object: a batch holds a few
            # distinct timestamps, and an int fewer per record is an allocation fewer now
            # and a cold object fewer to free when the application drops the records.
            timestamps = {delta: first_ts + delta for delta in set(map(_row_delta, rows))}
            decoded = [
                ConsumerRecord(
                    topic,
                    partition,
                    off,
                    timestamps[row.timestamp_delta_ms],
                    ts_type,
                    row.key,
                    row.value,
                    row.headers or _NO_HEADERS,
                    epoch,
                )
                for off, row in zip(range(base + skip, base + skip + len(rows)), rows, strict=True)
            ]
            if records:
                records.extend(decoded)
            else:
                records = decoded
        else:
            for off, row in zip(count(base + skip), rows):
                key, value, hdrs = row.key, row.value, row.headers
                if key_deserializer is not None and key is not None:
                    key = key_deserializer(key)
                if value_deserializer is not None and value is not None:
                    value = value_deserializer(value)
                ts = fixed_ts if fixed_ts is not None else first_ts + row.timestamp_delta_ms
                records.append(
                    ConsumerRecord(
                        topic, partition, off, ts, ts_type, key, value, hdrs or _NO_HEADERS, epoch
                    )
                )
        last_epoch = epoch
        last_record_epoch = epoch
        next_fetch_offset = max(next_fetch_offset, next_offset)
    return FetchedBatches(
        records=records,
        next_fetch_offset=next_fetch_offset,
        last_epoch=last_epoch,
        last_record_epoch=last_record_epoch,
    )


def scan_fetched(data: bytes, fetch_offset: int) -> tuple[int, int, CorruptBatchError | None]:
    """Walk the batch headers of fetched bytes (no record decoding, no body CRC): the
    offset after the last readable batch, its leader epoch, and the error of the first
    batch whose header is damaged (None: every header is sound)."""
    next_offset = fetch_offset
    last_epoch = -1
    pos = 0
    end = len(data)
    while pos < end:
        try:
            header = parse_header(data, pos, verify_crc=False)
        except CorruptBatchError as exc:
            return next_offset, last_epoch, exc
        next_offset = max(next_offset, header.next_offset)
        last_epoch = header.leader_epoch
        pos += header.size
    return next_offset, last_epoch, None
