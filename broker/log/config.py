"""Per-partition storage settings (Kafka's topic-level `segment.*`, `retention.*`, `flush.*`)."""

from __future__ import annotations

import msgspec


class LogConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Storage settings of one partition log; `-1` means "no limit" where noted."""

    #: Roll to a new segment before an append would make the active one larger than this.
    segment_bytes: int = 64 * 1024 * 1024
    #: Roll when the active segment is this old (its first batch's timestamp or creation time).
    segment_ms: int = 7 * 24 * 3600 * 1000
    #: One sparse index entry every this many bytes of log.
    index_interval_bytes: int = 4096
    #: Delete closed segments whose newest timestamp is older than this (-1 = keep forever).
    retention_ms: int = 7 * 24 * 3600 * 1000
    #: Delete the oldest closed segments while the partition is larger than this (-1 = no limit).
    retention_bytes: int = -1
    #: Largest accepted batch in a leader append.
    max_message_bytes: int = 1024 * 1024 + 1024
    #: fsync after this many appended messages (-1 = never, rely on replication).
    flush_messages: int = -1
    #: fsync when the oldest unflushed append is this old (-1 = never).
    flush_ms: int = -1
    #: `flush.policy=fsync`: every append is fsynced before it returns.
    fsync_on_append: bool = False
    #: `message.timestamp.before.max.ms`: refuse CreateTime batches older than this.
    timestamp_before_max_ms: int = 2**63 - 1
    #: `message.timestamp.after.max.ms`: refuse CreateTime batches further in the future.
    timestamp_after_max_ms: int = 3600 * 1000
