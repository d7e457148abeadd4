"""Dispatcher queueing: ordering, coalescing and the bound (no delivery, no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from controller.dispatcher import PENDING_OPERATIONS_MAX, Dispatcher
from controller.model import ClusterState, PartitionRegistration, TopicRecord
from controller.propagation import Propagation

STATE = ClusterState(
    topics={"t": TopicRecord(name="t", num_partitions=2)},
    partitions={
        ("t", 0): PartitionRegistration(replicas=(1, 2), leader=1, isr=(1, 2)),
        ("t", 1): PartitionRegistration(replicas=(2, 1), leader=2, isr=(2, 1)),
    },
)


def kinds(dispatcher: Dispatcher, broker_id: int) -> list[str]:
    link = dispatcher._links[broker_id]
    return [type(op).__name__.strip("_") for op in link.pending]


async def with_dispatcher(check: Callable[[Dispatcher], None]) -> None:
    async with asyncio.TaskGroup() as task_group:
        dispatcher = Dispatcher(
            current_state=lambda: STATE,
            is_live=lambda broker_id: False,  # workers drop everything once they run
            task_group=task_group,
            request_timeout_ms=1000,
            retry_backoff_ms=10,
            retry_backoff_max_ms=100,
            max_message_bytes=1 << 20,
        )
        try:
            check(dispatcher)  # synchronous: the workers have not run yet
        finally:
            await dispatcher.close()


def lai(*keys: tuple[str, int]) -> Propagation:
    return Propagation(leader_and_isr={1: frozenset(keys)}, update_metadata=True)


async def test_leader_and_isr_coalesces_and_update_metadata_stays_last() -> None:
    def check(dispatcher: Dispatcher) -> None:
        dispatcher.submit(lai(("t", 0)), live={1})
        dispatcher.submit(lai(("t", 1)), live={1})
        dispatcher.submit(lai(("t", 0)), live={1})
        assert kinds(dispatcher, 1) == ["LeaderAndIsr", "UpdateMetadata"]
        assert dispatcher._links[1].pending[0].keys == {("t", 0), ("t", 1)}  # type: ignore[union-attr]

    await with_dispatcher(check)


async def test_delete_then_recreate_stays_ordered() -> None:
    def check(dispatcher: Dispatcher) -> None:
        dispatcher.submit(lai(("t", 0)), live={1})
        dispatcher.submit(
            Propagation(stop_replica={1: {("t", 0): 3}}, update_metadata=True), live={1}
        )
        dispatcher.submit(lai(("t", 0)), live={1})
        assert kinds(dispatcher, 1) == [
            "LeaderAndIsr",
            "StopReplica",
            "LeaderAndIsr",
            "UpdateMetadata",
        ]

    await with_dispatcher(check)


async def test_brokers_without_session_get_nothing() -> None:
    def check(dispatcher: Dispatcher) -> None:
        dispatcher.submit(lai(("t", 0)), live={2})
        assert 1 not in dispatcher._links
        assert kinds(dispatcher, 2) == ["UpdateMetadata"]

    await with_dispatcher(check)


async def test_queue_is_bounded_by_a_full_sync() -> None:
    def check(dispatcher: Dispatcher) -> None:
        for epoch in range(PENDING_OPERATIONS_MAX):
            dispatcher.submit(lai(("t", 0)), live={1})
            dispatcher.submit(
                Propagation(stop_replica={1: {("t", 0): epoch}}, update_metadata=False), live={1}
            )
        assert dispatcher.pending_operations(1) <= PENDING_OPERATIONS_MAX
        assert kinds(dispatcher, 1) == ["LeaderAndIsr", "UpdateMetadata"]

    await with_dispatcher(check)
