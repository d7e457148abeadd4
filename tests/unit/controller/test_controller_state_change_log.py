"""The state-change log names each partition change against the state just before it."""

from __future__ import annotations

import logging

import pytest

from controller.engine import ControllerEngine
from controller.model import ClusterState, PartitionRegistration
from controller.records import PartitionRecord
from controller.state_machine import ControllerResult


def registration(leader: int, epoch: int, isr: tuple[int, ...]) -> PartitionRegistration:
    return PartitionRegistration(replicas=(1, 2, 3), leader=leader, leader_epoch=epoch, isr=isr)


def test_two_changes_of_one_partition_in_one_batch(caplog: pytest.LogCaptureFixture) -> None:
    old = ClusterState(partitions={("t", 0): registration(1, 4, (1, 2, 3))})
    records = (
        PartitionRecord(topic="t", partition=0, registration=registration(1, 4, (1, 2))),
        PartitionRecord(topic="t", partition=0, registration=registration(2, 5, (2,))),
    )
    with caplog.at_level(logging.INFO, logger="minikafka.state_change"):
        ControllerEngine._log_changes(old, records, ControllerResult(records=records, reply=None))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(
        "partition t-0: leader 1 -> 1 (leader epoch 4), ISR [1, 2, 3] -> [1, 2]"
    )
    assert lines[1].startswith("partition t-0: leader 1 -> 2 (leader epoch 5), ISR [1, 2] -> [2]")
