"""Keeps the replay of a `__consumer_offsets` partition bounded (shell): the append gate,
reading a partition's records, and the compaction that snapshots its live keys.

Every append of the coordinator to one partition passes its `AppendGate`. A compaction
closes the gate (new appends wait), waits for the appends in flight, replays the
partition from its log start to its log end *from the log itself* (so a record whose
append failed but may still commit is kept), appends the `offsets.snapshot` of that
state with acks=all, and once the snapshot is committed moves the log start offset to
its first record (followers adopt it from their fetches; retention deletes the segments
below it). A failed snapshot changes nothing: the log still replays to the same state,
with the snapshot's records (if some landed) repeating the values before them. A log
truncation only removes a suffix, so a snapshot that survives has everything it covered
before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from broker.group.offsets import OFFSETS_TOPIC, replay, replay_groups, snapshot
from broker.replica.manager import ProduceItem, ReplicaManager
from broker.replica.partition import Partition
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch, decode_records, iter_batches

logger = logging.getLogger(__name__)

#: Bytes read from the log per step of a load or compaction (the task yields between).
READ_BYTES = 1 << 20
#: Upper bound on the keys + values of one snapshot batch (below message.max.bytes).
SNAPSHOT_BATCH_BYTES = 512 * 1024


class AppendGate:
    """Appends run concurrently while the gate is open; `closed()` waits for the ones in
    flight and keeps new ones waiting until it exits."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._in_flight = 0

    @contextlib.asynccontextmanager
    async def append(self) -> AsyncIterator[None]:
        while not self._open.is_set():  # checked again after each wake-up
            await self._open.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        self._open.clear()
        try:
            while self._in_flight:
                await self._idle.wait()
            yield
        finally:
            self._open.set()


async def read_pairs(
    partition: Partition, start: int, end: int
) -> list[tuple[bytes | None, bytes | None]]:
    """The (key, value) of every record of `partition` in [start, end), in log order."""
    log = partition.log
    offset = start
    pairs: list[tuple[bytes | None, bytes | None]] = []
    while offset < end:
        chunk = log.read(offset, max_bytes=READ_BYTES, max_offset=end).records
        if not chunk:
            break
        for position, header in iter_batches(chunk):
            _, rows = decode_records(chunk[position : position + header.size])
            pairs.extend((key, value) for _, key, value, _ in rows)
            offset = header.next_offset
        await asyncio.sleep(0)  # let other requests run between steps
    return pairs


def _batches(pairs: list[tuple[bytes, bytes | None]]) -> list[list[tuple[bytes, bytes | None]]]:
    out: list[list[tuple[bytes, bytes | None]]] = [[]]
    size = 0
    for key, value in pairs:
        length = len(key) + len(value or b"")
        if out[-1] and size + length > SNAPSHOT_BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append((key, value))
        size += length
    return [batch for batch in out if batch]


async def compact(
    *,
    replicas: ReplicaManager,
    partition: Partition,
    index: int,
    leader_epoch: int,
    gate: AppendGate,
    timeout_ms: int,
    now_ms: int,
) -> int | None:
    """Snapshot the partition and move its log start to the snapshot (see the module
    docstring); returns the new log start offset, or None when nothing moved."""
    async with gate.closed():
        log = partition.log
        start, end = log.log_start_offset, log.log_end_offset
        pairs = await read_pairs(partition, start, end)
        records = snapshot(replay({}, pairs), replay_groups({}, pairs))
        first = end
        for n, batch in enumerate(_batches(records)):
            [result] = await replicas.produce(
                acks=-1,
                timeout_ms=timeout_ms,
                items=[
                    ProduceItem(
                        topic=OFFSETS_TOPIC,
                        partition=index,
                        records=build_batch([(now_ms, k, v, None) for k, v in batch]),
                        current_leader_epoch=leader_epoch,
                    )
                ],
            )
            if result.error_code is not ErrorCode.NONE:
                logger.warning(
                    "%s-%d: compaction stopped: %s", OFFSETS_TOPIC, index, result.error_message
                )
                return None
            if n == 0:
                first = result.base_offset
        if partition.leader_epoch != leader_epoch or log.high_watermark < first:
            return None
        log.maybe_increment_log_start_offset(first)
        logger.info(
            "%s-%d: compacted %d records into %d (log start %d -> %d)",
            OFFSETS_TOPIC,
            index,
            end - start,
            len(records),
            start,
            first,
        )
        return first
