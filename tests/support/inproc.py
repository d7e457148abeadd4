"""In-process brokers for deterministic schedule tests: the real replica layer, no gRPC.

Each `Node` is one broker's `ReplicaManager` over a real `LogManager` in a temporary
directory, with a manual clock. Tests drive it exactly as the broker shell would
(LeaderAndIsr updates, produces, follower fetches through an in-memory
`LeaderEndpoint`), so a schedule such as "a fetch answer arrives after an epoch change"
is built step by step instead of hoped for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from broker.config import BrokerConfig
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replica.leader_endpoint import ReplicaFetch
from broker.replica.manager import (
    FetchItem,
    FetchResult,
    ProduceItem,
    ProduceResult,
    ReplicaManager,
)
from broker.replica.partition import Partition
from broker.replica.transitions import LeaderAndIsrPartition
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch

TOPIC = "t"


class ManualClock:
    """A broker `Clock` that tests move by hand."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        assert delta_ms >= 0
        self.now_ms += delta_ms


class Node:
    """One broker's replica layer in this process."""

    def __init__(
        self, broker_id: int, data_dir: Path, clock: ManualClock, *, lag_ms: int = 10_000
    ) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.clock = clock
        self.config = BrokerConfig(
            broker_id=broker_id,
            listen="127.0.0.1:0",
            data_dir=str(data_dir),
            controller="127.0.0.1:1",
            replica_lag_time_max_ms=lag_ms,
        )
        self.logs = LogManager(data_dir, LogConfig(), now_ms=clock.wall_ms())
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.replicas = ReplicaManager(
            config=self.config,
            logs=self.logs,
            clock=clock,
            topic_configs=lambda topic: self.topic_configs.get(topic, {}),
        )

    def partition(self, index: int = 0, topic: str = TOPIC) -> Partition:
        return self.replicas.get_partition(topic, index)

    def apply(
        self,
        *,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        replicas: Sequence[int],
        partition_epoch: int | None = None,
        index: int = 0,
        topic: str = TOPIC,
    ) -> ErrorCode:
        """Apply one LeaderAndIsr partition state, as the control servicer would."""
        return self.replicas.apply_leader_and_isr(
            LeaderAndIsrPartition(
                topic=topic,
                partition=index,
                leader=leader,
                leader_epoch=leader_epoch,
                partition_epoch=leader_epoch if partition_epoch is None else partition_epoch,
                isr=frozenset(isr),
                replicas=tuple(replicas),
            )
        )

    async def produce(
        self, values: Sequence[bytes], *, acks: int = 1, index: int = 0, timeout_ms: int = 1000
    ) -> ProduceResult:
        batch = build_batch([(self.clock.wall_ms(), None, value, None) for value in values])
        (result,) = await self.replicas.produce(
            acks=acks,
            timeout_ms=timeout_ms,
            items=[ProduceItem(topic=TOPIC, partition=index, records=batch)],
        )
        return result

    def close(self) -> None:
        self.logs.shutdown()


class InMemoryLeader:
    """A `LeaderEndpoint` that answers from another node's `ReplicaManager` at once, or,
    with `hold()`, only when the test releases the answer (a delayed response)."""

    def __init__(self, leader: Node) -> None:
        self.leader = leader
        self.requests: list[ReplicaFetch] = []
        self.held: asyncio.Queue[asyncio.Future[None]] | None = None
        self.arrived = asyncio.Event()

    def hold(self) -> None:
        """From now on each fetch waits, after it was served, until `release()`."""
        self.held = asyncio.Queue()

    async def fetch(self, request: ReplicaFetch) -> list[FetchResult]:
        self.requests.append(request)
        results = await self.leader.replicas.fetch(
            items=list(request.items),
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=request.max_bytes,
            replica_id=request.replica_id,
        )
        if self.held is not None:
            gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            await self.held.put(gate)
            self.arrived.set()
            await gate
        return results

    async def release(self) -> None:
        """Let the oldest held answer through."""
        assert self.held is not None
        gate = await self.held.get()
        gate.set_result(None)

    async def close(self) -> None:
        return None


def item(node: Node, index: int = 0) -> FetchItem:
    """The follower fetch item `node` would send for partition `index` now."""
    partition = node.partition(index)
    offset, last_epoch = partition.fetch_position()
    return FetchItem(
        topic=TOPIC,
        partition=index,
        fetch_offset=offset,
        current_leader_epoch=partition.leader_epoch,
        last_fetched_epoch=last_epoch,
    )
