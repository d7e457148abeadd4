"""The consumer: `AsyncConsumer` (asyncio) and `Consumer` (sync, on a private loop thread).

The fetch loop sends one Fetch per broker for every assigned partition led by (or,
with `client_rack`, replicated in the same rack on) that broker which has no fetch in
flight and fewer than `MAX_BUFFERED_RESPONSES` undelivered responses buffered, so the
next fetch travels while the user processes the previous one, and a long poll on an
idle partition never holds back a busy one. Responses are kept as raw batch bytes and decoded (one
msgspec call per batch) when `getmany` / `poll` hands records out; records below the
position are skipped because a fetch returns whole batches.

Each fetch carries the epoch of the last fetched batch; a `diverging_epoch` in the
answer means the log was truncated under the consumer (KIP-320): see
`truncation_action`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, Literal

import grpc
import grpc.aio
import msgspec

from client.errors import (
    ConsumerStoppedError,
    CorruptRecordError,
    IllegalStateError,
    KafkaConnectionError,
    LogTruncationError,
    MiniKafkaClientError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    from_response,
)
from client.loop_thread import LoopThread
from client.metadata import BrokerInfo
from client.records import ConsumerRecord, Deserializer, TopicPartition, decode_fetched
from client.transport import BrokerConnections, LeaderMoved, await_unless_moved
from minikafka.errors import INVALID_METADATA_CODES, RETRIABLE_CODES, ErrorCode
from minikafka.record_batch import CorruptBatchError, iter_batches
from minikafka.v1 import broker_pb2

logger = logging.getLogger(__name__)

OffsetReset = Literal["earliest", "latest", "none"]
EARLIEST: Final = -2
LATEST: Final = -1
#: Undelivered fetch responses buffered per partition before its fetching pauses. Two
#: let the next fetch travel as soon as a response arrives, while that one is decoded
#: and handed out; a partition buffers at most about 2 x `max_partition_fetch_bytes`.
MAX_BUFFERED_RESPONSES: Final = 2
#: A fetch outstanding this much past `fetch_max_wait_ms` starts checks for a moved leader.
FETCH_STALL_MARGIN_S: Final = 0.5


class TruncationAction(msgspec.Struct, frozen=True, kw_only=True):
    """What to do when a fetch reports a diverging epoch (PURE decision)."""

    kind: Literal["refetch", "reset", "raise"]
    offset: int
    epoch: int


def truncation_action(
    *,
    position: int,
    diverging_epoch: int,
    end_offset: int,
    reset_on_truncation: bool,
    auto_offset_reset: OffsetReset,
) -> TruncationAction:
    """Decide how to react to `diverging_epoch {epoch, end_offset}` (KIP-320).

    The leader's log matches what the consumer read up to `end_offset`. If the consumer
    has not handed out anything beyond that (`position <= end_offset`) it simply
    fetches again from its position under the leader's epoch. Otherwise records it
    delivered are gone: raise `LogTruncationError`, or, when the user asked for it,
    reset the position to `end_offset`.
    """
    if position <= end_offset:
        return TruncationAction(kind="refetch", offset=position, epoch=diverging_epoch)
    if reset_on_truncation and auto_offset_reset != "none":
        return TruncationAction(kind="reset", offset=end_offset, epoch=diverging_epoch)
    return TruncationAction(kind="raise", offset=end_offset, epoch=diverging_epoch)


class _PartitionState:
    """Mutable per-partition bookkeeping, touched only on the consumer's loop."""

    __slots__ = (
        "consumed_epoch",
        "error",
        "fetch_epoch",
        "fetch_offset",
        "generation",
        "high_watermark",
        "in_flight",
        "raw",
        "records",
        "records_index",
        "reset_to",
        "retry_after",
    )

    def __init__(self) -> None:
        #: Position (next offset to hand out) lives in `fetch_offset` when nothing is
        #: buffered; see `AsyncConsumer._position`.
        self.consumed_epoch = -1
        self.fetch_offset = -1
        self.fetch_epoch = -1
        self.generation = 0
        self.high_watermark = -1
        self.in_flight = False
        self.raw: list[tuple[bytes, int]] = []  # (records bytes, offset they start from)
        self.records: list[ConsumerRecord] = []
        self.records_index = 0
        #: EARLIEST / LATEST when the position must be looked up; None when known.
        self.reset_to: int | None = None
        self.error: BaseException | None = None
        self.retry_after = 0.0


class AsyncConsumer:
    """asyncio consumer (aiokafka style).

    Example::

        async with AsyncConsumer("orders", bootstrap_servers="127.0.0.1:9092",
                                 auto_offset_reset="earliest") as consumer:
            batches = await consumer.getmany(timeout_ms=1000)  # {TopicPartition: [records]}
            async for record in consumer:
                print(record.offset, record.value)
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        client_id: str = "minikafka-python",
        auto_offset_reset: OffsetReset = "latest",
        reset_on_truncation: bool = False,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 << 20,
        max_partition_fetch_bytes: int = 1 << 20,
        max_poll_records: int = 500,
        client_rack: str | None = None,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        consumer_timeout_ms: float = float("inf"),
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', "
                f"got {auto_offset_reset!r}"
            )
        if max_poll_records < 1:
            raise ValueError("max_poll_records must be >= 1")
        if request_timeout_ms <= fetch_max_wait_ms:
            raise ValueError("request_timeout_ms must be larger than fetch_max_wait_ms")
        self.auto_offset_reset: OffsetReset = auto_offset_reset
        self.reset_on_truncation = reset_on_truncation
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.client_rack = client_rack or None
        self.consumer_timeout_ms = consumer_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._metadata_max_age_ms = metadata_max_age_ms
        self._subscription: set[str] = set(topics)
        self._assignment: dict[TopicPartition, _PartitionState] = {}
        self._user_assigned = False
        self._conn: BrokerConnections | None = None
        self._fetch_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake_fetcher: asyncio.Event | None = None
        self._data_ready: asyncio.Event | None = None
        self._node_backoff: dict[int, float] = {}
        self._rotation = 0
        self._started = False
        self._closed = False
        self._metadata_task: asyncio.Task[None] | None = None

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._conn = BrokerConnections(
            self._bootstrap,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            metadata_max_age_ms=self._metadata_max_age_ms,
            client_id=self._client_id,
        )
        self._wake_fetcher = asyncio.Event()
        self._data_ready = asyncio.Event()
        try:
            await self._conn.refresh(self._subscription)
        except BaseException:
            await self._conn.close()
            raise
        self._update_subscription_assignment()
        self._fetch_task = asyncio.create_task(self._run_fetcher(), name="minikafka-fetcher")
        self._started = True

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._data_ready is not None:
            self._data_ready.set()
        tasks = [t for t in (self._fetch_task, self._metadata_task) if t is not None]
        tasks.extend(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer is closed")
        if not self._started:
            raise IllegalStateError("call `await consumer.start()` first")

    # ---- assignment -----------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Consume every partition of `topics` (static assignment, refreshed with
        metadata, until consumer groups exist)."""
        self._subscription = set(topics)
        self._user_assigned = False
        if self._conn is not None:
            self._conn.add_topics(self._subscription)
            self._request_metadata()
            self._update_subscription_assignment()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replaces any subscription)."""
        wanted = {TopicPartition(tp.topic, tp.partition) for tp in partitions}
        self._subscription = set()
        self._user_assigned = True
        self._set_assignment(wanted)
        if self._conn is not None:
            self._conn.add_topics({tp.topic for tp in wanted})
            self._request_metadata()

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def _set_assignment(self, wanted: set[TopicPartition]) -> None:
        for tp in list(self._assignment):
            if tp not in wanted:
                del self._assignment[tp]
        for tp in wanted:
            if tp not in self._assignment:
                state = _PartitionState()
                state.reset_to = self._default_reset()
                self._assignment[tp] = state
        self._wake()

    def _default_reset(self) -> int | None:
        if self.auto_offset_reset == "earliest":
            return EARLIEST
        if self.auto_offset_reset == "latest":
            return LATEST
        return None

    def _update_subscription_assignment(self) -> None:
        if self._user_assigned or self._conn is None:
            return
        wanted: set[TopicPartition] = set()
        for topic in self._subscription:
            for partition in self._conn.view.partitions_for(topic) or ():
                wanted.add(TopicPartition(topic, partition))
        self._set_assignment(wanted)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._assignment.get(TopicPartition(tp.topic, tp.partition))
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    # ---- positions ------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make `offset` the next offset `getmany` / `poll` returns for `partition`."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._set_position(self._state(partition), offset, -1)

    def _set_position(self, state: _PartitionState, offset: int, epoch: int) -> None:
        state.generation += 1
        state.fetch_offset = offset
        state.fetch_epoch = epoch
        state.consumed_epoch = epoch
        state.raw.clear()
        state.records = []
        state.records_index = 0
        state.reset_to = None
        state.error = None
        state.retry_after = 0.0
        self._wake()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, which: int, partitions: Sequence[TopicPartition]) -> None:
        self._check_open()
        tps = list(partitions) or list(self._assignment)
        offsets = await self._list_offsets({tp: which for tp in tps})
        for tp, offset in offsets.items():
            self._set_position(self._state(tp), offset, -1)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record `getmany` / `poll` returns for `partition`."""
        self._check_open()
        state = self._state(partition)
        if state.error is not None:
            raise state.error
        if state.reset_to is None and state.fetch_offset < 0:
            raise NoOffsetForPartitionError(partition)
        if state.reset_to is not None:
            await self._reset_positions([TopicPartition(partition.topic, partition.partition)])
            if state.error is not None:
                raise state.error
        return self._position(state)

    @staticmethod
    def _position(state: _PartitionState) -> int:
        if state.records_index < len(state.records):
            return state.records[state.records_index].offset
        if state.raw:
            return state.raw[0][1]
        return state.fetch_offset

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last fetch (None before one)."""
        hw = self._state(partition).high_watermark
        return hw if hw >= 0 else None

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self._check_open()
        return await self._list_offsets({tp: EARLIEST for tp in partitions})

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset after the last readable record)."""
        self._check_open()
        return await self._list_offsets({tp: LATEST for tp in partitions})

    async def _list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets grouped by leader, retrying retriable errors until the request
        timeout; raises the first definite error."""
        assert self._conn is not None
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        remaining = {TopicPartition(tp.topic, tp.partition): ts for tp, ts in wanted.items()}
        found: dict[TopicPartition, int] = {}
        last_error: BaseException | None = None
        while remaining:
            view = self._conn.view
            if any(view.leader(*tp) is None for tp in remaining):
                with contextlib.suppress(KafkaConnectionError):
                    await self._conn.refresh({tp.topic for tp in remaining})
                view = self._conn.view
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in remaining:
                leader = view.leader(*tp)
                if leader is not None:
                    by_leader.setdefault(leader.broker_id, []).append(tp)
            for broker_id, tps in by_leader.items():
                request = broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(
                            topic=tp.topic,
                            partition=tp.partition,
                            timestamp_ms=remaining[tp],
                            current_leader_epoch=self._leader_epoch(tp),
                        )
                        for tp in tps
                    ]
                )
                try:
                    response = await self._conn.broker_stub(view.brokers[broker_id]).ListOffsets(
                        request, timeout=self._conn.timeout_s
                    )
                except grpc.aio.AioRpcError as exc:
                    last_error = KafkaConnectionError(
                        f"ListOffsets to broker {broker_id}: {exc.code().name} {exc.details()}"
                    )
                    continue
                for part in response.partitions:
                    tp = TopicPartition(part.topic, part.partition)
                    if tp not in remaining:
                        continue
                    if part.error_code == ErrorCode.NONE:
                        found[tp] = part.offset
                        del remaining[tp]
                        continue
                    error = from_response(
                        part.error_code,
                        part.error_message,
                        context=f"ListOffsets {tp.topic}-{tp.partition}",
                    )
                    if not error.retriable:
                        raise error
                    last_error = error
            if not remaining:
                break
            if time.monotonic() >= deadline:
                raise last_error or KafkaConnectionError("ListOffsets: no leader for partitions")
            with contextlib.suppress(KafkaConnectionError):
                await self._conn.refresh({tp.topic for tp in remaining})
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        return found

    def _leader_epoch(self, tp: TopicPartition) -> int:
        assert self._conn is not None
        info = self._conn.view.partition(tp.topic, tp.partition)
        return info.leader_epoch if info is not None else -1

    async def _reset_positions(self, tps: Sequence[TopicPartition]) -> None:
        wanted: dict[TopicPartition, int] = {}
        for tp in tps:
            state = self._assignment.get(tp)
            if state is not None and state.reset_to is not None:
                wanted[tp] = state.reset_to
        if not wanted:
            return
        try:
            offsets = await self._list_offsets(wanted)
        except MiniKafkaClientError as exc:
            if exc.retriable:
                logger.debug("offset reset deferred: %s", exc)
                return
            for tp in wanted:
                self._assignment[tp].error = exc
            return
        for tp, offset in offsets.items():
            state = self._assignment.get(tp)
            if state is not None and state.reset_to == wanted[tp]:
                self._set_position(state, offset, -1)

    # ---- fetching -------------------------------------------------------------------

    def _wake(self) -> None:
        if self._wake_fetcher is not None:
            self._wake_fetcher.set()

    def _request_metadata(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = asyncio.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        assert self._conn is not None
        try:
            await self._conn.refresh()
        except KafkaConnectionError as exc:
            logger.warning("metadata refresh failed: %s", exc)
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        self._update_subscription_assignment()
        self._wake()

    def _fetch_node(self, tp: TopicPartition) -> BrokerInfo | None:
        assert self._conn is not None
        return self._conn.view.read_replica(tp.topic, tp.partition, self.client_rack)

    async def _run_fetcher(self) -> None:
        assert self._wake_fetcher is not None
        assert self._conn is not None
        while not self._closed:
            self._wake_fetcher.clear()
            now = time.monotonic()
            needs_reset = [
                tp
                for tp, s in self._assignment.items()
                if s.reset_to is not None and s.error is None and s.retry_after <= now
            ]
            if needs_reset:
                await self._reset_positions(needs_reset)
                for tp in needs_reset:
                    state = self._assignment.get(tp)
                    if state is not None and state.reset_to is not None:
                        state.retry_after = now + self.retry_backoff_ms / 1000
            if self._conn.metadata_stale():
                self._request_metadata()
            by_node: dict[int, list[TopicPartition]] = {}
            missing_leader = False
            next_retry = float("inf")
            for tp, state in self._assignment.items():
                if (
                    state.in_flight
                    or len(state.raw) >= MAX_BUFFERED_RESPONSES
                    or state.error is not None
                    or state.reset_to is not None
                    or state.fetch_offset < 0
                ):
                    if state.reset_to is not None and state.error is None:
                        next_retry = min(next_retry, state.retry_after)
                    continue
                if state.retry_after > now:
                    next_retry = min(next_retry, state.retry_after)
                    continue
                node = self._fetch_node(tp)
                if node is None:
                    missing_leader = True
                    continue
                if self._node_backoff.get(node.broker_id, 0.0) > now:
                    next_retry = min(next_retry, self._node_backoff[node.broker_id])
                    continue
                by_node.setdefault(node.broker_id, []).append(tp)
            if missing_leader:
                self._request_metadata()
                next_retry = min(next_retry, now + self.retry_backoff_ms / 1000)
            for broker_id, tps in by_node.items():
                for tp in tps:
                    self._assignment[tp].in_flight = True
                task = asyncio.create_task(self._fetch(broker_id, tps))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            wait_s = min(max(next_retry - time.monotonic(), 0.0), 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_fetcher.wait(), wait_s)

    async def _fetch(self, broker_id: int, tps: list[TopicPartition]) -> None:
        assert self._conn is not None
        generations = {tp: self._assignment[tp].generation for tp in tps}
        try:
            await self._fetch_inner(broker_id, tps, generations)
        finally:
            for tp in tps:
                state = self._assignment.get(tp)
                if state is not None:
                    state.in_flight = False
            self._wake()

    async def _fetch_inner(
        self, broker_id: int, tps: list[TopicPartition], generations: dict[TopicPartition, int]
    ) -> None:
        assert self._conn is not None
        assert self._data_ready is not None
        view = self._conn.view
        broker = view.brokers.get(broker_id)
        if broker is None:
            return
        parts = []
        for tp in tps:
            state = self._assignment[tp]
            parts.append(
                broker_pb2.FetchPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    fetch_offset=state.fetch_offset,
                    current_leader_epoch=self._leader_epoch(tp),
                    last_fetched_epoch=state.fetch_epoch,
                    partition_max_bytes=self.max_partition_fetch_bytes,
                )
            )
        request = broker_pb2.FetchRequest(
            max_wait_ms=self.fetch_max_wait_ms,
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            partitions=parts,
        )
        conn = self._conn
        sent_epochs = [(tp, part.current_leader_epoch) for tp, part in zip(tps, parts, strict=True)]
        try:
            response = await await_unless_moved(
                self._conn.broker_stub(broker).Fetch(
                    request, timeout=self.request_timeout_ms / 1000
                ),
                expected_s=self.fetch_max_wait_ms / 1000 + FETCH_STALL_MARGIN_S,
                moved=lambda: conn.view.leader_moved(sent_epochs),
                refresh=self._request_metadata,
            )
        except LeaderMoved:
            logger.info("fetch from broker %s abandoned: a partition got a new leader", broker_id)
            return
        except grpc.aio.AioRpcError as exc:
            logger.info("fetch from broker %s failed: %s", broker_id, exc.code().name)
            self._node_backoff[broker_id] = time.monotonic() + self.retry_backoff_ms / 1000
            self._request_metadata()
            return
        got_data = False
        for part in response.partitions:
            tp = TopicPartition(part.topic, part.partition)
            current = self._assignment.get(tp)
            if current is None or generations.get(tp) != current.generation:
                continue  # unassigned or seeked while the fetch was in flight
            if self._handle_partition(tp, current, part, broker_id):
                got_data = True
        if got_data or any(self._assignment[tp].error for tp in tps if tp in self._assignment):
            self._data_ready.set()

    def _handle_partition(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        part: broker_pb2.FetchPartitionResponse,
        broker_id: int,
    ) -> bool:
        code = int(part.error_code)
        if part.HasField("diverging_epoch") and part.diverging_epoch.epoch >= 0:
            self._on_diverging(
                tp, state, part.diverging_epoch.epoch, part.diverging_epoch.end_offset
            )
            return state.error is not None
        if code == ErrorCode.NONE:
            state.high_watermark = part.high_watermark
            if not part.records:
                return False
            try:
                next_offset, last_epoch = _scan(part.records, state.fetch_offset)
            except CorruptBatchError as exc:
                state.error = from_response(
                    ErrorCode.CORRUPT_MESSAGE, str(exc), context=f"fetch {tp.topic}-{tp.partition}"
                )
                return True
            if next_offset <= state.fetch_offset:
                return False
            state.raw.append((part.records, state.fetch_offset))
            state.fetch_offset = next_offset
            state.fetch_epoch = last_epoch
            return True
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            reset = self._default_reset()
            if reset is None:
                state.error = OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: offset {state.fetch_offset} is out of range "
                    f"and auto_offset_reset='none' ({part.error_message})"
                )
                return True
            logger.info(
                "%s-%s: offset %s out of range, resetting to %s",
                tp.topic,
                tp.partition,
                state.fetch_offset,
                self.auto_offset_reset,
            )
            state.generation += 1
            state.reset_to = reset
            return False
        error = from_response(code, part.error_message, context=f"fetch {tp.topic}-{tp.partition}")
        if code in INVALID_METADATA_CODES or code in RETRIABLE_CODES:
            logger.debug("fetch %s from broker %s: %s", tp, broker_id, error)
            state.retry_after = time.monotonic() + self.retry_backoff_ms / 1000
            if code in INVALID_METADATA_CODES:
                self._request_metadata()
            return False
        state.error = error
        return True

    def _on_diverging(
        self, tp: TopicPartition, state: _PartitionState, epoch: int, end_offset: int
    ) -> None:
        position = self._position(state)
        action = truncation_action(
            position=position,
            diverging_epoch=epoch,
            end_offset=end_offset,
            reset_on_truncation=self.reset_on_truncation,
            auto_offset_reset=self.auto_offset_reset,
        )
        if action.kind == "raise":
            logger.warning(
                "log of %s-%s truncated under the consumer: position %s, diverges at %s",
                tp.topic,
                tp.partition,
                position,
                end_offset,
            )
            state.error = LogTruncationError(tp, position, end_offset)
            return
        if action.kind == "reset":
            logger.warning(
                "log of %s-%s truncated under the consumer: resetting from %s to %s",
                tp.topic,
                tp.partition,
                position,
                action.offset,
            )
        self._set_position(state, action.offset, action.epoch)

    # ---- handing out records ---------------------------------------------------------

    def _take(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        budget = max_records
        tps = list(self._assignment)
        if not tps:
            return result
        start = self._rotation % len(tps)
        self._rotation += 1
        for tp in tps[start:] + tps[:start]:
            if budget <= 0:
                break
            state = self._assignment[tp]
            if state.error is not None:
                continue
            taken: list[ConsumerRecord] = []
            while budget > 0:
                if state.records_index >= len(state.records):
                    if not state.raw:
                        break
                    self._decode_next(tp, state)
                    if state.error is not None:
                        break
                    continue
                end = min(len(state.records), state.records_index + budget)
                chunk = state.records[state.records_index : end]
                state.records_index = end
                budget -= len(chunk)
                taken.extend(chunk)
            if state.records_index >= len(state.records) and state.records:
                state.records = []
                state.records_index = 0
                self._wake()
            if taken:
                state.consumed_epoch = taken[-1].leader_epoch
                result[tp] = taken
        return result

    def _decode_next(self, tp: TopicPartition, state: _PartitionState) -> None:
        data, start = state.raw.pop(0)
        try:
            fetched = decode_fetched(
                tp.topic,
                tp.partition,
                data,
                position=start,
                key_deserializer=self._key_deserializer,
                value_deserializer=self._value_deserializer,
            )
        except CorruptBatchError as exc:
            state.error = from_response(
                ErrorCode.CORRUPT_MESSAGE, str(exc), context=f"{tp.topic}-{tp.partition}"
            )
            state.raw.insert(0, (data, start))
            return
        state.records = fetched.records
        state.records_index = 0
        if not state.raw:
            self._wake()

    def _raise_pending_error(self) -> None:
        """Raise the first partition error. Truncation, out-of-range and corruption stay
        until the user seeks; other errors are raised once and the fetch is retried."""
        for tp, state in self._assignment.items():
            error = state.error
            if error is not None:
                if not isinstance(
                    error, LogTruncationError | OffsetOutOfRangeError | CorruptRecordError
                ):
                    state.error = None
                    state.retry_after = time.monotonic() + self.retry_backoff_ms / 1000
                raise error
            if state.reset_to is None and state.fetch_offset < 0:
                raise NoOffsetForPartitionError(tp)

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned partitions (or only `partitions`), waiting up to
        `timeout_ms` for some to arrive; `{}` when none did."""
        self._check_open()
        assert self._data_ready is not None
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._raise_pending_error()
            if partitions:
                result = {tp: recs for tp, recs in self._take_from(partitions, limit).items()}
            else:
                result = self._take(limit)
            if result:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return {}
            self._data_ready.clear()
            self._wake()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data_ready.wait(), remaining)
            if self._closed:
                raise ConsumerStoppedError("the consumer was closed")

    def _take_from(
        self, partitions: Sequence[TopicPartition], limit: int
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        wanted = {TopicPartition(tp.topic, tp.partition) for tp in partitions}
        for tp in wanted:
            self._state(tp)
        saved = self._assignment
        try:
            self._assignment = {tp: s for tp, s in saved.items() if tp in wanted}
            return self._take(limit)
        finally:
            self._assignment = saved

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """kafka-python's name for `getmany`."""
        return await self.getmany(timeout_ms=timeout_ms, max_records=max_records)

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while True:
            batch = await self.getmany(*partitions, timeout_ms=1000, max_records=1)
            for records in batch.values():
                return records[0]

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        idle_since = time.monotonic()
        while not self._closed:
            batch = await self.getmany(timeout_ms=min(1000, int(self.consumer_timeout_ms)))
            if not batch:
                if (time.monotonic() - idle_since) * 1000 >= self.consumer_timeout_ms:
                    return
                continue
            for records in batch.values():
                for record in records:
                    yield record
            idle_since = time.monotonic()


def _scan(data: bytes, fetch_offset: int) -> tuple[int, int]:
    """(offset after the last batch, epoch of the last batch) of fetched bytes."""
    next_offset = fetch_offset
    last_epoch = -1
    for _pos, header in iter_batches(data, verify_crc=False):
        next_offset = max(next_offset, header.next_offset)
        last_epoch = header.leader_epoch
    return next_offset, last_epoch


class Consumer:
    """Synchronous consumer (kafka-python style) over an `AsyncConsumer` run on a
    private event loop thread.

    Example::

        with Consumer("orders", bootstrap_servers="127.0.0.1:9092",
                      auto_offset_reset="earliest", consumer_timeout_ms=1000) as consumer:
            for record in consumer:          # stops after 1 s without records
                print(record.offset, record.value)
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        **config: Any,
    ) -> None:
        self._thread = LoopThread("minikafka-consumer")
        try:
            self._inner: AsyncConsumer = self._thread.run(
                self._make(topics, bootstrap_servers, config)
            )
        except BaseException:
            self._thread.stop()
            raise
        self._iter_buffer: list[ConsumerRecord] = []
        self._iter_index = 0
        self._closed = False

    @staticmethod
    async def _make(
        topics: Sequence[str], bootstrap_servers: str | Sequence[str], config: dict[str, Any]
    ) -> AsyncConsumer:
        consumer = AsyncConsumer(*topics, bootstrap_servers=bootstrap_servers, **config)
        await consumer.start()
        return consumer

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return self._thread.run(run())

    def subscribe(self, topics: Iterable[str]) -> None:
        topic_list = list(topics)
        self._call(lambda: self._inner.subscribe(topic_list))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        tps = list(partitions)
        self._call(lambda: self._inner.assign(tps))

    def assignment(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._call(self._inner.assignment)
        return result

    def subscription(self) -> set[str]:
        result: set[str] = self._call(self._inner.subscription)
        return result

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """`{TopicPartition: [ConsumerRecord]}`, waiting up to `timeout_ms` for records."""
        self._iter_buffer = []
        self._iter_index = 0
        return self._thread.run(self._inner.getmany(timeout_ms=timeout_ms, max_records=max_records))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._iter_buffer = []
        self._iter_index = 0
        self._call(lambda: self._inner.seek(partition, offset))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._iter_buffer = []
        self._thread.run(self._inner.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._iter_buffer = []
        self._thread.run(self._inner.seek_to_end(*partitions))

    def position(self, partition: TopicPartition) -> int:
        return self._thread.run(self._inner.position(partition))

    def highwater(self, partition: TopicPartition) -> int | None:
        result: int | None = self._call(lambda: self._inner.highwater(partition))
        return result

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._inner.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._inner.end_offsets(list(partitions)))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; `StopIteration` after `consumer_timeout_ms` without one."""
        if self._iter_index < len(self._iter_buffer):
            record = self._iter_buffer[self._iter_index]
            self._iter_index += 1
            return record
        idle_since = time.monotonic()
        limit_ms = self._inner.consumer_timeout_ms
        while True:
            wait_ms = int(min(1000.0, max(limit_ms - (time.monotonic() - idle_since) * 1000, 0)))
            batch = self._thread.run(self._inner.getmany(timeout_ms=wait_ms))
            records = [r for recs in batch.values() for r in recs]
            if records:
                self._iter_buffer = records
                self._iter_index = 1
                return records[0]
            if (time.monotonic() - idle_since) * 1000 >= limit_ms:
                raise StopIteration

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._inner.stop(), 10.0)
        finally:
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
