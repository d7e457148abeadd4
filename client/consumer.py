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
    KafkaConfigurationError,
    KafkaConnectionError,
    LeaderNotAvailableError,
    LogTruncationError,
    MiniKafkaClientError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RecordDeserializationError,
    UnknownTopicOrPartitionError,
    check_config_keys,
    from_response,
)
from client.loop_thread import LoopThread
from client.metadata import BrokerInfo, ClusterView
from client.records import ConsumerRecord, Deserializer, TopicPartition, decode_fetched
from client.transport import (
    BrokerConnections,
    LeaderMoved,
    await_unless_moved,
    check_number,
    check_topic_name,
)
from minikafka.errors import INVALID_METADATA_CODES, RETRIABLE_CODES, ErrorCode
from minikafka.record_batch import CorruptBatchError, iter_batches
from minikafka.v1 import broker_pb2

logger = logging.getLogger(__name__)

OffsetReset = Literal["earliest", "latest", "none"]
#: What `seek_to_beginning` / `seek_to_end` take: partitions, or lists of them.
PartitionArg = TopicPartition | Iterable[TopicPartition]
EARLIEST: Final = -2
LATEST: Final = -1
#: Undelivered fetch responses buffered per partition before its fetching pauses. Two
#: let the next fetch travel as soon as a response arrives, while that one is decoded
#: and handed out; a partition buffers at most about 2 x `max_partition_fetch_bytes`.
MAX_BUFFERED_RESPONSES: Final = 2
#: A fetch outstanding this much past `fetch_max_wait_ms` starts checks for a moved leader.
FETCH_STALL_MARGIN_S: Final = 0.5
#: Longest pause between metadata requests while a subscribed topic does not exist yet.
MISSING_TOPIC_BACKOFF_MAX_S: Final = 1.0


def _topic_names(topics: Iterable[object], what: str) -> list[str]:
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


def _topic_partition(item: object, what: str) -> TopicPartition:
    """`item` as a `TopicPartition`; a plain `(topic, partition)` tuple is accepted."""
    if isinstance(item, tuple) and len(item) == 2:
        topic, partition = item
        if isinstance(partition, int) and not isinstance(partition, bool) and partition >= 0:
            return TopicPartition(check_topic_name(topic), partition)
        raise TypeError(f"{what}: the partition of {item!r} must be an int >= 0, got {partition!r}")
    raise TypeError(
        f"{what} takes TopicPartition(topic, partition) values, got {type(item).__name__} {item!r}"
    )


def _partition_args(partitions: Sequence[object], what: str) -> list[TopicPartition]:
    """`*partitions` arguments as TopicPartitions; a list of them is accepted too
    (`seek_to_end([tp1, tp2])` as well as `seek_to_end(tp1, tp2)`)."""
    result: list[TopicPartition] = []
    for item in partitions:
        if isinstance(item, str) or (isinstance(item, tuple) and item and isinstance(item[0], str)):
            result.append(_topic_partition(item, what))
        elif isinstance(item, Iterable):
            result.extend(_topic_partition(tp, what) for tp in item)
        else:
            result.append(_topic_partition(item, what))
    return result


def _missing_partition_error(
    view: ClusterView, remaining: Iterable[TopicPartition], last_error: BaseException | None
) -> BaseException:
    """Why offsets of `remaining` could not be looked up before the deadline: the
    topic or partition does not exist, it has no leader, or the last error seen."""
    for tp in remaining:
        info = view.topics.get(tp.topic)
        if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return UnknownTopicOrPartitionError(f"topic {tp.topic!r} does not exist")
        if info.partitions and tp.partition not in info.partitions:
            return UnknownTopicOrPartitionError(
                f"partition {tp.partition} of topic {tp.topic!r} does not exist (it has "
                f"partitions 0-{max(info.partitions)})"
            )
    if last_error is not None:
        return last_error
    names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in remaining)
    return LeaderNotAvailableError(f"ListOffsets: no leader for {names}")


def _check_poll_args(timeout_ms: object, max_records: object) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int | float):
        raise TypeError(f"timeout_ms must be a number of milliseconds, got {timeout_ms!r}")
    if not timeout_ms >= 0:
        raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
    if max_records is not None and (
        isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
    ):
        raise ValueError(f"max_records must be a positive int (or None), got {max_records!r}")


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
        "seeks",
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
        #: Explicit seeks by the user (`generation` also counts automatic resets): a
        #: `seek_to_*` lookup applies only if no later seek came in the meantime.
        self.seeks = 0


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
        self._subscription: set[str] = set(_topic_names(topics, "AsyncConsumer"))
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
        #: While a subscribed topic is missing from metadata: when to ask again, and
        #: the pause after that (doubling up to `MISSING_TOPIC_BACKOFF_MAX_S`).
        self._missing_topics_at = 0.0
        self._missing_topics_backoff_s = retry_backoff_ms / 1000

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer was stopped; create a new one")
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

    def _check_not_closed(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer is closed")

    # ---- assignment -----------------------------------------------------------------

    def subscribe(self, topics: str | Iterable[str]) -> None:
        """Consume every partition of `topics` (static assignment, refreshed with
        metadata, until consumer groups exist). A single topic may be given as a str;
        an empty list unsubscribes.

        Raises `IllegalStateError` if partitions were assigned with `assign()`
        (the two are mutually exclusive, as in kafka-python: `unsubscribe()` first).
        """
        self._check_not_closed()
        names = _topic_names([topics] if isinstance(topics, str) else topics, "subscribe()")
        if self._user_assigned:
            raise IllegalStateError(
                "subscribe() and assign() are mutually exclusive: this consumer has "
                "partitions assigned with assign(); call unsubscribe() first"
            )
        if not names:
            self.unsubscribe()
            return
        self._subscription = set(names)
        if self._conn is not None:
            self._conn.add_topics(self._subscription)
            self._missing_topics_at = 0.0
            self._request_metadata()
            self._update_subscription_assignment()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (a list of `TopicPartition`); an empty
        list unassigns everything.

        Raises `IllegalStateError` if the consumer is subscribed to topics (given to
        the constructor or to `subscribe()`: `unsubscribe()` first).
        """
        self._check_not_closed()
        if isinstance(partitions, str | TopicPartition) or not isinstance(partitions, Iterable):
            raise TypeError(
                "assign() takes a list of TopicPartition(topic, partition), got "
                f"{type(partitions).__name__} {partitions!r}"
            )
        wanted = {_topic_partition(tp, "assign()") for tp in partitions}
        if self._subscription:
            raise IllegalStateError(
                "assign() and subscribe() are mutually exclusive: this consumer is "
                f"subscribed to {sorted(self._subscription)}; call unsubscribe() first"
            )
        if not wanted:
            self.unsubscribe()
            return
        self._user_assigned = True
        self._set_assignment(wanted)
        if self._conn is not None:
            self._conn.add_topics({tp.topic for tp in wanted})
            self._request_metadata()

    def unsubscribe(self) -> None:
        """Drop the subscription and every assigned partition (after which either
        `subscribe()` or `assign()` may be called)."""
        self._check_not_closed()
        self._subscription = set()
        self._user_assigned = False
        self._set_assignment(set())

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
        self._check_not_closed()
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {type(offset).__name__} {offset!r}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self._state(_topic_partition(partition, "seek()"))
        state.seeks += 1
        self._set_position(state, offset, -1)

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

    async def seek_to_beginning(self, *partitions: PartitionArg) -> None:
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: PartitionArg) -> None:
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, which: int, partitions: Sequence[PartitionArg]) -> None:
        self._check_open()
        what = "seek_to_beginning()" if which == EARLIEST else "seek_to_end()"
        tps = _partition_args(partitions, what) or list(self._assignment)
        states = {tp: self._state(tp) for tp in tps}  # unassigned: fail before any request
        seeks: dict[TopicPartition, int] = {}
        for tp, state in states.items():
            state.seeks += 1
            seeks[tp] = state.seeks
        offsets = await self._list_offsets({tp: which for tp in tps})
        for tp, offset in offsets.items():
            # Still assigned (the same state) and not sought again since: the user's seek
            # wins over an automatic reset that completed meanwhile.
            current = self._assignment.get(tp)
            if current is states[tp] and current.seeks == seeks[tp]:
                self._set_position(current, offset, -1)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record `getmany` / `poll` returns for `partition`.

        Looks the offset up (per `auto_offset_reset`) when the partition has none
        yet; raises the partition's error (e.g. `UnknownTopicOrPartitionError` when
        it does not exist) if that does not succeed within `request_timeout_ms`.
        """
        self._check_open()
        tp = _topic_partition(partition, "position()")
        state = self._state(tp)
        if state.error is not None and not isinstance(state.error, RecordDeserializationError):
            raise state.error  # (the position of an undecodable record is that record)
        if state.reset_to is None and state.fetch_offset < 0:
            raise NoOffsetForPartitionError(tp)
        if state.reset_to is not None:
            which, generation = state.reset_to, state.generation
            offsets = await self._list_offsets({tp: which})
            state = self._state(tp)
            if state.reset_to == which and state.generation == generation:
                self._set_position(state, offsets[tp], -1)
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
        """The log start offset of each partition (assigned or not).

        Raises `UnknownTopicOrPartitionError` for a partition that does not exist
        (after retrying for `request_timeout_ms`: it may be being created)."""
        self._check_open()
        tps = _partition_args([partitions], "beginning_offsets()")
        return await self._list_offsets({tp: EARLIEST for tp in tps})

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset after the last readable
        record); errors as `beginning_offsets`."""
        self._check_open()
        tps = _partition_args([partitions], "end_offsets()")
        return await self._list_offsets({tp: LATEST for tp in tps})

    async def topics(self) -> set[str]:
        """Every topic in the cluster (kafka-python's `topics()`)."""
        self._check_open()
        assert self._conn is not None
        view = await self._conn.fetch_view([])
        return set(view.topics) - {
            name for name, info in view.topics.items() if info.error_code != ErrorCode.NONE
        }

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition ids of `topic`, or None when it does not exist."""
        self._check_open()
        assert self._conn is not None
        check_topic_name(topic)
        found = self._conn.view.partitions_for(topic)
        if found is None:
            found = (await self._conn.fetch_view([topic])).partitions_for(topic)
        return None if found is None else set(found)

    async def _list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets grouped by leader, retrying retriable errors until the request
        timeout; raises the first definite error, or why the rest could not be found."""
        assert self._conn is not None
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        remaining = {TopicPartition(tp.topic, tp.partition): ts for tp, ts in wanted.items()}
        found: dict[TopicPartition, int] = {}
        last_error: BaseException | None = None
        while remaining:
            got, errors = await self._list_offsets_once(remaining)
            for tp, offset in got.items():
                found[tp] = offset
                del remaining[tp]
            for error in errors.values():
                if isinstance(error, MiniKafkaClientError) and not error.retriable:
                    raise error
                last_error = error
            if not remaining:
                break
            if time.monotonic() >= deadline:
                raise _missing_partition_error(self._conn.view, remaining, last_error)
            with contextlib.suppress(KafkaConnectionError):
                await self._conn.refresh({tp.topic for tp in remaining})
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        return found

    async def _list_offsets_once(
        self, wanted: dict[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, BaseException]]:
        """One ListOffsets per leader of `wanted`: (offsets found, errors by partition).
        Partitions without a known leader are in neither."""
        assert self._conn is not None
        found: dict[TopicPartition, int] = {}
        errors: dict[TopicPartition, BaseException] = {}
        view = self._conn.view
        if any(view.leader(*tp) is None for tp in wanted):
            with contextlib.suppress(KafkaConnectionError):
                await self._conn.refresh({tp.topic for tp in wanted})
            view = self._conn.view
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            leader = view.leader(*tp)
            if leader is not None:
                by_leader.setdefault(leader.broker_id, []).append(tp)
        for broker_id, tps in by_leader.items():
            request = broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic=tp.topic,
                        partition=tp.partition,
                        timestamp_ms=wanted[tp],
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
                error = KafkaConnectionError(
                    f"ListOffsets to broker {broker_id}: {exc.code().name} {exc.details()}"
                )
                errors.update(dict.fromkeys(tps, error))
                continue
            for part in response.partitions:
                tp = TopicPartition(part.topic, part.partition)
                if tp not in wanted:
                    continue
                if part.error_code == ErrorCode.NONE:
                    found[tp] = part.offset
                else:
                    errors[tp] = from_response(
                        part.error_code,
                        part.error_message,
                        context=f"ListOffsets {tp.topic}-{tp.partition}",
                    )
        return found, errors

    def _leader_epoch(self, tp: TopicPartition) -> int:
        assert self._conn is not None
        info = self._conn.view.partition(tp.topic, tp.partition)
        return info.leader_epoch if info is not None else -1

    async def _reset_positions(self, tps: Sequence[TopicPartition]) -> None:
        """Look up the offsets of partitions waiting for a reset, in one attempt: one
        that fails (e.g. its topic does not exist yet) must not hold up the others;
        the fetch loop tries it again after `retry_backoff_ms`."""
        wanted: dict[TopicPartition, int] = {}
        for tp in tps:
            state = self._assignment.get(tp)
            if state is not None and state.reset_to is not None:
                wanted[tp] = state.reset_to
        if not wanted:
            return
        offsets, errors = await self._list_offsets_once(wanted)
        for tp, offset in offsets.items():
            state = self._assignment.get(tp)
            if state is not None and state.reset_to == wanted[tp]:
                self._set_position(state, offset, -1)
        for tp, error in errors.items():
            if isinstance(error, MiniKafkaClientError) and error.retriable:
                logger.debug("offset reset of %s deferred: %s", tp, error)
                continue
            state = self._assignment.get(tp)
            if state is not None and state.reset_to == wanted[tp]:
                state.error = error

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
            next_retry = self._check_missing_topics(now)
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
                planned = {tp: self._assignment[tp] for tp in tps}
                for state in planned.values():
                    state.in_flight = True
                task = asyncio.create_task(self._fetch(broker_id, planned))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            wait_s = min(max(next_retry - time.monotonic(), 0.0), 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_fetcher.wait(), wait_s)

    def _check_missing_topics(self, now: float) -> float:
        """While a subscribed topic is not in metadata (not created yet), ask for
        metadata again with back-off, so the consumer picks it up soon after it is
        created (as Kafka's consumer does) rather than at the next `metadata_max_age_ms`.
        Returns when to check again (inf: nothing missing)."""
        assert self._conn is not None
        if self._user_assigned or not self._subscription:
            return float("inf")
        view = self._conn.view
        if all(view.partitions_for(topic) is not None for topic in self._subscription):
            self._missing_topics_backoff_s = self.retry_backoff_ms / 1000
            return float("inf")
        if now >= self._missing_topics_at:
            self._request_metadata()
            pause = min(max(self._missing_topics_backoff_s, 0.05), MISSING_TOPIC_BACKOFF_MAX_S)
            self._missing_topics_at = now + pause
            self._missing_topics_backoff_s = pause * 2
        return self._missing_topics_at

    async def _fetch(self, broker_id: int, planned: dict[TopicPartition, _PartitionState]) -> None:
        assert self._conn is not None
        # Partitions unassigned (or unassigned and assigned again: a new state with its
        # own fetch) since the fetch was planned are left out.
        tps = [tp for tp, state in planned.items() if self._assignment.get(tp) is state]
        generations = {tp: planned[tp].generation for tp in tps}
        try:
            if tps:
                await self._fetch_inner(broker_id, tps, generations, planned)
        finally:
            for state in planned.values():
                state.in_flight = False
            self._wake()

    async def _fetch_inner(
        self,
        broker_id: int,
        tps: list[TopicPartition],
        generations: dict[TopicPartition, int],
        planned: dict[TopicPartition, _PartitionState],
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
            if (
                current is None
                or current is not planned.get(tp)
                or generations.get(tp) != current.generation
            ):
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
        except Exception:  # a deserializer failed: find the record, keep the ones before
            self._stop_at_undecodable(tp, state, data, start)
            return
        state.records = fetched.records
        state.records_index = 0
        if not state.raw:
            self._wake()

    def _stop_at_undecodable(
        self, tp: TopicPartition, state: _PartitionState, data: bytes, start: int
    ) -> None:
        """A deserializer raised on a record of `data`: hand out the records before it,
        then stop at it with a `RecordDeserializationError` (until the user seeks)."""
        plain = decode_fetched(tp.topic, tp.partition, data, position=start).records
        good: list[ConsumerRecord] = []
        for record in plain:
            try:
                good.append(self._deserialized(record))
            except Exception as exc:
                if good:  # deliver these first; the failing record comes next
                    state.records = good
                    state.records_index = 0
                    state.raw.insert(0, (data, record.offset))
                else:
                    state.raw.insert(0, (data, record.offset))
                    state.error = RecordDeserializationError(tp, record.offset, exc)
                return
        state.records = good  # every record decodes now (a flaky deserializer)
        state.records_index = 0

    def _deserialized(self, record: ConsumerRecord) -> ConsumerRecord:
        key, value = record.key, record.value
        if self._key_deserializer is not None and key is not None:
            key = self._key_deserializer(key)
        if self._value_deserializer is not None and value is not None:
            value = self._value_deserializer(value)
        return msgspec.structs.replace(record, key=key, value=value)

    def _raise_pending_error(self) -> None:
        """Raise the first partition error. Truncation, out-of-range and corruption stay
        until the user seeks; other errors are raised once and the fetch is retried."""
        for tp, state in self._assignment.items():
            error = state.error
            if error is not None:
                if not isinstance(
                    error,
                    LogTruncationError
                    | OffsetOutOfRangeError
                    | CorruptRecordError
                    | RecordDeserializationError,
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
        _check_poll_args(timeout_ms, max_records)
        if not self._subscription and not self._user_assigned:
            raise IllegalStateError(
                "the consumer is not subscribed to any topic nor assigned any partition: "
                "call subscribe() or assign() first"
            )
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
            self._raise_pending_error()  # one found while decoding
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
        wanted = set(_partition_args(partitions, "getmany()"))
        for tp in wanted:
            self._state(tp)
        saved = self._assignment
        try:
            self._assignment = {tp: s for tp, s in saved.items() if tp in wanted}
            return self._take(limit)
        finally:
            self._assignment = saved

    def _generations(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._assignment[tp].generation for tp in tps if tp in self._assignment}

    def _unread(
        self, records: Sequence[ConsumerRecord], generations: dict[TopicPartition, int]
    ) -> None:
        """Give back records handed out but not delivered to the user (the sync
        iterator's read-ahead), so they are the next ones returned and `position`
        counts them as unread. A partition sought (or reset) since then keeps its
        new position instead."""
        by_tp: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in records:
            by_tp.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        for tp, unread in by_tp.items():
            state = self._assignment.get(tp)
            if state is None or state.generation != generations.get(tp):
                continue
            state.records = unread + state.records[state.records_index :]
            state.records_index = 0

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
        """Records until `consumer_timeout_ms` passes without one, or the consumer
        is stopped (as aiokafka's `async for` ends)."""
        idle_since = time.monotonic()
        while not self._closed:
            try:
                batch = await self.getmany(timeout_ms=min(1000, int(self.consumer_timeout_ms)))
            except ConsumerStoppedError:
                return
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

    Iteration reads ahead a batch of records; `poll`, `position`, `seek` and the
    other calls first give back what the iterator has not yielded yet, so mixing
    iteration with them never skips a record.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        **config: Any,
    ) -> None:
        check_config_keys("Consumer", config, AsyncConsumer.__init__)
        self._thread = LoopThread(
            "minikafka-consumer",
            closed_error=lambda: ConsumerStoppedError("the consumer is closed"),
        )
        try:
            self._inner: AsyncConsumer = self._thread.run(
                self._make(topics, bootstrap_servers, config)
            )
        except BaseException:
            self._thread.stop()
            raise
        self._iter_buffer: list[ConsumerRecord] = []
        self._iter_index = 0
        self._iter_generations: dict[TopicPartition, int] = {}
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

    def _give_back(self) -> None:
        """Return the iterator's read-ahead to the consumer (see the class docstring)."""
        if self._iter_index < len(self._iter_buffer):
            unread = self._iter_buffer[self._iter_index :]
            generations = self._iter_generations
            self._call(lambda: self._inner._unread(unread, generations))
        self._iter_buffer = []
        self._iter_index = 0

    def subscribe(self, topics: str | Iterable[str]) -> None:
        self._give_back()
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        self._call(lambda: self._inner.subscribe(topic_list))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._give_back()
        tps = partitions if isinstance(partitions, str | TopicPartition) else list(partitions)
        self._call(lambda: self._inner.assign(tps))

    def unsubscribe(self) -> None:
        self._give_back()
        self._call(self._inner.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._call(self._inner.assignment)
        return result

    def subscription(self) -> set[str]:
        result: set[str] = self._call(self._inner.subscription)
        return result

    def topics(self) -> set[str]:
        return self._thread.run(self._inner.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._thread.run(self._inner.partitions_for_topic(topic))

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """`{TopicPartition: [ConsumerRecord]}`, waiting up to `timeout_ms` for records."""
        _check_poll_args(timeout_ms, max_records)
        self._give_back()
        return self._thread.run(self._inner.getmany(timeout_ms=timeout_ms, max_records=max_records))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._give_back()
        self._call(lambda: self._inner.seek(partition, offset))

    def seek_to_beginning(self, *partitions: PartitionArg) -> None:
        self._give_back()
        self._thread.run(self._inner.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: PartitionArg) -> None:
        self._give_back()
        self._thread.run(self._inner.seek_to_end(*partitions))

    def position(self, partition: TopicPartition) -> int:
        self._give_back()
        return self._thread.run(self._inner.position(partition))

    def highwater(self, partition: TopicPartition) -> int | None:
        result: int | None = self._call(lambda: self._inner.highwater(partition))
        return result

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = partitions if isinstance(partitions, str | TopicPartition) else list(partitions)
        return self._thread.run(self._inner.beginning_offsets(tps))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = partitions if isinstance(partitions, str | TopicPartition) else list(partitions)
        return self._thread.run(self._inner.end_offsets(tps))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; `StopIteration` after `consumer_timeout_ms` without one,
        or once the consumer is closed."""
        if self._iter_index < len(self._iter_buffer):
            record = self._iter_buffer[self._iter_index]
            self._iter_index += 1
            return record
        if self._closed:
            raise StopIteration
        idle_since = time.monotonic()
        limit_ms = self._inner.consumer_timeout_ms
        while True:
            wait_ms = int(min(1000.0, max(limit_ms - (time.monotonic() - idle_since) * 1000, 0)))
            try:
                batch, generations = self._thread.run(self._read_ahead(wait_ms))
            except ConsumerStoppedError:
                raise StopIteration from None
            records = [r for recs in batch.values() for r in recs]
            if records:
                self._iter_buffer = records
                self._iter_index = 1
                self._iter_generations = generations
                return records[0]
            if (time.monotonic() - idle_since) * 1000 >= limit_ms:
                raise StopIteration

    async def _read_ahead(
        self, wait_ms: int
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], dict[TopicPartition, int]]:
        batch = await self._inner.getmany(timeout_ms=wait_ms)
        return batch, self._inner._generations(batch)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._iter_buffer = []
        self._iter_index = 0
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
