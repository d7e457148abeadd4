"""Helpers shared by the storage engine tests: batches, logs, and full-log snapshots."""

from __future__ import annotations

from pathlib import Path

from broker.log.config import LogConfig
from broker.log.partition_log import PartitionLog
from minikafka.record_batch import BatchHeader, build_batch, iter_batches

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, retention_ms=-1)


def batch(
    records: int = 1, *, value_bytes: int = 10, timestamp_ms: int = 1_000, tag: int = 0
) -> bytes:
    """An unstamped batch of `records` records (values tagged so batches differ)."""
    value = (f"{tag}:".encode() + b"x" * value_bytes)[: max(value_bytes, 1)]
    return build_batch([(timestamp_ms + i, b"k", value, None) for i in range(records)])


def open_log(
    directory: Path,
    config: LogConfig = SMALL,
    *,
    clean: bool = True,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    high_watermark: int = 0,
    now_ms: int = 0,
) -> PartitionLog:
    return PartitionLog.open(
        directory,
        config,
        topic="orders",
        partition=0,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
        clean_shutdown=clean,
        now_ms=now_ms,
    )


def fill(
    log: PartitionLog, batches: int, *, records: int = 2, epoch: int = 0, now_ms: int = 0
) -> None:
    for i in range(batches):
        log.append_as_leader(
            batch(records, tag=i, timestamp_ms=now_ms + i), leader_epoch=epoch, now_ms=now_ms
        )


def read_all(log: PartitionLog) -> list[tuple[int, BatchHeader, bytes]]:
    """Every batch from the log start to the LEO as (position in result, header, bytes)."""
    out: list[tuple[int, BatchHeader, bytes]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, max_bytes=1 << 20)
        assert result.records, f"empty read at {offset} below LEO {log.log_end_offset}"
        for pos, header in iter_batches(result.records):
            out.append((pos, header, result.records[pos : pos + header.size]))
        assert result.next_offset > offset
        offset = result.next_offset
    return out


def batch_bytes(log: PartitionLog) -> list[bytes]:
    return [raw for _, _, raw in read_all(log)]
