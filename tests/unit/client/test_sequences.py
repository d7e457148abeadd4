"""The idempotence tracker (PURE): sequences, the send window, epoch bumps."""

from __future__ import annotations

import pytest

from client.records import TopicPartition
from client.sequences import SequenceTracker

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def tracker(*, in_flight: int = 0, confirmed: bool = True, retrying: bool = False,
            bump: bool = False, max_in_flight: int = 5) -> SequenceTracker:  # fmt: skip
    t = SequenceTracker(enabled=True, max_in_flight=max_in_flight)
    t.new_epoch(7, 0)
    if confirmed:
        t.acknowledged(TP, producer_epoch=0, more_sequenced_queued=lambda: False)
    for n in range(in_flight):
        t.sent(TP, f"batch-{n}")
    if retrying:
        t.retrying(TP)
    if bump:
        t.failed(sequenced=True)
    return t


@pytest.mark.parametrize(
    ("state", "sequenced", "maybe_written", "expected"),
    [
        pytest.param({}, False, False, True, id="confirmed-idle"),
        pytest.param({"in_flight": 4}, False, False, True, id="confirmed-window-has-room"),
        pytest.param({"in_flight": 5}, False, False, False, id="confirmed-window-full"),
        pytest.param({"in_flight": 2, "max_in_flight": 2}, False, False, False,
                     id="window-is-the-configured-one"),
        pytest.param({"in_flight": 2, "max_in_flight": 9}, False, False, True,
                     id="window-capped-at-five"),
        pytest.param({"confirmed": False}, False, False, True, id="unconfirmed-first-batch"),
        pytest.param({"confirmed": False, "in_flight": 1}, False, False, False,
                     id="unconfirmed-one-at-a-time"),
        pytest.param({"retrying": True, "in_flight": 1}, True, False, False,
                     id="retrying-one-at-a-time"),
        pytest.param({"retrying": True}, True, False, True, id="retrying-idle"),
        pytest.param({"bump": True}, False, False, False, id="bump-pending-new-batch-waits"),
        pytest.param({"bump": True}, True, False, False,
                     id="bump-pending-unwritten-retry-waits"),
        pytest.param({"bump": True}, True, True, True, id="bump-pending-maybe-written-resent"),
    ],
)  # fmt: skip
def test_may_send(
    state: dict[str, int | bool], sequenced: bool, maybe_written: bool, expected: bool
) -> None:
    t = tracker(**state)  # type: ignore[arg-type]
    assert t.may_send(TP, sequenced=sequenced, maybe_written=maybe_written) is expected


@pytest.mark.parametrize(
    ("in_flight", "other_in_flight", "expected"),
    [
        pytest.param((), (), True, id="idle"),
        pytest.param(("b1",), (), False, id="one-batch-on-its-way-holds-the-partition"),
        pytest.param((), ("b1", "b2"), True, id="other-partitions-do-not-hold-it"),
        pytest.param(("request",), (), False, id="an-acks-0-request-holds-it-too"),
    ],
)
def test_a_plain_producer_keeps_one_batch_per_partition_in_flight(
    in_flight: tuple[str, ...], other_in_flight: tuple[str, ...], expected: bool
) -> None:
    """Without sequences a later batch could overtake an earlier one on concurrent gRPC
    calls (found by CI: acks=0 records read out of order)."""
    t = SequenceTracker(enabled=False, max_in_flight=5)
    for key in in_flight:
        t.sent(TP, key)
    for key in other_in_flight:
        t.sent(OTHER, key)
    assert t.may_send(TP, sequenced=False, maybe_written=False) is expected


def test_a_plain_producer_never_needs_a_new_epoch() -> None:
    t = SequenceTracker(enabled=False, max_in_flight=5)
    t.sent(TP, "b1")
    t.failed(sequenced=True)
    t.answered(TP, "b1")
    assert not t.bump_pending
    assert not t.any_in_flight()
    assert t.may_send(TP, sequenced=False, maybe_written=False)


def test_sequences_are_per_partition_and_wrap() -> None:
    t = SequenceTracker(enabled=True, max_in_flight=5)
    t.new_epoch(7, 0)
    assert [t.assign(TP, 10), t.assign(TP, 5), t.assign(OTHER, 3)] == [0, 10, 0]
    t._next_sequence[TP] = 0x7FFFFFFF - 1
    assert t.assign(TP, 4) == 0x7FFFFFFF - 1
    assert t.assign(TP, 1) == 2  # wrapped past 2^31 - 1


def test_a_new_epoch_restarts_sequences_and_confirmation() -> None:
    t = tracker(bump=True, retrying=True)
    t.assign(TP, 10)
    t.new_epoch(7, 1)
    assert (t.producer_epoch, t.bump_pending) == (1, False)
    assert t.assign(TP, 1) == 0
    # Unconfirmed again under the new epoch: one batch at a time.
    t.sent(TP, "b")
    assert not t.may_send(TP, sequenced=False, maybe_written=False)


def test_an_acknowledgement_of_an_older_epoch_does_not_confirm() -> None:
    t = tracker(confirmed=False)
    t.new_epoch(7, 1)
    t.acknowledged(TP, producer_epoch=0, more_sequenced_queued=lambda: False)
    t.sent(TP, "b")
    assert not t.may_send(TP, sequenced=False, maybe_written=False)


def test_retrying_ends_when_no_retry_is_queued() -> None:
    t = tracker(retrying=True)
    t.sent(TP, "b")
    t.acknowledged(TP, producer_epoch=0, more_sequenced_queued=lambda: True)
    assert not t.may_send(TP, sequenced=True, maybe_written=False)  # still retrying
    t.acknowledged(TP, producer_epoch=0, more_sequenced_queued=lambda: False)
    assert t.may_send(TP, sequenced=True, maybe_written=False)  # 1 in flight, window 5


@pytest.mark.parametrize(
    ("bump", "in_flight", "head_maybe_written", "expected"),
    [
        (False, False, False, False),
        (True, False, False, True),
        (True, True, False, False),
        (True, False, True, False),
    ],
    ids=["no-bump", "ready", "batch-in-flight", "next-batch-may-be-written"],
)
def test_ready_for_bump(
    bump: bool, in_flight: bool, head_maybe_written: bool, expected: bool
) -> None:
    t = tracker(bump=bump, in_flight=int(in_flight))
    assert t.ready_for_bump(next_batch_maybe_written=head_maybe_written) is expected


def test_only_a_sequenced_failure_needs_a_bump() -> None:
    t = tracker()
    t.failed(sequenced=False)
    assert not t.bump_pending
    t.failed(sequenced=True)
    assert t.bump_pending


def test_answered_is_idempotent() -> None:
    t = tracker(in_flight=2)
    t.answered(TP, "batch-0")
    t.answered(TP, "batch-0")
    assert t.in_flight(TP) == 1
