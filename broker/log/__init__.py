"""Storage engine: partition logs made of segments, indexes, epoch cache, checkpoints.

Synchronous file I/O only; the async broker layer calls it inline or via a thread.
"""

from broker.log.config import LogConfig
from broker.log.epoch_cache import EpochEntry, LeaderEpochCache
from broker.log.errors import (
    CorruptRecordError,
    DataDirLockedError,
    InconsistentOffsetError,
    InvalidRecordError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from broker.log.manager import LogManager
from broker.log.partition_log import AppendInfo, PartitionLog, ReadResult

__all__ = [
    "AppendInfo",
    "CorruptRecordError",
    "DataDirLockedError",
    "EpochEntry",
    "InconsistentOffsetError",
    "InvalidRecordError",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "LogStorageError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ReadResult",
    "RecordTooLargeError",
]
