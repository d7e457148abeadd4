"""The consumer's fetch loop: position lookups, Fetch requests, applying the answers.

The loop sends one Fetch per broker for every fetchable partition (see
`PartitionState.fetchable`) led by (or, with `client_rack`, replicated in the same rack
on) that broker, so the next fetch travels while the user processes the previous one,
and a long poll on an idle partition never holds back a busy one. Responses are kept as
raw batch bytes (`client.delivery` decodes them when handing records out);
`client.fetch_answers` applies each partition's answer.

Each fetch carries the epoch of the last fetched batch, so the broker can answer with a
`diverging_epoch` when the log was truncated under the consumer (KIP-320). Time comes
from `clock` (monotonic seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Final

import grpc
import grpc.aio

from client.consumer_config import ConsumerConfig
from client.errors import (
    MiniKafkaClientError,
)
from client.fetch_answers import FetchAnswers, refused_fetch
from client.metadata import BrokerInfo
from client.metrics import ConsumerMetrics
from client.offset_lookup import OffsetLookup
from client.records import TopicPartition
from client.subscription import FetchStatus, PartitionState, SubscriptionState
from client.transport import BrokerConnections, LeaderMoved, await_unless_moved
from minikafka.v1 import broker_pb2

logger = logging.getLogger(__name__)

#: Undelivered fetch responses buffered per partition before its fetching pauses. Two
#: let the next fetch travel as soon as a response arrives, while that one is decoded
#: and handed out; a partition buffers at most about 2 x `max_partition_fetch_bytes`.
MAX_BUFFERED_RESPONSES: Final = 2
#: A fetch outstanding this much past `fetch_max_wait_ms` starts checks for a moved leader.
FETCH_STALL_MARGIN_S: Final = 0.5
#: Longest pause between metadata requests while a subscribed topic does not exist yet.
MISSING_TOPIC_BACKOFF_MAX_S: Final = 1.0


class Fetcher:
    """Fetches for one consumer (on its event loop); `data_ready` is set when records
    or an error arrived."""

    def __init__(
        self,
        *,
        settings: ConsumerConfig,
        conn: BrokerConnections,
        subscription: SubscriptionState,
        metrics: ConsumerMetrics,
        clock: Callable[[], float],
        on_metadata: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.conn = conn
        self.subscription = subscription
        self.offsets = OffsetLookup(
            conn,
            request_timeout_ms=settings.request_timeout_ms,
            retry_backoff_ms=settings.retry_backoff_ms,
            clock=clock,
        )
        self.metrics = metrics
        self.clock = clock
        #: Called after every metadata refresh (the subscription may have new partitions).
        self.on_metadata = on_metadata
        self.wakeup = asyncio.Event()
        self.data_ready = asyncio.Event()
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._node_backoff: dict[int, float] = {}
        self._metadata_task: asyncio.Task[None] | None = None
        self._run_task: asyncio.Task[None] | None = None
        #: While a subscribed topic is missing from metadata: when to ask again, and
        #: the pause after that (doubling up to `MISSING_TOPIC_BACKOFF_MAX_S`).
        self.missing_topics_at = 0.0
        self._missing_topics_backoff_s = settings.retry_backoff_ms / 1000
        #: While a fetchable partition has no leader: when to ask for metadata again.
        self._missing_leader_at = 0.0
        self.answers = FetchAnswers(
            settings=settings,
            metrics=metrics,
            clock=clock,
            request_metadata=self.request_metadata,
            wake=self.wake,
        )

    def start(self) -> None:
        self._run_task = asyncio.create_task(self.run(), name="minikafka-fetcher")

    def wake(self) -> None:
        self.wakeup.set()

    async def close(self) -> None:
        self.closed = True
        self.data_ready.set()
        tasks = [t for t in (self._run_task, self._metadata_task) if t is not None]
        tasks.extend(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- metadata -----------------------------------------------------------------------

    def track(self, topics: Iterable[str], *, subscribed: bool) -> None:
        """Newly subscribed or assigned topics: ask for their metadata now (and, when
        subscribed, look for ones that do not exist yet without waiting)."""
        self.conn.add_topics(topics)
        if subscribed:
            self.missing_topics_at = 0.0
        self.request_metadata()
        self.wake()

    def request_metadata(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = asyncio.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        try:
            await self.conn.refresh()
        except MiniKafkaClientError as exc:
            logger.warning("metadata refresh failed: %s", exc)
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
        self.on_metadata()
        self.wake()

    def _check_missing_topics(self, now: float) -> float:
        """While a subscribed topic is not in metadata (not created yet), ask for
        metadata again with back-off, so the consumer picks it up soon after it is
        created (as Kafka's consumer does) rather than at the next `metadata_max_age_ms`.
        Returns when to check again (inf: nothing missing)."""
        subscription = self.subscription
        if subscription.user_assigned or not subscription.topics:
            return float("inf")
        view = self.conn.view
        if all(view.partitions_for(topic) is not None for topic in subscription.topics):
            self._missing_topics_backoff_s = self.settings.retry_backoff_ms / 1000
            return float("inf")
        if now >= self.missing_topics_at:
            self.request_metadata()
            pause = min(max(self._missing_topics_backoff_s, 0.05), MISSING_TOPIC_BACKOFF_MAX_S)
            self.missing_topics_at = now + pause
            self._missing_topics_backoff_s = pause * 2
        return self.missing_topics_at

    def _refresh_for_leaders(self, now: float, backoff_s: float) -> float:
        """A fetchable partition has no leader: ask for metadata at most once per
        `retry_backoff_ms` (Kafka's refresh back-off); each answer wakes the loop, which
        would otherwise ask again at once, as fast as brokers answer, for as long as the
        partition stays offline. Returns when to look again."""
        if now >= self._missing_leader_at:
            self.request_metadata()
            self._missing_leader_at = now + backoff_s
        return self._missing_leader_at

    # ---- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        settings = self.settings
        backoff_s = settings.retry_backoff_ms / 1000
        assignment = self.subscription.assignment
        while not self.closed:
            self.wakeup.clear()
            now = self.clock()
            needs_reset = [
                tp
                for tp, s in assignment.items()
                if s.status is FetchStatus.AWAITING_RESET
                and s.error is None
                and s.retry_after <= now
            ]
            if needs_reset:
                await self._reset_positions(needs_reset)
                for tp in needs_reset:
                    state = assignment.get(tp)
                    if state is not None and state.status is FetchStatus.AWAITING_RESET:
                        state.retry_after = now + backoff_s
            if self.conn.metadata_stale():
                self.request_metadata()
            by_node: dict[int, list[TopicPartition]] = {}
            missing_leader = False
            next_retry = self._check_missing_topics(now)
            for tp, state in assignment.items():
                if not state.fetchable(now, MAX_BUFFERED_RESPONSES):
                    if (state.status is FetchStatus.AWAITING_RESET and state.error is None) or (
                        state.status is FetchStatus.FETCHING and state.retry_after > now
                    ):
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
                next_retry = min(next_retry, self._refresh_for_leaders(now, backoff_s))
            for broker_id, tps in by_node.items():
                planned = {tp: assignment[tp] for tp in tps}
                for state in planned.values():
                    state.in_flight = True
                task = asyncio.create_task(self._fetch(broker_id, planned))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            wait_s = min(max(next_retry - self.clock(), 0.0), 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), wait_s)

    def _fetch_node(self, tp: TopicPartition) -> BrokerInfo | None:
        return self.conn.view.read_replica(tp.topic, tp.partition, self.settings.client_rack)

    async def _reset_positions(self, tps: list[TopicPartition]) -> None:
        """Look up the offsets of partitions waiting for a reset, in one attempt: one
        that fails (e.g. its topic does not exist yet) must not hold up the others;
        the loop tries it again after `retry_backoff_ms`."""
        assignment = self.subscription.assignment
        wanted: dict[TopicPartition, int] = {}
        for tp in tps:
            state = assignment.get(tp)
            if state is not None and state.reset_to is not None:
                wanted[tp] = state.reset_to
        if not wanted:
            return
        found, errors = await self.offsets.lookup_once(wanted)
        for tp, answer in found.items():
            state = assignment.get(tp)
            if state is not None and state.reset_to == wanted[tp]:
                state.seek(answer.offset, -1)
                self.wake()
        for tp, error in errors.items():
            if isinstance(error, MiniKafkaClientError) and error.retriable:
                logger.debug("offset reset of %s deferred: %s", tp, error)
                continue
            state = assignment.get(tp)
            if state is not None and state.reset_to == wanted[tp]:
                state.error = error  # reported once, then looked up again
                self.data_ready.set()

    # ---- one fetch ----------------------------------------------------------------------

    async def _fetch(self, broker_id: int, planned: dict[TopicPartition, PartitionState]) -> None:
        # Partitions unassigned (or unassigned and assigned again: a new state with its
        # own fetch) since the fetch was planned are left out.
        assignment = self.subscription.assignment
        tps = [tp for tp, state in planned.items() if assignment.get(tp) is state]
        generations = {tp: planned[tp].generation for tp in tps}
        try:
            if tps:
                await self._fetch_from(broker_id, tps, generations, planned)
        finally:
            for state in planned.values():
                state.in_flight = False
            self.wake()

    async def _fetch_from(
        self,
        broker_id: int,
        tps: list[TopicPartition],
        generations: dict[TopicPartition, int],
        planned: dict[TopicPartition, PartitionState],
    ) -> None:
        settings = self.settings
        conn = self.conn
        view = conn.view
        broker = view.brokers.get(broker_id)
        if broker is None:
            return
        parts = [
            broker_pb2.FetchPartition(
                topic=tp.topic,
                partition=tp.partition,
                fetch_offset=planned[tp].fetch_offset,
                current_leader_epoch=self.offsets.leader_epoch(tp),
                last_fetched_epoch=planned[tp].fetch_epoch,
                partition_max_bytes=settings.max_partition_fetch_bytes,
            )
            for tp in tps
        ]
        request = broker_pb2.FetchRequest(
            max_wait_ms=int(settings.fetch_max_wait_ms),
            min_bytes=settings.fetch_min_bytes,
            max_bytes=settings.fetch_max_bytes,
            partitions=parts,
        )
        sent_epochs = [(tp, part.current_leader_epoch) for tp, part in zip(tps, parts, strict=True)]
        started = self.clock()
        try:
            response = await await_unless_moved(
                conn.broker_stub(broker).Fetch(request, timeout=settings.request_timeout_ms / 1000),
                expected_s=settings.fetch_max_wait_ms / 1000 + FETCH_STALL_MARGIN_S,
                moved=lambda: conn.view.leader_moved(sent_epochs),
                refresh=self.request_metadata,
            )
        except LeaderMoved:
            logger.info("fetch from broker %s abandoned: a partition got a new leader", broker_id)
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.PERMISSION_DENIED:
                logger.info("fetch from broker %s failed: %s", broker_id, exc.code().name)
                now = self.clock()
                self.metrics.errors.record(1, now * 1000)
                self._node_backoff[broker_id] = now + settings.retry_backoff_ms / 1000
                self.request_metadata()
                return
            # The authorizer refused the request (minikafka.authorization): every partition
            # gets its code, so poll() raises it as any other non-retriable fetch error.
            response = refused_fetch(request, exc.details() or "")
        now = self.clock()
        self.metrics.fetches.record(1, now * 1000)
        self.metrics.latency.record((now - started) * 1000, now * 1000)
        assignment = self.subscription.assignment
        ready = False
        for part in response.partitions:
            tp = TopicPartition(part.topic, part.partition)
            current = assignment.get(tp)
            if (
                current is None
                or current is not planned.get(tp)
                or generations.get(tp) != current.generation
            ):
                continue  # unassigned or sought while the fetch was in flight
            if self.answers.apply(tp, current, part, broker_id):
                ready = True
        if ready:
            self.data_ready.set()
