"""The control servicer refuses what the controller did not address to this incarnation.

Issue 14, hole 2: a broker restarted within the session timeout (host freeze, power loss
without a TCP reset) received the LeaderAndIsr the controller kept re-sending to the old
incarnation, accepted it before registering (any broker epoch passed while its own was
-1), and led in the old epoch with a short log. Issue 23: a made-up higher controller
epoch cut the broker off from the real controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata_cache import MetadataCache
from broker.replica.partition import Role
from broker.server.control_servicer import ControlServicer
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, common_pb2
from tests.support.inproc import ManualClock, Node

CONTROLLER_EPOCH = 3


class Session:
    """What the controller link knows: this incarnation's broker epoch and the newest
    controller epoch the controller announced."""

    broker_epoch = -1
    controller_epoch = -1


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(1, tmp_path / "broker-1", ManualClock())
    yield made
    made.close()


@pytest.fixture
def session() -> Session:
    return Session()


@pytest.fixture
def servicer(node: Node, session: Session) -> ControlServicer:
    return ControlServicer(
        replicas=node.replicas,
        metadata=MetadataCache(),
        broker_epoch=lambda: session.broker_epoch,
        session_controller_epoch=lambda: session.controller_epoch,
        on_change=lambda: None,
    )


def leader_and_isr(*, broker_epoch: int, controller_epoch: int = CONTROLLER_EPOCH) -> Any:
    return broker_pb2.LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        partitions=[
            broker_pb2.PartitionState(
                topic="t",
                partition=0,
                leader=1,
                leader_epoch=7,
                isr=[1, 2],
                partition_epoch=9,
                replicas=[1, 2],
            )
        ],
    )


async def test_nothing_is_applied_before_the_broker_has_registered(
    servicer: ControlServicer, node: Node, session: Session
) -> None:
    # The old incarnation was broker epoch 5; this process has not registered yet.
    session.controller_epoch = CONTROLLER_EPOCH
    reply = await servicer.LeaderAndIsr(leader_and_isr(broker_epoch=5), None)  # type: ignore[arg-type]
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert ("t", 0) not in node.replicas.partitions
    # Registered as epoch 8: a request for the old incarnation is still refused ...
    session.broker_epoch = 8
    reply = await servicer.LeaderAndIsr(leader_and_isr(broker_epoch=5), None)  # type: ignore[arg-type]
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH
    reply = await servicer.LeaderAndIsr(leader_and_isr(broker_epoch=-1), None)  # type: ignore[arg-type]
    assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert ("t", 0) not in node.replicas.partitions
    # ... and one for this incarnation is applied.
    reply = await servicer.LeaderAndIsr(leader_and_isr(broker_epoch=8), None)  # type: ignore[arg-type]
    assert reply.error_code == ErrorCode.NONE
    assert node.partition().role is Role.LEADER


async def test_a_made_up_controller_epoch_does_not_cut_the_broker_off(
    servicer: ControlServicer, node: Node, session: Session
) -> None:
    session.broker_epoch, session.controller_epoch = 8, CONTROLLER_EPOCH
    forged = broker_pb2.UpdateMetadataRequest(
        controller_id=0, controller_epoch=2**31 - 1, broker_epoch=8, metadata_offset=10**9
    )
    refused = await servicer.UpdateMetadata(forged, None)  # type: ignore[arg-type]
    assert refused.error_code == ErrorCode.NOT_CONTROLLER
    reply = await servicer.LeaderAndIsr(leader_and_isr(broker_epoch=8), None)  # type: ignore[arg-type]
    assert reply.error_code == ErrorCode.NONE
    # A new controller epoch is accepted once the controller session announced it.
    session.controller_epoch = CONTROLLER_EPOCH + 1
    reply = await servicer.LeaderAndIsr(
        leader_and_isr(broker_epoch=8, controller_epoch=CONTROLLER_EPOCH + 1),
        None,  # type: ignore[arg-type]
    )
    assert reply.error_code == ErrorCode.NONE


async def test_an_older_update_metadata_never_replaces_newer_metadata(
    servicer: ControlServicer, session: Session
) -> None:
    session.broker_epoch, session.controller_epoch = 8, CONTROLLER_EPOCH

    def update(offset: int, brokers: list[int]) -> Any:
        return broker_pb2.UpdateMetadataRequest(
            controller_id=0,
            controller_epoch=CONTROLLER_EPOCH,
            broker_epoch=8,
            metadata_offset=offset,
            live_brokers=[
                common_pb2.BrokerEndpoint(broker_id=b, host="h", port=1, broker_epoch=b)
                for b in brokers
            ],
        )

    assert (await servicer.UpdateMetadata(update(20, [1, 2, 3]), None)).error_code == 0  # type: ignore[arg-type]
    assert (await servicer.UpdateMetadata(update(15, [1]), None)).error_code == 0  # type: ignore[arg-type]
    assert sorted(servicer._metadata.brokers) == [1, 2, 3]
