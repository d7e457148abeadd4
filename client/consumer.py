"""The consumer facade: `AsyncConsumer` (asyncio); the sync `Consumer` runs one on a
private loop thread (`client.sync_consumer`).

What the consumer reads is `client.subscription` (subscription or assignment, and an
explicit fetch status per partition); the `Fetcher` (`client.fetcher`) looks positions
up and keeps fetches in flight, deciding with the PURE rules of `client.offset_rules`;
`client.delivery` decodes and hands records out; `client.offset_lookup` answers offset
queries (ListOffsets, retried while a new leader has none yet). `client.consumer_runtime`
wires those parts together at `start()`; `client.consumer_calls` holds the position and
offset calls (over `client.positions`); `client.consumer_config` checks the arguments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from client.consumer_calls import PositionCalls, iterate_records
from client.consumer_config import (
    ConsumerConfig,
    check_poll_args,
    topic_names,
)
from client.consumer_group_config import commit_offsets, group_settings
from client.consumer_runtime import ConsumerRuntime
from client.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigurationError,
)
from client.group import ConsumerRebalanceListener, GroupMember
from client.offset_rules import OffsetReset, reset_target
from client.positions import ConsumerPositions
from client.records import ConsumerRecord, Deserializer, TopicPartition
from client.security import client_tls
from client.subscription import SubscriptionState
from client.transport import ClientPorts

__all__ = ["AsyncConsumer"]


class AsyncConsumer(PositionCalls):
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
        ports: ClientPorts | None = None,
    ) -> None:
        """`ports` (`client.transport.ClientPorts`; None: production's): the stub factory
        and monotonic clock of every request, deadline and timer of the consumer."""
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
        #: Monotonic seconds for the connections, the fetcher, the delivery, the metrics
        #: and the group (tests may replace it before `start()`): the `ports` clock if given.
        self.clock: Callable[[], float] = time.monotonic if ports is None else ports.clock_s
        self._stub_factory = None if ports is None else ports.stub_factory
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
        self._runtime: ConsumerRuntime | None = None
        self._started = False
        self._closed = False

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer was stopped; create a new one")
        if self._started:
            return
        runtime = self._runtime = ConsumerRuntime.create(
            config=self.config,
            ports=ClientPorts(stub_factory=self._stub_factory, clock_s=self.clock),
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            tls=self.tls,
            subscription=self.subscription_state,
            deserializers=self.deserializers,
            on_metadata=self._update_subscription_assignment,
        )
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

    def _update_subscription_assignment(self) -> None:
        if self._runtime is not None:
            topics = self.subscription_state.topics
            self.subscription_state.update_assignment(self._runtime.conn.view)
            if self._group is not None and self.subscription_state.topics != topics:
                self._group.wake()  # a pattern matched new topics: tell the coordinator
            self._wake()

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
        found = await member.offsets.fetch_committed([TopicPartition(*partition)])
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
            # `on_poll` may wait (an auto-commit, a committed-offset lookup): a close
            # begun meanwhile must not see this poll take records after it read the
            # positions it commits.
            self._check_not_closed()
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
        """Records until `consumer_timeout_ms` passes without one, or the consumer
        is stopped (as aiokafka's `async for` ends)."""
        return iterate_records(self.getmany, self.consumer_timeout_ms, self.clock)
