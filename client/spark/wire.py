"""A small synchronous reader of the minikafka wire API for the Spark source.

Spark runs the source in its own Python worker processes (forked from `pyspark.daemon`),
so this reader uses plain synchronous gRPC stubs, opens its channels lazily in the
process that uses it and is never pickled. It knows three calls: `Metadata` (leaders),
`ListOffsets` (log start offset and high watermark) and consumer `Fetch`. Retriable
errors (leader moved, stale epoch, broker unreachable) refresh the metadata and retry
with back-off, bounded by a deadline; anything else raises at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Final

import grpc

from client.spark.decode import Columns, decode_range
from client.spark.errors import DataLossError, SourceReadError
from client.spark.offsets import TP, Offsets
from client.spark.wire_base import (
    Backoff,
    ClusterSnapshot,
    PartitionLeader,
    WireBase,
    is_connection_error,
)
from minikafka.errors import RETRIABLE_CODES, ErrorCode, code_from_wire
from minikafka.record_batch import parse_header
from minikafka.v1 import broker_pb2

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "ClusterSnapshot",
    "PartitionLeader",
    "WireReader",
]


class WireReader(WireBase):
    """Synchronous Metadata / ListOffsets / Fetch against a cluster; close() when done.

    Channels, metadata and back-off come from `client.spark.wire_base.WireBase`."""

    # ---- list offsets ----------------------------------------------------------------

    def list_offsets(self, partitions: Iterable[TP], timestamp_ms: int) -> Offsets:
        """Log start offsets (`EARLIEST_TIMESTAMP`), high watermarks (`LATEST_TIMESTAMP`)
        or, for a time >= 0 (ms since the epoch), the first committed offset whose record
        batch is at least that recent (-1 when none is), from each partition's leader,
        retrying retriable errors within the deadline.

        Among them OFFSET_NOT_AVAILABLE: a new leader answers it while its HW is below
        the start of its epoch (KIP-207), so the latest offset never goes back."""
        pending = set(partitions)
        out: Offsets = {}
        deadline = time.monotonic() + self._timeout_s
        backoff = Backoff()
        problems: dict[TP, str] = {}
        while pending:
            snapshot = self.snapshot()
            by_leader: dict[int, list[TP]] = {}
            for tp in sorted(pending):
                info = snapshot.partitions.get(tp)
                if info is None or info.leader not in snapshot.brokers:
                    problems[tp] = "no leader in metadata"
                    continue
                by_leader.setdefault(info.leader, []).append(tp)
            for leader, tps in sorted(by_leader.items()):
                request = broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(
                            topic=t,
                            partition=p,
                            timestamp_ms=timestamp_ms,
                            current_leader_epoch=snapshot.partitions[(t, p)].leader_epoch,
                        )
                        for t, p in tps
                    ]
                )
                try:
                    reply = self._stub(snapshot.brokers[leader]).ListOffsets(
                        request, timeout=self._rpc_timeout_s
                    )
                except grpc.RpcError as exc:
                    if not is_connection_error(exc):
                        raise
                    for tp in tps:
                        problems[tp] = f"broker {leader} unreachable"
                    continue
                for part in reply.partitions:
                    tp = (part.topic, part.partition)
                    code = code_from_wire(part.error_code)
                    if code is ErrorCode.NONE:
                        out[tp] = part.offset
                        pending.discard(tp)
                    elif code in RETRIABLE_CODES:
                        problems[tp] = f"{code.name}: {part.error_message}"
                    else:
                        raise SourceReadError(
                            f"ListOffsets for {tp[0]}-{tp[1]} failed: {code.name}: "
                            f"{part.error_message}",
                            code=code,
                        )
            if not pending:
                break
            if time.monotonic() >= deadline:
                detail = "; ".join(f"{t}-{p}: {problems.get((t, p))}" for t, p in sorted(pending))
                raise SourceReadError(
                    f"could not list offsets within {self._timeout_s:.0f}s: {detail}"
                )
            backoff.sleep(deadline)
            self.refresh()
        return out

    # ---- leader epochs (truncation detection, KIP-320) ---------------------------------

    def _fetch_once(
        self, topic: str, partition: int, offset: int, *, last_fetched_epoch: int
    ) -> broker_pb2.FetchPartitionResponse:
        """One answer of the partition's leader to a fetch at `offset` that does not wait
        for data and asks for one byte (the leader still sends the first batch whole),
        retrying unreachable brokers and retriable errors (bounded)."""
        tp = (topic, partition)
        deadline = time.monotonic() + self._timeout_s
        backoff = Backoff()
        last_problem = "no answer yet"
        while time.monotonic() < deadline:
            snapshot = self.snapshot()
            info = snapshot.partitions.get(tp)
            if info is None or info.leader not in snapshot.brokers:
                last_problem = "no leader in metadata"
            else:
                try:
                    reply = self._stub(snapshot.brokers[info.leader]).Fetch(
                        broker_pb2.FetchRequest(
                            max_wait_ms=0,
                            min_bytes=0,
                            max_bytes=1,
                            partitions=[
                                broker_pb2.FetchPartition(
                                    topic=topic,
                                    partition=partition,
                                    fetch_offset=offset,
                                    current_leader_epoch=info.leader_epoch,
                                    last_fetched_epoch=last_fetched_epoch,
                                    partition_max_bytes=1,
                                )
                            ],
                        ),
                        timeout=self._rpc_timeout_s,
                    )
                except grpc.RpcError as exc:
                    if not is_connection_error(exc):
                        raise
                    last_problem = f"broker {info.leader} unreachable ({exc.code()})"
                else:
                    part = reply.partitions[0]
                    code = code_from_wire(part.error_code)
                    if code not in RETRIABLE_CODES:
                        return part
                    last_problem = f"{code.name}: {part.error_message}"
            backoff.sleep(deadline)
            self.refresh()
        raise SourceReadError(
            f"fetch of {topic}-{partition} at offset {offset} got no answer within "
            f"{self._timeout_s:.0f}s: {last_problem}"
        )

    def epoch_of(self, topic: str, partition: int, offset: int) -> int | None:
        """The leader epoch of the record batch holding `offset` (a committed record);
        None when it cannot be read (gone, or not on the leader)."""
        part = self._fetch_once(topic, partition, offset, last_fetched_epoch=-1)
        if code_from_wire(part.error_code) is not ErrorCode.NONE or not part.records:
            return None
        header = parse_header(part.records, 0, verify_crc=False)
        return header.leader_epoch if header.base_offset <= offset else None

    def divergence(self, topic: str, partition: int, offset: int, epoch: int) -> int | None:
        """Where the leader's log diverges from a reader that consumed up to `offset`,
        the last of it in leader epoch `epoch` (the consumer's KIP-320 check): the end
        offset of that epoch on the leader when it is below `offset`, else None."""
        part = self._fetch_once(topic, partition, offset, last_fetched_epoch=epoch)
        if part.HasField("diverging_epoch") and part.diverging_epoch.epoch >= 0:
            end_offset = part.diverging_epoch.end_offset
            if 0 <= end_offset < offset:
                return end_offset
        return None

    # ---- fetch -----------------------------------------------------------------------

    def fetch_range(
        self, topic: str, partition: int, start: int, end: int, *, fail_on_data_loss: bool
    ) -> Iterator[Columns]:
        """Committed records of `topic-partition` with offsets in `[start, end)`, in order.

        `end` was at most the high watermark when the range was planned. A new leader
        that has not learned that HW yet answers empty; the reader long-polls until it
        has. Offsets below the log start or above the log end mean data loss: raise
        `DataLossError`, or log and skip them when `fail_on_data_loss` is false.
        """
        tp = (topic, partition)
        fetch = self._fetch
        offset = start
        deadline = time.monotonic() + self._timeout_s
        backoff = Backoff()
        out_of_range_seen = False
        last_problem = "no answer yet"
        while offset < end:
            if time.monotonic() >= deadline:
                raise SourceReadError(
                    f"reading {topic}-{partition} [{start}, {end}) stalled at offset {offset} "
                    f"for {self._timeout_s:.0f}s: {last_problem}"
                )
            snapshot = self.snapshot()
            info = snapshot.partitions.get(tp)
            if info is None or info.leader not in snapshot.brokers:
                last_problem = "no leader in metadata"
                backoff.sleep(deadline)
                self.refresh()
                continue
            try:
                reply = self._stub(snapshot.brokers[info.leader]).Fetch(
                    broker_pb2.FetchRequest(
                        max_wait_ms=fetch.fetch_max_wait_ms,
                        min_bytes=1,
                        max_bytes=fetch.fetch_max_bytes,
                        partitions=[
                            broker_pb2.FetchPartition(
                                topic=topic,
                                partition=partition,
                                fetch_offset=offset,
                                current_leader_epoch=info.leader_epoch,
                                last_fetched_epoch=-1,
                                partition_max_bytes=fetch.max_partition_fetch_bytes,
                            )
                        ],
                    ),
                    timeout=self._rpc_timeout_s + fetch.fetch_max_wait_ms / 1000,
                )
            except grpc.RpcError as exc:
                if not is_connection_error(exc):
                    raise
                last_problem = f"broker {info.leader} unreachable ({exc.code()})"
                backoff.sleep(deadline)
                self.refresh()
                continue
            part = reply.partitions[0]
            code = code_from_wire(part.error_code)
            if code is ErrorCode.NONE:
                if part.records:
                    columns, next_offset = decode_range(part.records, start=offset, end=end)
                    if len(columns):
                        yield columns
                    if next_offset is not None and next_offset > offset:
                        offset = next_offset
                        deadline = time.monotonic() + self._timeout_s
                        backoff.reset()
                        out_of_range_seen = False
                        continue
                # Nothing committed at `offset` on this leader yet (a new leader learns
                # the HW from its followers): the fetch long-polled for fetch_max_wait_ms
                # already; check the leader is still current and ask again.
                last_problem = (
                    f"leader {info.leader} has high watermark {part.high_watermark}, "
                    f"below the planned end {end}"
                )
                self.refresh()
                continue
            if code is ErrorCode.OFFSET_OUT_OF_RANGE and out_of_range_seen:
                offset = self._lost(
                    topic, partition, offset, end, part, fail_on_data_loss=fail_on_data_loss
                )
                out_of_range_seen = False
                continue
            if code is ErrorCode.OFFSET_OUT_OF_RANGE or code in RETRIABLE_CODES:
                # A first out-of-range may come from stale metadata: check once more.
                out_of_range_seen = code is ErrorCode.OFFSET_OUT_OF_RANGE
                last_problem = f"{code.name}: {part.error_message}"
                backoff.sleep(deadline)
                self.refresh()
                continue
            raise SourceReadError(
                f"fetch of {topic}-{partition} at offset {offset} failed: {code.name}: "
                f"{part.error_message}",
                code=code,
            )

    def _lost(
        self,
        topic: str,
        partition: int,
        offset: int,
        end: int,
        part: broker_pb2.FetchPartitionResponse,
        *,
        fail_on_data_loss: bool,
    ) -> int:
        """Report offsets `[offset, ...)` as lost; return where reading resumes."""
        if part.log_start_offset >= 0 and offset < part.log_start_offset:
            resume = min(end, part.log_start_offset)
            why = f"the log now starts at {part.log_start_offset} (retention)"
        else:
            resume = end
            why = f"the log now ends at {part.log_end_offset} (truncation)"
        message = (
            f"offsets [{offset}, {resume}) of {topic}-{partition} are gone: {why}. "
            "Some data may have been lost; set failOnDataLoss=false to skip it and go on."
        )
        if fail_on_data_loss:
            raise DataLossError(message)
        logger.warning("skipping lost records: %s", message)
        return resume
