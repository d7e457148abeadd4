"""Idempotent-producer state of one partition: sequence checks and duplicate detection.

PURE rules over immutable entries (Kafka's `ProducerStateManager` / `ProducerAppendInfo`):
for each producer id the partition remembers its epoch and its last
`BATCHES_REMEMBERED` batches (first/last sequence and offsets). A batch from a producer
is, in order of the checks:

- fenced (INVALID_PRODUCER_EPOCH) if its epoch is older than the remembered one;
- a new epoch, which must start at sequence 0 (else OUT_OF_ORDER_SEQUENCE_NUMBER);
- a duplicate of a remembered batch (same first and last sequence): not appended again,
  answered with the original offsets;
- in order if its first sequence follows the last remembered one (int32 wrap-around);
- out of order otherwise (OUT_OF_ORDER_SEQUENCE_NUMBER).

A producer the partition does not know is accepted at any sequence (its state may have
been lost with a truncated tail; Kafka since KIP-360 does the same). The state is
rebuilt from batch headers when a log is opened and after truncation, and maintained on
every leader and follower append, so it survives leader changes.
"""

from __future__ import annotations

import enum

import msgspec

from minikafka.errors import ErrorCode

BATCHES_REMEMBERED = 5
NO_PRODUCER_ID = -1
_SEQUENCE_MODULUS = 2**31


class BatchMetadata(msgspec.Struct, frozen=True, kw_only=True):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


class ProducerEntry(msgspec.Struct, frozen=True, kw_only=True):
    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...] = ()

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    REJECT = "reject"


class SequenceCheck(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    error_code: ErrorCode = ErrorCode.NONE
    message: str = ""
    duplicate_of: BatchMetadata | None = None


def next_sequence(sequence: int, count: int) -> int:
    """The sequence `count` records after `sequence`, wrapping at 2**31 like Kafka."""
    return (sequence + count) % _SEQUENCE_MODULUS


def check_batch(
    entry: ProducerEntry | None, *, producer_epoch: int, first_sequence: int, record_count: int
) -> SequenceCheck:
    """Decide what to do with one idempotent batch (see the module docstring)."""
    last_sequence = next_sequence(first_sequence, record_count - 1)
    if entry is None:
        return SequenceCheck(verdict=Verdict.APPEND)
    if producer_epoch < entry.producer_epoch:
        return SequenceCheck(
            verdict=Verdict.REJECT,
            error_code=ErrorCode.INVALID_PRODUCER_EPOCH,
            message=(
                f"producer {entry.producer_id} epoch {producer_epoch} is older than the "
                f"current epoch {entry.producer_epoch}"
            ),
        )
    if producer_epoch > entry.producer_epoch:
        if first_sequence != 0:
            return SequenceCheck(
                verdict=Verdict.REJECT,
                error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                message=(
                    f"producer {entry.producer_id} starts epoch {producer_epoch} at sequence "
                    f"{first_sequence}, expected 0"
                ),
            )
        return SequenceCheck(verdict=Verdict.APPEND)
    for batch in entry.batches:
        if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
            return SequenceCheck(verdict=Verdict.DUPLICATE, duplicate_of=batch)
    expected = next_sequence(entry.last_sequence, 1)
    if first_sequence != expected:
        return SequenceCheck(
            verdict=Verdict.REJECT,
            error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            message=(
                f"producer {entry.producer_id} sent sequence {first_sequence}, expected {expected}"
            ),
        )
    return SequenceCheck(verdict=Verdict.APPEND)


def record_batch(
    entry: ProducerEntry | None,
    *,
    producer_id: int,
    producer_epoch: int,
    first_sequence: int,
    record_count: int,
    first_offset: int,
) -> ProducerEntry:
    """The entry after appending a batch (leader or follower); keeps the last 5 batches."""
    batch = BatchMetadata(
        first_sequence=first_sequence,
        last_sequence=next_sequence(first_sequence, record_count - 1),
        first_offset=first_offset,
        last_offset=first_offset + record_count - 1,
    )
    if entry is None or producer_epoch != entry.producer_epoch:
        return ProducerEntry(
            producer_id=producer_id, producer_epoch=producer_epoch, batches=(batch,)
        )
    kept = (*entry.batches, batch)[-BATCHES_REMEMBERED:]
    return ProducerEntry(producer_id=producer_id, producer_epoch=producer_epoch, batches=kept)
