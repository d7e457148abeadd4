"""The consumer facade: `AsyncConsumer` (asyncio); the sync `Consumer` runs one on a
private loop thread (`client.sync_consumer`).

What the consumer reads is `client.subscription` (subscription or assignment, and an
explicit fetch status per partition); the `Fetcher` (`client.fetcher`) looks positions
up and keeps fetches in flight, deciding with the PURE rules of `client.offset_rules`;
`client.delivery` decodes and hands records out; `client.offset_lookup` answers offset
queries (ListOffsets, retried while a new leader has none yet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, NamedTuple

from client.consumer_config import (
    ConsumerConfig,
    PartitionArg,
    check_poll_args,
    partition_args,
    topic_names,
)
from client.delivery import RecordDelivery
from client.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigurationError,
)
from client.fetcher import Fetcher
from client.group import ConsumerRebalanceListener, GroupMember, GroupSettings
from client.metrics import ConsumerMetrics
from client.offset_rules import (
    EARLIEST,
    LATEST,
    OffsetReset,
    reset_target,
)
from client.positions import ConsumerPositions
from client.records import (
    ConsumerRecord,
    Deserializer,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from client.security import client_tls
from client.subscription import SubscriptionState
from client.transport import BrokerConnections, check_number

__all__ = ["AsyncConsumer"]


def group_settings(
    *,
    group_id: str | None,
    group_instance_id: str | None,
    enable_auto_commit: bool,
    auto_commit_interval_ms: int,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    max_poll_interval_ms: int,
    client_id: str,
) -> GroupSettings | None:
    """The checked group settings, or None without `group_id` (today's behaviour)."""
    if group_id is None:
        if group_instance_id is not None:
            raise KafkaConfigurationError("group_instance_id needs group_id")
        return None
    if not isinstance(group_id, str) or not group_id:
        raise KafkaConfigurationError(f"group_id must be a non-empty str, got {group_id!r}")
    if group_instance_id is not None and (
        not isinstance(group_instance_id, str) or not group_instance_id
    ):
        raise KafkaConfigurationError(
            f"group_instance_id must be a non-empty str, got {group_instance_id!r}"
        )
    if not isinstance(enable_auto_commit, bool):
        raise KafkaConfigurationError(
            f"enable_auto_commit must be a bool, got {enable_auto_commit!r}"
        )
    for name, value in (
        ("auto_commit_interval_ms", auto_commit_interval_ms),
        ("session_timeout_ms", session_timeout_ms),
        ("heartbeat_interval_ms", heartbeat_interval_ms),
        ("max_poll_interval_ms", max_poll_interval_ms),
    ):
        check_number(name, value, minimum=1, integral=True)
    return GroupSettings(
        group_id=group_id,
        group_instance_id=group_instance_id,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        max_poll_interval_ms=max_poll_interval_ms,
        enable_auto_commit=enable_auto_commit,
        auto_commit_interval_ms=auto_commit_interval_ms,
        client_id=client_id,
    )


def commit_offsets(offsets: dict[TopicPartition, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    """`commit()`'s argument checked: each value an offset (int >= 0) or an
    `OffsetAndMetadata`."""
    if not isinstance(offsets, dict):
        raise TypeError(f"offsets must be a dict {{TopicPartition: offset}}, got {offsets!r}")
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        meta = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        if not isinstance(meta.offset, int) or isinstance(meta.offset, bool) or meta.offset < 0:
            raise ValueError(f"the offset to commit for {tp} must be an int >= 0, got {value!r}")
        result[TopicPartition(*tp)] = meta
    return result


class _Runtime(NamedTuple):
    """The parts of a started consumer."""

    conn: BrokerConnections
    fetcher: Fetcher
    delivery: RecordDelivery
    metrics: ConsumerMetrics

    @classmethod
    def create(cls, consumer: AsyncConsumer) -> _Runtime:
        config, clock = consumer.config, consumer.clock
        conn = BrokerConnections(
            consumer.bootstrap_servers,
            request_timeout_ms=int(config.request_timeout_ms),
            retry_backoff_ms=int(config.retry_backoff_ms),
            metadata_max_age_ms=int(config.metadata_max_age_ms),
            client_id=consumer.client_id,
            tls=consumer.tls,
        )
        metrics = ConsumerMetrics(clock() * 1000)
        fetcher = Fetcher(
            settings=config,
            conn=conn,
            subscription=consumer.subscription_state,
            metrics=metrics,
            clock=clock,
            on_metadata=consumer._update_subscription_assignment,
        )
        key_deserializer, value_deserializer = consumer.deserializers
        delivery = RecordDelivery(
            consumer.subscription_state,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            retry_backoff_ms=config.retry_backoff_ms,
            metrics=metrics,
            wake_fetcher=fetcher.wake,
            clock=clock,
        )
        return cls(conn, fetcher, delivery, metrics)


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
        isolation_level: str = "read_uncommitted",
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_check_hostname: bool = True,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
    ) -> None:
        self.tls = client_tls(
            security_protocol=security_protocol,
            ssl_cafile=ssl_cafile,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_check_hostname=ssl_check_hostname,
        )
        self.config = config = ConsumerConfig.create(
            auto_offset_reset=auto_offset_reset,
            reset_on_truncation=reset_on_truncation,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records,
            client_rack=client_rack,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            consumer_timeout_ms=consumer_timeout_ms,
            isolation_level=isolation_level,
        )
        self.consumer_timeout_ms = config.consumer_timeout_ms
        #: Monotonic seconds for the fetcher, the delivery and the metrics (tests may
        #: replace it before `start()`).
        self.clock: Callable[[], float] = time.monotonic
        self.deserializers = (key_deserializer, value_deserializer)
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.subscription_state = SubscriptionState(
            topic_names(topics, "AsyncConsumer"), reset_target(config.auto_offset_reset)
        )
        self._positions = ConsumerPositions(self.subscription_state, self._wake)
        self.group_settings = group_settings(
            group_id=group_id,
            group_instance_id=group_instance_id,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            client_id=client_id,
        )
        self.subscription_state.group_managed = self.group_settings is not None
        #: The group membership (with `group_id`, once started).
        self._group: GroupMember | None = None
        self._listener: ConsumerRebalanceListener | None = None
        #: The parts that exist once started.
        self._runtime: _Runtime | None = None
        self._started = False
        self._closed = False

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer was stopped; create a new one")
        if self._started:
            return
        runtime = self._runtime = _Runtime.create(self)
        try:
            await runtime.conn.refresh(self.subscription_state.topics)
        except BaseException:
            await runtime.conn.close()
            raise
        self._positions.conn, self._positions.offsets = runtime.conn, runtime.fetcher.offsets
        self._update_subscription_assignment()
        runtime.fetcher.start()
        if self.group_settings is not None:
            self._group = GroupMember(
                self.group_settings,
                conn=runtime.conn,
                subscription=self.subscription_state,
                wake_fetcher=runtime.fetcher.wake,
            )
            if self._listener is not None:
                self._group.listener = self._listener
            self._group.start()
        self._started = True

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._group is not None:
            await self._group.close()
        if self._runtime is not None:
            await self._runtime.fetcher.close()
            await self._runtime.conn.close()

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

    def _wake(self) -> None:
        if self._runtime is not None:
            self._runtime.fetcher.wake()

    # ---- assignment (see `client.subscription`) --------------------------------------

    def subscribe(
        self,
        topics: str | Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Consume `topics` (a str or a list): without `group_id` every partition of
        them (refreshed with metadata); with `group_id` the partitions the group's
        coordinator assigns this member, `listener` (a `ConsumerRebalanceListener`) being
        told of each change. `pattern` (a regex, instead of topics) subscribes to every
        topic whose whole name it matches, internal `__` topics excepted, as metadata
        shows them (refreshed every `metadata_max_age_ms`). An empty list unsubscribes.
        `IllegalStateError` after `assign()` (`unsubscribe()` first)."""
        self._check_not_closed()
        if pattern is not None and topics not in ((), [], None):
            raise KafkaConfigurationError("subscribe() takes topics or a pattern, not both")
        if listener is not None:
            if self.group_settings is None:
                raise IllegalStateError("a rebalance listener needs group_id")
            if not isinstance(listener, ConsumerRebalanceListener):
                raise TypeError(
                    f"listener must be a ConsumerRebalanceListener, got {type(listener).__name__}"
                )
            self._listener = listener
            if self._group is not None:
                self._group.listener = listener
        if pattern is not None:
            self.subscription_state.subscribe_pattern(pattern)
            if self._runtime is not None:
                self._runtime.conn.track_all_topics()
                self._runtime.fetcher.track((), subscribed=True)
        elif self.subscription_state.subscribe_to(topics) and self._runtime is not None:
            self._runtime.fetcher.track(self.subscription_state.topics, subscribed=True)
            self._update_subscription_assignment()
        if self._group is not None:
            self._group.wake()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (a list of `TopicPartition`); an empty list
        unassigns everything. `IllegalStateError` when subscribed to topics (given to the
        constructor or to `subscribe()`: `unsubscribe()` first)."""
        self._check_not_closed()
        wanted = self.subscription_state.assign_partitions(partitions)
        self._wake()
        if wanted and self._runtime is not None:
            self._runtime.fetcher.track({tp.topic for tp in wanted}, subscribed=False)

    def unsubscribe(self) -> None:
        """Drop the subscription and every assigned partition (after which either
        `subscribe()` or `assign()` may be called)."""
        self._check_not_closed()
        self.subscription_state.unsubscribe()
        self._wake()
        if self._group is not None:
            self._group.wake()

    def assignment(self) -> set[TopicPartition]:
        return set(self.subscription_state.assignment)

    def subscription(self) -> set[str]:
        return set(self.subscription_state.topics)

    def _update_subscription_assignment(self) -> None:
        if self._runtime is not None:
            topics = self.subscription_state.topics
            self.subscription_state.update_assignment(self._runtime.conn.view)
            if self._group is not None and self.subscription_state.topics != topics:
                self._group.wake()  # a pattern matched new topics: tell the coordinator
            self._wake()

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning records of these (assigned) partitions; their
        position and what was fetched already stay for `resume()`."""
        self._check_not_closed()
        self.subscription_state.pause(partition_args(partitions, "pause()"))

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return records of these paused partitions again."""
        self._check_not_closed()
        self.subscription_state.resume(partition_args(partitions, "resume()"))
        self._wake()

    def paused(self) -> set[TopicPartition]:
        """The partitions paused with `pause()`."""
        return self.subscription_state.paused()

    # ---- positions (see `client.positions`) -----------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make `offset` the next offset `getmany` / `poll` returns for `partition`."""
        self._check_not_closed()
        self._positions.seek(partition, offset)

    async def seek_to_beginning(self, *partitions: PartitionArg) -> None:
        self._check_open()
        await self._positions.seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: PartitionArg) -> None:
        self._check_open()
        await self._positions.seek_to(LATEST, partitions)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record `getmany` / `poll` returns for `partition`.

        Looks the offset up (per `auto_offset_reset`) when the partition has none
        yet; raises the partition's error (e.g. `UnknownTopicOrPartitionError` when
        it does not exist) if that does not succeed within `request_timeout_ms`.
        At a damaged batch or a record that does not deserialize, it is that offset.
        """
        self._check_open()
        return await self._positions.position(partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last fetch (None before one)."""
        return self._positions.highwater(partition)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The log start offset of each partition (assigned or not). Raises
        `UnknownTopicOrPartitionError` for a partition that does not exist (after
        retrying for `request_timeout_ms`: it may be being created)."""
        self._check_open()
        return await self._positions.offsets_at(EARLIEST, partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset after the last readable
        record); errors as `beginning_offsets`. A new leader that has not caught up
        yet answers OFFSET_NOT_AVAILABLE: asked again until `request_timeout_ms`."""
        self._check_open()
        return await self._positions.offsets_at(LATEST, partitions)

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the earliest offset whose record timestamp is at least
        the given one (ms since the epoch), with that timestamp; None when no record
        is that recent (kafka-python's `offsets_for_times`)."""
        self._check_open()
        return await self._positions.offsets_for_times(timestamps)

    async def topics(self) -> set[str]:
        """Every topic in the cluster (kafka-python's `topics()`)."""
        self._check_open()
        return await self._positions.topics()

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition ids of `topic`, or None when it does not exist."""
        self._check_open()
        return await self._positions.partitions_for_topic(topic)

    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's `metrics()`: `{"consumer-fetch-manager-metrics": {name: value}}`
        with records and bytes consumed (totals and per second over the last 30 s),
        fetches and their latency (ms), and failed fetches."""
        runtime = self._runtime
        report = {} if runtime is None else runtime.metrics.report(self.clock() * 1000)
        return {"consumer-fetch-manager-metrics": report}

    # ---- committed offsets (consumer groups) -----------------------------------------

    def _group_member(self) -> GroupMember:
        self._check_open()
        if self._group is None:
            raise IllegalStateError("committing offsets needs group_id")
        return self._group

    async def commit(self, offsets: dict[TopicPartition, Any] | None = None) -> None:
        """Commit `offsets` ({TopicPartition: offset or OffsetAndMetadata}; default: the
        position of every assigned partition, i.e. after the records poll returned) and
        wait until the coordinator has them replicated. `CommitFailedError` when this
        member was fenced (its partitions may belong to another member now)."""
        member = self._group_member()
        await member.commit(None if offsets is None else commit_offsets(offsets))

    def commit_async(self, offsets: dict[TopicPartition, Any] | None = None) -> asyncio.Task[None]:
        """`commit` without waiting: a task to await (or not) for its outcome."""
        self._group_member()
        return asyncio.ensure_future(self.commit(offsets))

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of `partition` (None: none). A fencing or
        coordinator error is raised, never answered as None."""
        member = self._group_member()
        found = await member.fetch_committed([TopicPartition(*partition)])
        value = found[TopicPartition(*partition)]
        return None if value is None else value.offset

    # ---- records --------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned partitions (or only `partitions`), waiting up to
        `timeout_ms` for some to arrive; `{}` when none did. A partition stopped at an
        error (truncation, a damaged batch, a record that does not deserialize...)
        raises it when reached before any record was found elsewhere, until a seek."""
        self._check_open()
        assert self._runtime is not None
        check_poll_args(timeout_ms, max_records)
        if self._group is not None:
            await self._group.on_poll()
        only = self.subscription_state.polled(partitions)
        return await self._runtime.delivery.take_within(
            max_records or self.config.max_poll_records,
            only,
            timeout_ms / 1000,
            self._runtime.fetcher.data_ready,
            lambda: self._closed,
        )

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
