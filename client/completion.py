"""Carrying out what the response policy decided for a batch: complete it, queue it
again, park it for the next epoch, or fail it (and release its buffer memory).

`client.produce_policy` decides; `BatchCompleter` only performs, keeping the sequence
tracker, the accumulator and the metrics in step. Every error a batch fails with
carries `indefinite` (some attempt may have been written).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable

from client.accumulator import RecordAccumulator
from client.batch import BatchResult, ProducerBatch
from client.errors import MiniKafkaClientError
from client.metrics import ProducerMetrics
from client.produce_policy import (
    BatchState,
    BumpEpochThenRetry,
    Complete,
    Fail,
    Outcome,
    RefreshThenRetry,
    Retry,
    RetryRules,
    delivery_timeout_error,
)
from client.sequences import SequenceTracker

logger = logging.getLogger(__name__)


def with_indefinite(error: BaseException, indefinite: bool) -> BaseException:
    """`error` carrying `indefinite` (a copy when the instance says otherwise: one error
    may be shared by the batches of a request)."""
    if not isinstance(error, MiniKafkaClientError) or error.indefinite == indefinite:
        return error
    if "indefinite" in vars(error):
        error = copy.copy(error)
    error.indefinite = indefinite
    return error


def batch_state(batch: ProducerBatch) -> BatchState:
    """What the response policy sees of `batch`."""
    return BatchState(
        tp=batch.tp,
        record_count=batch.record_count,
        created_ms=batch.created_ms,
        attempts=batch.attempts,
        base_sequence=batch.base_sequence,
        maybe_written=batch.maybe_written,
        indefinite=batch.indefinite,
        last_error=batch.last_error,
    )


class BatchCompleter:
    """Applies outcomes to batches of one producer (on its event loop)."""

    def __init__(
        self,
        *,
        accumulator: RecordAccumulator,
        sequences: SequenceTracker,
        metrics: ProducerMetrics,
        rules: RetryRules,
        clock: Callable[[], float],
        refresh_metadata: Callable[[], None],
    ) -> None:
        self.accumulator = accumulator
        self.sequences = sequences
        self.metrics = metrics
        self.rules = rules
        self.clock = clock
        self.refresh_metadata = refresh_metadata
        #: Set whenever a batch is done (buffer memory was released).
        self.space_freed = asyncio.Event()

    def answered(self, batch: ProducerBatch) -> BatchState:
        """`batch`'s attempt is over (answered or failed): its state for the policy."""
        batch.sent = False
        self.sequences.answered(batch.tp, batch)
        return batch_state(batch)

    def apply(self, batch: ProducerBatch, outcome: Outcome) -> None:
        if isinstance(outcome, Complete):
            self.finish_ok(
                batch,
                BatchResult(
                    outcome.base_offset, outcome.log_append_time_ms, outcome.log_start_offset
                ),
            )
        elif isinstance(outcome, Retry):
            if outcome.maybe_written:
                batch.maybe_written = True
                batch.indefinite = True
            batch.last_error = str(outcome.error)
            logger.debug("retrying batch for %s after %s", batch.tp, outcome.error)
            self.sequences.retrying(batch.tp)
            retry_at = self.clock() + self.rules.retry_backoff_ms if outcome.backoff else 0.0
            self.accumulator.reenqueue(batch, retry_at)
            if isinstance(outcome, RefreshThenRetry):
                self.refresh_metadata()
        elif isinstance(outcome, BumpEpochThenRetry):
            # Definitely not written: it waits (in sequence order) for the next epoch and
            # is re-sequenced then (`Sender._bump_epoch`).
            self.accumulator.reenqueue(batch, 0.0)
        elif isinstance(outcome, Fail):
            batch.indefinite = batch.indefinite or outcome.indefinite
            self.finish_failed(batch, outcome.error)
            if outcome.refresh_metadata:
                self.refresh_metadata()

    def expire(self, now_ms: float) -> None:
        """Fail the queued batches past their delivery timeout."""
        for batch in self.accumulator.pop_expired(now_ms, self.rules.delivery_timeout_ms):
            self.finish_failed(batch, delivery_timeout_error(batch_state(batch), self.rules))

    def finish_ok(self, batch: ProducerBatch, result: BatchResult) -> None:
        self.sequences.answered(batch.tp, batch)
        self.sequences.acknowledged(
            batch.tp,
            producer_epoch=batch.producer_epoch,
            more_sequenced_queued=lambda: any(
                b.payload is not None and b.tp == batch.tp for b in self.accumulator.queued()
            ),
        )
        self.accumulator.release(batch)
        batch.complete(result)
        self.space_freed.set()

    def finish_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """Fail `batch` for good (a sequenced one leaves a hole: the epoch must change)."""
        self.sequences.answered(batch.tp, batch)
        self.sequences.failed(sequenced=batch.payload is not None and batch.base_sequence >= 0)
        self.metrics.errors.record(batch.record_count, self.clock())
        self.fail(batch, error)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        """Fail `batch` with `error` (closing, or a crash: no sequence bookkeeping)."""
        self.accumulator.release(batch)
        batch.fail(with_indefinite(error, batch.indefinite or batch.sent))
        self.space_freed.set()
