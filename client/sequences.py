"""PURE idempotence bookkeeping of the producer: producer id and epoch, a sequence per
partition, and which batches may be sent now (no I/O, no clock, no asyncio).

The rules (Kafka's `TransactionManager`/`RecordAccumulator` in the idempotent case):

- Each partition's batches get consecutive sequences, assigned at the first send and
  kept by every retry, so a leader that already has a batch answers
  DUPLICATE_SEQUENCE_NUMBER instead of writing it twice.
- A plain (non-idempotent) producer keeps one batch per partition in flight, so its
  batches are written in the order they were sent (Kafka gets that from its one ordered
  connection; concurrent gRPC calls give no such order).
- At most `max_in_flight` (<= 5, the broker's window) batches per partition are in
  flight; only one while the partition is "unconfirmed" (no batch acknowledged under
  the current epoch: a leader that does not know the producer accepts any sequence, so a
  later batch overtaking the first would be written before it) or "retrying" (a retry
  must not be overtaken by the batches behind it).
- A sequenced batch that fails for good leaves a hole in its partition's sequence: the
  producer needs a new epoch (`bump_pending`). Until then only batches that may already
  have been written are sent (under their old sequence, to learn whether they were);
  every other batch waits, and all of them are re-sequenced under the new epoch once
  nothing is in flight and no partition's next batch may have been written.

Batches are opaque hashable keys here; the sender says what happened to them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Final

from client.records import TopicPartition

#: The broker keeps the last five batches of a producer per partition (Kafka's limit).
MAX_IN_FLIGHT_IDEMPOTENT: Final = 5
_SEQUENCE_MASK: Final = 0x7FFFFFFF


class SequenceTracker:
    """Sequences and the send window of an idempotent producer (`enabled=False`: a
    plain producer, which keeps one batch per partition in flight: without sequences
    nothing would put a later batch back behind an earlier one, and concurrent gRPC calls
    may reach the leader's log in any order, unlike Kafka's one ordered connection)."""

    def __init__(self, *, enabled: bool, max_in_flight: int) -> None:
        self.enabled = enabled
        self.max_in_flight = min(max_in_flight, MAX_IN_FLIGHT_IDEMPOTENT)
        self.producer_id = -1
        self.producer_epoch = -1
        #: A sequenced batch failed for good: a new epoch is needed.
        self.bump_pending = False
        self._next_sequence: dict[TopicPartition, int] = {}
        self._in_flight: dict[TopicPartition, set[Hashable]] = {}
        self._retrying: set[TopicPartition] = set()
        self._confirmed: set[TopicPartition] = set()

    # ---- epochs -------------------------------------------------------------------------

    def new_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """A (new) producer id / epoch from InitProducerId: sequences restart at 0 and no
        partition is confirmed under it yet. Clears `bump_pending`."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next_sequence.clear()
        self._confirmed.clear()
        self._retrying.clear()
        self.bump_pending = False

    def ready_for_bump(self, *, next_batch_maybe_written: bool) -> bool:
        """A bump is pending, nothing is in flight, and no partition's next batch may
        have been written (`next_batch_maybe_written`: any queue head that may have been).

        Queues are in sequence order and a leader appends a producer's batches in
        sequence order, so every batch behind one that was definitely not written was
        not written either: those are re-sequenced under the new epoch."""
        return self.bump_pending and not self.any_in_flight() and not next_batch_maybe_written

    # ---- sequences ----------------------------------------------------------------------

    def assign(self, tp: TopicPartition, record_count: int) -> int:
        """The base sequence of the next batch of `tp` (advances the partition's)."""
        sequence = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = (sequence + record_count) & _SEQUENCE_MASK
        return sequence

    # ---- the send window ----------------------------------------------------------------

    def may_send(self, tp: TopicPartition, *, sequenced: bool, maybe_written: bool) -> bool:
        """Whether the next batch of `tp` may be sent now (`sequenced`: it already has a
        sequence, i.e. this is a retry; `maybe_written`: an attempt may be written)."""
        if not self.enabled:
            return not self._in_flight.get(tp)
        if self.bump_pending and not (sequenced and maybe_written):
            # Only a batch that may have been written is resent under the old epoch (to
            # learn whether it was); every other batch waits for the new epoch.
            return False
        in_flight = len(self._in_flight.get(tp, ()))
        if tp in self._retrying or tp not in self._confirmed:
            return in_flight == 0
        return in_flight < self.max_in_flight

    def sent(self, tp: TopicPartition, batch: Hashable) -> None:
        """`batch` (or any key that holds `tp`'s window, e.g. an acks=0 request still on
        its way) is in flight until `answered`."""
        self._in_flight.setdefault(tp, set()).add(batch)

    def answered(self, tp: TopicPartition, batch: Hashable) -> None:
        """`batch` is no longer in flight (answered, failed, or given up)."""
        in_flight = self._in_flight.get(tp)
        if in_flight is not None:
            in_flight.discard(batch)

    def in_flight(self, tp: TopicPartition) -> int:
        return len(self._in_flight.get(tp, ()))

    def any_in_flight(self) -> bool:
        return any(self._in_flight.values())

    # ---- outcomes -----------------------------------------------------------------------

    def acknowledged(
        self,
        tp: TopicPartition,
        *,
        producer_epoch: int,
        more_sequenced_queued: Callable[[], bool],
    ) -> None:
        """A batch of `tp` sent under `producer_epoch` was written. `more_sequenced_queued()`:
        `tp` still has queued batches that carry a sequence (retries waiting); asked only
        while `tp` is retrying."""
        if not self.enabled:
            return
        if producer_epoch == self.producer_epoch:
            self._confirmed.add(tp)
        if tp in self._retrying and not more_sequenced_queued():
            self._retrying.discard(tp)

    def retrying(self, tp: TopicPartition) -> None:
        """A batch of `tp` goes back to its queue for a retry."""
        if self.enabled:
            self._retrying.add(tp)

    def failed(self, *, sequenced: bool) -> None:
        """A batch failed for good; if it had a sequence, the partition's sequence has a
        hole now and the producer needs a new epoch before it is used again."""
        if self.enabled and sequenced:
            self.bump_pending = True
