"""Idempotent producer sequence rules (Kafka ProducerStateManager semantics)."""

from __future__ import annotations

import pytest

from broker.replica.producer_state import (
    BATCHES_REMEMBERED,
    ProducerEntry,
    Verdict,
    check_batch,
    next_sequence,
    record_batch,
)
from minikafka.errors import ErrorCode


def entry_after(*batches: tuple[int, int], epoch: int = 0) -> ProducerEntry:
    """An entry that has seen batches of (first_sequence, record_count), offsets from 0."""
    entry: ProducerEntry | None = None
    offset = 0
    for first, count in batches:
        entry = record_batch(
            entry,
            producer_id=7,
            producer_epoch=epoch,
            first_sequence=first,
            record_count=count,
            first_offset=offset,
        )
        offset += count
    assert entry is not None
    return entry


@pytest.mark.parametrize(
    ("entry", "epoch", "first", "count", "verdict", "code"),
    [
        pytest.param(None, 0, 42, 3, Verdict.APPEND, ErrorCode.NONE, id="unknown-producer-any-seq"),
        pytest.param(entry_after((0, 5)), 0, 5, 2, Verdict.APPEND, ErrorCode.NONE, id="in-order"),
        pytest.param(
            entry_after((0, 5)), 0, 0, 5, Verdict.DUPLICATE, ErrorCode.NONE, id="dup-last"
        ),
        pytest.param(
            entry_after((0, 5), (5, 5)), 0, 0, 5, Verdict.DUPLICATE, ErrorCode.NONE, id="dup-older"
        ),
        pytest.param(
            entry_after((0, 5)),
            0,
            7,
            1,
            Verdict.REJECT,
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            id="gap",
        ),
        pytest.param(
            entry_after((0, 5)),
            0,
            3,
            2,
            Verdict.REJECT,
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            id="overlap",
        ),
        pytest.param(
            entry_after((0, 5), epoch=2),
            1,
            5,
            1,
            Verdict.REJECT,
            ErrorCode.INVALID_PRODUCER_EPOCH,
            id="fenced-epoch",
        ),
        pytest.param(
            entry_after((0, 5)), 1, 0, 1, Verdict.APPEND, ErrorCode.NONE, id="new-epoch-from-zero"
        ),
        pytest.param(
            entry_after((0, 5)),
            1,
            5,
            1,
            Verdict.REJECT,
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            id="new-epoch-not-zero",
        ),
    ],
)
def test_check_batch(
    entry: ProducerEntry | None,
    epoch: int,
    first: int,
    count: int,
    verdict: Verdict,
    code: ErrorCode,
) -> None:
    result = check_batch(entry, producer_epoch=epoch, first_sequence=first, record_count=count)
    assert result.verdict is verdict
    assert result.error_code is code


def test_duplicate_reports_original_offsets() -> None:
    entry = entry_after((0, 5), (5, 3))
    result = check_batch(entry, producer_epoch=0, first_sequence=5, record_count=3)
    assert result.duplicate_of is not None
    assert (result.duplicate_of.first_offset, result.duplicate_of.last_offset) == (5, 7)


def test_only_the_last_five_batches_are_remembered() -> None:
    entry = entry_after(*[(i, 1) for i in range(BATCHES_REMEMBERED + 2)])
    assert len(entry.batches) == BATCHES_REMEMBERED
    oldest = check_batch(entry, producer_epoch=0, first_sequence=0, record_count=1)
    assert oldest.verdict is Verdict.REJECT  # too old to recognise: out of order


def test_sequence_wraps_at_int32() -> None:
    top = 2**31 - 2
    entry = entry_after((top, 2))
    assert entry.last_sequence == 2**31 - 1
    assert next_sequence(entry.last_sequence, 1) == 0
    assert (
        check_batch(entry, producer_epoch=0, first_sequence=0, record_count=1).verdict
        is Verdict.APPEND
    )
