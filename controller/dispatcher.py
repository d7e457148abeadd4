"""Controller -> broker delivery: per broker, ordered, coalescing, retried until acknowledged.

Each broker has a bounded queue of pending operations (LeaderAndIsr for some partitions,
StopReplica for deleted partitions, a full UpdateMetadata) and one worker task that sends
them in order. Requests are built from the *current* state when they are sent, so queued
operations coalesce: only the newest state of a partition matters (the broker applies a
PartitionState only when its epochs are newer). A failed call is retried with capped
exponential back-off for as long as the broker's session is alive; a broker that dies
loses its queue and gets a full sync when it comes back.

Every request carries the controller id and epoch and the target's current broker epoch.
Caller: the controller's request loop (`submit`, `full_sync`); the heartbeat handler reads
`acked_metadata_offset` to decide whether a fenced broker has caught up.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection
from typing import Final

import grpc

from controller import codec
from controller.election import LogEnd
from controller.model import ClusterState, PartitionKey
from controller.propagation import Propagation
from minikafka.grpc_options import channel_options
from minikafka.tls import TlsMaterial, open_channel
from minikafka.v1 import broker_pb2_grpc, common_pb2

logger = logging.getLogger(__name__)

#: A queue longer than this collapses into one full sync (LeaderAndIsr for every partition
#: of the broker + UpdateMetadata, which lists deleted topics).
PENDING_OPERATIONS_MAX: Final = 64
#: How long the longest-log unclean election waits for each broker's survey answer.
SURVEY_TIMEOUT_S: Final = 2.0


class _LeaderAndIsr:
    def __init__(self, keys: Collection[PartitionKey], new_keys: Collection[PartitionKey]) -> None:
        self.keys = set(keys)
        self.new_keys = set(new_keys)


class _StopReplica:
    def __init__(self, partitions: dict[PartitionKey, int]) -> None:
        self.partitions = dict(partitions)


class _UpdateMetadata:
    pass


_Operation = _LeaderAndIsr | _StopReplica | _UpdateMetadata


class _BrokerLink:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.pending: deque[_Operation] = deque()
        self.in_flight = False  # pending[0] is being delivered
        self.wake = asyncio.Event()
        self.target = ""
        self.channel: grpc.aio.Channel | None = None
        self.stub: broker_pb2_grpc.BrokerControlServiceAsyncStub | None = None
        self.acked_epoch = -1
        self.acked_offset = -1


class Dispatcher:
    """Owns one worker task per broker (started in `task_group`) and its gRPC channel."""

    def __init__(
        self,
        *,
        current_state: Callable[[], ClusterState],
        is_live: Callable[[int], bool],
        task_group: asyncio.TaskGroup,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        max_message_bytes: int,
        on_replicas_offline: Callable[[int, int, list[PartitionKey]], None] | None = None,
        tls: TlsMaterial | None = None,
        connect: Callable[[str], broker_pb2_grpc.BrokerControlServiceAsyncStub] | None = None,
    ) -> None:
        self._tls = tls
        #: The port to the brokers: a stub for a HOST:PORT target. None (production): a
        #: gRPC channel per broker; the simulator (tests/sim) passes in-memory stubs.
        self._connect = connect
        #: Called with (broker id, broker epoch, partitions) a broker answered
        #: KAFKA_STORAGE_ERROR for in LeaderAndIsr (it cannot open their logs).
        self._on_replicas_offline = on_replicas_offline
        self._current_state = current_state
        self._is_live = is_live
        self._task_group = task_group
        self._request_timeout_s = request_timeout_ms / 1000
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        # A restarted broker must be reachable again within a heartbeat or two.
        self._channel_options = channel_options(max_message_bytes=max_message_bytes)
        self._links: dict[int, _BrokerLink] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # ---- called by the request loop -------------------------------------------------------

    def submit(self, plan: Propagation, *, live: Collection[int]) -> None:
        """Queue what `plan` says for the brokers in `live` (sessions alive)."""
        for broker_id, keys in sorted(plan.leader_and_isr.items()):
            if broker_id in live:
                self._push(broker_id, _LeaderAndIsr(keys, keys & plan.new_partitions))
        for broker_id, partitions in sorted(plan.stop_replica.items()):
            if broker_id in live:
                self._push(broker_id, _StopReplica(partitions))
        for broker_id in sorted(plan.full_sync):
            if broker_id in live:
                self.full_sync(broker_id)
        if plan.update_metadata:
            for broker_id in sorted(live):
                self._push(broker_id, _UpdateMetadata())

    def full_sync(self, broker_id: int) -> None:
        """LeaderAndIsr for every partition of the broker, then a full UpdateMetadata."""
        state = self._current_state()
        keys = [key for key, part in state.partitions.items() if broker_id in part.replicas]
        if keys:
            self._push(broker_id, _LeaderAndIsr(keys, ()))
        self._push(broker_id, _UpdateMetadata())

    async def survey_logs(
        self, broker_id: int, keys: Collection[PartitionKey]
    ) -> dict[PartitionKey, LogEnd]:
        """What broker `broker_id` holds of `keys` (last leader epoch, log end offset), for
        an unclean election with the longest-log strategy; {} when it does not answer in
        time (it is then no candidate)."""
        state = self._current_state()
        broker = state.brokers.get(broker_id)
        if broker is None or not keys:
            return {}
        link = self._link(broker_id)
        stub = self._stub(link, f"{broker.host}:{broker.port}")
        try:
            reply = await stub.GetReplicaLogInfo(
                codec.replica_log_info_request(state, broker_epoch=broker.broker_epoch, keys=keys),
                timeout=min(self._request_timeout_s, SURVEY_TIMEOUT_S),
            )
        except grpc.aio.AioRpcError as error:
            logger.info("broker %d did not answer the log survey: %s", broker_id, error.code())
            return {}
        if reply.error_code != common_pb2.NONE:
            logger.info("broker %d refused the log survey: error %d", broker_id, reply.error_code)
            return {}
        return {
            (item.topic, item.partition): LogEnd(
                last_epoch=item.last_epoch,
                log_end_offset=item.log_end_offset,
                broker_epoch=broker.broker_epoch,
            )
            for item in reply.partitions
            if item.error_code == common_pb2.NONE
        }

    def acked_metadata_offset(self, broker_id: int, broker_epoch: int) -> int:
        """The newest metadata offset the broker acknowledged under `broker_epoch` (-1: none)."""
        link = self._links.get(broker_id)
        if link is None or link.acked_epoch != broker_epoch:
            return -1
        return link.acked_offset

    def pending_operations(self, broker_id: int) -> int:
        link = self._links.get(broker_id)
        return 0 if link is None else len(link.pending)

    async def close(self) -> None:
        """Cancel the workers (undelivered operations are dropped) and close the channels."""
        for task in self._tasks:
            task.cancel()
        for link in self._links.values():
            if link.channel is not None:
                await link.channel.close()

    # ---- queueing --------------------------------------------------------------------------

    def _link(self, broker_id: int) -> _BrokerLink:
        link = self._links.get(broker_id)
        if link is None:
            link = _BrokerLink(broker_id)
            self._links[broker_id] = link
            self._tasks.append(
                self._task_group.create_task(self._run(link), name=f"dispatch-broker-{broker_id}")
            )
        return link

    def _push(self, broker_id: int, operation: _Operation) -> None:
        link = self._link(broker_id)
        pending = link.pending
        first_mergeable = 1 if link.in_flight else 0
        if isinstance(operation, _UpdateMetadata):
            # UpdateMetadata is built at send time: one pending copy, kept last, is enough.
            for index in range(len(pending) - 1, first_mergeable - 1, -1):
                if isinstance(pending[index], _UpdateMetadata):
                    del pending[index]
            pending.append(operation)
        elif not self._merge(link, operation, first_mergeable):
            trailing = (
                pending.pop()
                if len(pending) > first_mergeable and isinstance(pending[-1], _UpdateMetadata)
                else None
            )
            pending.append(operation)
            if trailing is not None:
                pending.append(trailing)
        if len(pending) > PENDING_OPERATIONS_MAX:
            self._collapse(link)
        link.wake.set()

    @staticmethod
    def _merge(link: _BrokerLink, operation: _Operation, first_mergeable: int) -> bool:
        """Merge into the last pending operation of the same kind, unless an operation of
        the other partition kind follows it (a delete and a re-create must stay ordered)."""
        for index in range(len(link.pending) - 1, first_mergeable - 1, -1):
            candidate = link.pending[index]
            if isinstance(candidate, _UpdateMetadata):
                continue
            if isinstance(candidate, _LeaderAndIsr) and isinstance(operation, _LeaderAndIsr):
                candidate.keys |= operation.keys
                candidate.new_keys |= operation.new_keys
                return True
            if isinstance(candidate, _StopReplica) and isinstance(operation, _StopReplica):
                candidate.partitions.update(operation.partitions)
                return True
            return False
        return False

    def _collapse(self, link: _BrokerLink) -> None:
        keep = 1 if link.in_flight else 0
        while len(link.pending) > keep:
            link.pending.pop()
        logger.warning(
            "broker %d: more than %d pending metadata operations, collapsing into a full sync",
            link.broker_id,
            PENDING_OPERATIONS_MAX,
        )
        state = self._current_state()
        keys = [key for key, part in state.partitions.items() if link.broker_id in part.replicas]
        if keys:
            link.pending.append(_LeaderAndIsr(keys, ()))
        link.pending.append(_UpdateMetadata())

    # ---- delivery --------------------------------------------------------------------------

    async def _run(self, link: _BrokerLink) -> None:
        """Deliver the broker's operations in order; runs until cancelled."""
        while True:
            await link.wake.wait()
            link.wake.clear()
            while link.pending:
                link.in_flight = True
                try:
                    await self._deliver(link, link.pending[0])
                finally:
                    link.in_flight = False
                link.pending.popleft()

    async def _deliver(self, link: _BrokerLink, operation: _Operation) -> None:
        """Send until acknowledged, or until the broker's session ends (bounded by it)."""
        backoff_ms = self._retry_backoff_ms
        while True:
            state = self._current_state()
            broker = state.brokers.get(link.broker_id)
            if broker is None or not self._is_live(link.broker_id):
                return
            stub = self._stub(link, f"{broker.host}:{broker.port}")
            kind = type(operation).__name__.strip("_")
            try:
                match operation:
                    case _LeaderAndIsr(keys=keys, new_keys=new_keys):
                        request = codec.leader_and_isr_request(
                            state, broker_epoch=broker.broker_epoch, keys=keys, new_keys=new_keys
                        )
                        if not request.partitions:
                            return
                        lai = await stub.LeaderAndIsr(request, timeout=self._request_timeout_s)
                        error_code = lai.error_code
                        offline = [
                            (p.topic, p.partition)
                            for p in lai.partitions
                            if p.error_code == common_pb2.KAFKA_STORAGE_ERROR
                        ]
                        if offline and self._on_replicas_offline is not None:
                            self._on_replicas_offline(link.broker_id, broker.broker_epoch, offline)
                        for failed in lai.partitions:
                            if failed.error_code != common_pb2.NONE:
                                logger.warning(
                                    "broker %d refused LeaderAndIsr for %s-%d: error %d",
                                    link.broker_id,
                                    failed.topic,
                                    failed.partition,
                                    failed.error_code,
                                )
                    case _StopReplica(partitions=partitions):
                        stop = await stub.StopReplica(
                            codec.stop_replica_request(
                                state, broker_epoch=broker.broker_epoch, partitions=partitions
                            ),
                            timeout=self._request_timeout_s,
                        )
                        error_code = stop.error_code
                    case _UpdateMetadata():
                        update = await stub.UpdateMetadata(
                            codec.update_metadata_request(state, broker_epoch=broker.broker_epoch),
                            timeout=self._request_timeout_s,
                        )
                        error_code = update.error_code
                        if error_code == common_pb2.NONE:
                            link.acked_epoch = broker.broker_epoch
                            link.acked_offset = state.metadata_offset
            except grpc.aio.AioRpcError as error:
                logger.debug(
                    "broker %d: %s failed (%s), retrying in %d ms",
                    link.broker_id,
                    kind,
                    error.code(),
                    backoff_ms,
                )
            else:
                if error_code == common_pb2.NONE:
                    return
                if error_code == common_pb2.STALE_CONTROLLER_EPOCH:
                    logger.warning(
                        "broker %d refused %s: it has seen a newer controller epoch than %d",
                        link.broker_id,
                        kind,
                        state.controller_epoch,
                    )
                    return
                logger.info(
                    "broker %d answered %s with error %d, retrying in %d ms",
                    link.broker_id,
                    kind,
                    error_code,
                    backoff_ms,
                )
            await asyncio.sleep(backoff_ms / 1000)  # back-off between retries, not a race fix
            backoff_ms = min(backoff_ms * 2, self._retry_backoff_max_ms)

    def _stub(
        self, link: _BrokerLink, target: str
    ) -> broker_pb2_grpc.BrokerControlServiceAsyncStub:
        if link.stub is None or link.target != target:
            if link.channel is not None:
                self._tasks.append(self._task_group.create_task(link.channel.close()))
                link.channel = None
            if self._connect is not None:
                link.stub = self._connect(target)
            else:
                link.channel = open_channel(target, self._channel_options, self._tls)
                link.stub = broker_pb2_grpc.BrokerControlServiceStub(link.channel)
            link.target = target
        return link.stub
