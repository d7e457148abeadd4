"""Keeps the replay of a `__consumer_offsets` partition bounded (shell): the appends of
the coordinator to a partition, reading a partition's records, and the compaction that
snapshots its live keys.

Every append of the coordinator to one partition at one leader epoch goes through its
`OffsetsAppender` (acks=all), which passes the `AppendGate` and, after a success, starts
a compaction when `offsets.compaction_due` says so (one at a time; after a failed one,
not again before `min_records` more records). A compaction
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
from collections.abc import AsyncIterator, Callable

from broker.group.offsets import OFFSETS_TOPIC, compaction_due, replay, replay_groups, snapshot
from broker.replica.manager import ProduceItem, ProduceResult, ReplicaManager
from broker.replica.partition import Partition
from minikafka.errors import ErrorCode, MiniKafkaError
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


class OffsetsAppender:
    """The coordinator's appends to one `__consumer_offsets` partition at one leader epoch,
    and its compactions (see the module docstring)."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        partition: Partition,
        index: int,
        leader_epoch: int,
        min_records: int,
        timeout_ms: int,
        wall_ms: Callable[[], int],
        live_keys: Callable[[], int],
    ) -> None:
        self._replicas = replicas
        self._partition = partition
        self._index = index
        self._leader_epoch = leader_epoch
        self._min_records = min_records
        self._timeout_ms = timeout_ms
        self._wall_ms = wall_ms
        self._live_keys = live_keys
        self.gate = AppendGate()
        self.compaction: asyncio.Task[None] | None = None
        #: After a failed compaction, the log end offset before which none is tried again.
        self._retry_at = -1

    async def append(self, records: bytes, timeout_ms: int) -> ProduceResult:
        """Append one batch with acks=all (waiting while a compaction runs); a success may
        start a compaction."""
        async with self.gate.append():
            [result] = await self._replicas.produce(
                acks=-1,
                timeout_ms=timeout_ms,
                items=[
                    ProduceItem(
                        topic=OFFSETS_TOPIC,
                        partition=self._index,
                        records=records,
                        current_leader_epoch=self._leader_epoch,
                    )
                ],
            )
        if result.error_code is ErrorCode.NONE:
            self._maybe_compact()
        return result

    def _maybe_compact(self) -> None:
        log = self._partition.log
        due = compaction_due(
            records_in_log=log.log_end_offset - log.log_start_offset,
            live_keys=self._live_keys(),
            min_records=self._min_records,
        )
        if due and self.compaction is None and log.log_end_offset >= self._retry_at:
            self.compaction = asyncio.create_task(
                self._compact(), name=f"compact-{OFFSETS_TOPIC}-{self._index}"
            )

    async def _compact(self) -> None:
        moved: int | None = None
        try:
            moved = await compact(
                replicas=self._replicas,
                partition=self._partition,
                index=self._index,
                leader_epoch=self._leader_epoch,
                gate=self.gate,
                timeout_ms=self._timeout_ms,
                now_ms=self._wall_ms(),
            )
        except (MiniKafkaError, OSError):
            logger.exception("compacting %s-%d failed", OFFSETS_TOPIC, self._index)
        finally:
            self.compaction = None
            if moved is None:
                self._retry_at = self._partition.log.log_end_offset + self._min_records
