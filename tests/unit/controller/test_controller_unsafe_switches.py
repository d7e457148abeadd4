"""The controller's side of the simulator's hole-1 canary: with `Settings.kip903` off
(`ControllerConfig.unsafe_test_isr_without_broker_epoch`, test-only) AlterPartition takes
back the rule before KIP-903's fix; with it on (the default) the fix holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.state_machine import Settings, fence_broker
from minikafka.errors import ErrorCode
from tests.unit.controller.controller_harness import Harness
from tests.unit.controller.test_controller_state_machine import (
    KEY,
    leader_and_followers,
    propose,
)


def shrunk(kip903: bool) -> tuple[Harness, int, int, int]:
    """Topic t of RF 3 whose ISR was shrunk to the leader and one follower."""
    harness = Harness(Settings(kip903=kip903))
    harness.start_brokers(1, 2, 3)
    harness.create("t", rf=3, configs={"min.insync.replicas": "2"})
    leader, (kept, added) = leader_and_followers(harness)
    assert propose(harness, leader, (leader, kept)) is ErrorCode.NONE
    return harness, leader, kept, added


@pytest.mark.parametrize(
    ("kip903", "code"),
    [
        pytest.param(True, ErrorCode.INELIGIBLE_REPLICA, id="fix-on-refused"),
        pytest.param(False, ErrorCode.NONE, id="pre-fix-accepted"),
    ],
)
@pytest.mark.parametrize(
    "added_epoch",
    [
        pytest.param(lambda current: None, id="no-epoch"),
        pytest.param(lambda current: current - 1, id="previous-incarnation"),
    ],
)
def test_adding_a_member_without_its_current_broker_epoch(
    kip903: bool, code: ErrorCode, added_epoch: Callable[[int], int | None]
) -> None:
    harness, leader, kept, added = shrunk(kip903)
    current = harness.state.brokers[added].broker_epoch
    epoch = added_epoch(current)
    epochs = {} if epoch is None else {added: epoch}
    assert propose(harness, leader, (leader, kept, added), member_epochs=epochs) is code


@pytest.mark.parametrize("kip903", [True, False])
def test_a_fenced_member_is_refused_either_way(kip903: bool) -> None:
    """Before the fix the controller still checked that an added member was unfenced."""
    harness, leader, kept, added = shrunk(kip903)
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=added, reason="x"))
    assert propose(harness, leader, (leader, kept, added)) is ErrorCode.INELIGIBLE_REPLICA
    assert added not in harness.part(KEY).isr
