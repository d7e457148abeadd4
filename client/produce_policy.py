"""PURE response policy of the producer: what to do with a batch after an attempt.

The sender performs the Produce call and asks this module what the answer (or the
failure of the call) means for each batch; it never decides by itself. Every function
is a function of the batch's state, the answer, the retry settings and `now_ms`:

- `on_partition_response(batch, answer, now_ms, rules, ...)` -> `Outcome`
- `on_transport_failure(batch, failure, now_ms, rules)` -> `Outcome`
- `retry_or_fail(batch, error, now_ms, rules, ...)` -> `Retry | Fail`

Outcomes (the sender's only vocabulary):

- `Complete`: written (DUPLICATE_SEQUENCE_NUMBER too: an earlier attempt was written).
- `Retry`: send the batch again after `retry_backoff_ms` (`backoff=False`: at once),
  under its current producer epoch and sequence.
- `RefreshThenRetry`: the same, after asking for fresh metadata (the leader may have
  moved, or be cut off).
- `BumpEpochThenRetry`: definitely not written, but its sequence can no longer be used
  (a batch before it failed for good): it waits for the next producer epoch and is
  re-sequenced then.
- `Fail(error, indefinite)`: give up. `indefinite` says whether some attempt may have
  been written; it is the `indefinite` of the error the records fail with.

"May have been written" (`maybe_written`) is set by every answer given after the leader
may have appended: an answer with `indefinite=true`, the post-append codes
REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND, a lost connection, a deadline, a
leader that stopped answering. Such a batch is only ever resent under its original
sequence (a broker that has it answers DUPLICATE_SEQUENCE_NUMBER) and never
re-sequenced: an OUT_OF_ORDER_SEQUENCE_NUMBER for it while an epoch bump is pending
fails it as indefinite.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final, TypeAlias

import grpc
import msgspec

from client.errors import (
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MiniKafkaClientError,
    authorization_error,
    from_response,
)
from client.records import TopicPartition
from client.transport import CONNECTION_CODES
from minikafka.errors import INVALID_METADATA_CODES, RETRIABLE_CODES, ErrorCode

#: Codes a leader answers only after it appended the batch (it waited for replication):
#: the write may still be committed, whatever the answer's `indefinite` says.
POST_APPEND_CODES: Final = frozenset(
    {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
)

#: Codes after which the leader is looked up again before the retry: the metadata is
#: stale, or a leader that cannot replicate may have been replaced behind its back (it
#: is cut off from the controller).
REFRESH_CODES: Final = INVALID_METADATA_CODES | {
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
}

#: gRPC statuses that refuse a call before the server processed it: nothing written.
REFUSED_BEFORE_PROCESSING: Final = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


class RetryRules(msgspec.Struct, frozen=True, kw_only=True):
    """The producer settings the policy needs."""

    retries: int | None  # None: no limit (until the delivery timeout)
    retry_backoff_ms: float
    delivery_timeout_ms: float


class BatchState(msgspec.Struct, frozen=True, kw_only=True):
    """What the policy knows of one batch after an attempt."""

    tp: TopicPartition
    record_count: int
    created_ms: float
    #: Attempts sent so far (this one included).
    attempts: int
    #: Sent under an idempotent producer's sequence (-1 otherwise).
    base_sequence: int = -1
    #: An attempt under its current sequence may have been written.
    maybe_written: bool = False
    #: Some attempt (under any sequence) may have been written.
    indefinite: bool = False
    #: Why the previous attempt failed (None: this is the first failure).
    last_error: str | None = None


class PartitionAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The broker's answer for one partition of a Produce request."""

    error_code: int
    error_message: str = ""
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    indefinite: bool = False


class TransportFailure(enum.Enum):
    """How a Produce call failed without an answer."""

    #: The partition's leader moved while the call was outstanding (the call was
    #: abandoned: the old leader is paused or cut off).
    LEADER_MOVED = "leader-moved"
    #: Connection lost or unusable (UNAVAILABLE, CANCELLED, UNKNOWN) after sending.
    CONNECTION = "connection"
    #: The call's deadline passed without an answer.
    DEADLINE = "deadline"
    #: The call was refused before processing (INVALID_ARGUMENT, RESOURCE_EXHAUSTED...).
    REFUSED = "refused"
    #: The authorizer refused the call before processing (PERMISSION_DENIED, ACLs).
    DENIED = "denied"
    #: Any other gRPC failure: the server may have processed it.
    OTHER = "other"
    #: The answer had no entry for this partition.
    NOT_ANSWERED = "not-answered"
    #: The partition's leader left the cluster before the call was made.
    LEADER_GONE = "leader-gone"


class Complete(msgspec.Struct, frozen=True, kw_only=True):
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


class Retry(msgspec.Struct, frozen=True, kw_only=True):
    error: MiniKafkaClientError
    #: This attempt may have been written (the sender marks the batch).
    maybe_written: bool = False
    #: False: resend at once (the leader is known to have moved).
    backoff: bool = True


class RefreshThenRetry(Retry, frozen=True, kw_only=True):
    """`Retry` after a metadata refresh."""


class BumpEpochThenRetry(msgspec.Struct, frozen=True, kw_only=True):
    error: MiniKafkaClientError


class Fail(msgspec.Struct, frozen=True, kw_only=True):
    error: BaseException
    indefinite: bool
    #: Also look the leader up again (the error said the metadata is stale).
    refresh_metadata: bool = False


Outcome: TypeAlias = Complete | Retry | BumpEpochThenRetry | Fail


def on_partition_response(
    batch: BatchState,
    answer: PartitionAnswer,
    now_ms: float,
    rules: RetryRules,
    *,
    closed: bool = False,
    epoch_bump_pending: bool = False,
    earlier_pending: Callable[[], bool] = lambda: False,
) -> Outcome:
    """The outcome of `answer` for `batch`.

    `epoch_bump_pending`: a sequenced batch failed for good, so the producer needs a new
    epoch. `earlier_pending()`: a batch of the same partition with a lower sequence was
    in flight when this attempt was sent or is not done yet (so an
    OUT_OF_ORDER_SEQUENCE_NUMBER may only mean this attempt overtook it); called only for
    that code.
    """
    code = answer.error_code
    if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
        return Complete(
            base_offset=answer.base_offset,
            log_append_time_ms=answer.log_append_time_ms,
            log_start_offset=answer.log_start_offset,
        )
    error = from_response(
        code, answer.error_message, context=f"Produce {batch.tp.topic}-{batch.tp.partition}"
    )
    written = answer.indefinite or code in POST_APPEND_CODES
    if written:
        batch = msgspec.structs.replace(batch, maybe_written=True, indefinite=True)
    refresh = code in REFRESH_CODES
    if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
        if earlier_pending():
            return retry_or_fail(batch, error, now_ms, rules, closed=closed, written=written)
        if epoch_bump_pending:
            if batch.indefinite:
                # An earlier attempt may have been appended by a leader that can come
                # back: never write it again as new data.
                return Fail(error=error, indefinite=True)
            return BumpEpochThenRetry(error=error)
    if code in RETRIABLE_CODES:
        return retry_or_fail(
            batch, error, now_ms, rules, closed=closed, written=written, refresh=refresh
        )
    return Fail(error=error, indefinite=batch.indefinite, refresh_metadata=refresh)


def on_transport_failure(
    batch: BatchState,
    failure: TransportFailure,
    detail: str,
    now_ms: float,
    rules: RetryRules,
    *,
    closed: bool = False,
) -> Outcome:
    """The outcome for `batch` when its Produce call failed without an answer for it
    (`detail` names the broker and the status for the error message)."""
    if failure is TransportFailure.LEADER_GONE:
        return retry_or_fail(batch, KafkaConnectionError(detail), now_ms, rules, closed=closed)
    if failure is TransportFailure.REFUSED:
        return Fail(error=IllegalStateError(detail), indefinite=batch.indefinite)
    if failure is TransportFailure.DENIED:
        return Fail(
            error=authorization_error(detail, context=f"{batch.tp.topic}-{batch.tp.partition}"),
            indefinite=batch.indefinite,
        )
    # The request was sent: it may have been appended.
    batch = msgspec.structs.replace(batch, maybe_written=True, indefinite=True)
    if failure in (TransportFailure.OTHER, TransportFailure.NOT_ANSWERED):
        return Fail(error=IllegalStateError(detail), indefinite=True)
    if failure is TransportFailure.LEADER_MOVED:
        # Its leader was replaced (it is paused or cut off): what it may have written is
        # either replicated to the new leader (a retry is deduplicated) or will be
        # truncated, so resend now rather than after the request timeout.
        return retry_or_fail(
            batch,
            KafkaConnectionError(detail),
            now_ms,
            rules,
            closed=closed,
            written=True,
            backoff=False,
        )
    return retry_or_fail(
        batch,
        KafkaConnectionError(detail),
        now_ms,
        rules,
        closed=closed,
        written=True,
        refresh=True,
    )


def retry_or_fail(
    batch: BatchState,
    error: MiniKafkaClientError,
    now_ms: float,
    rules: RetryRules,
    *,
    closed: bool = False,
    written: bool = False,
    refresh: bool = False,
    backoff: bool = True,
) -> Retry | Fail:
    """Retry unless the producer is closed, the batch is out of retries, or the retry
    would come after its delivery timeout (as Kafka's `canRetry`)."""
    out_of_time = now_ms + rules.retry_backoff_ms > batch.created_ms + rules.delivery_timeout_ms
    out_of_retries = rules.retries is not None and batch.attempts > rules.retries
    if out_of_time:
        return Fail(
            error=delivery_timeout_error(batch, rules, last_error=str(error)),
            indefinite=batch.indefinite,
            refresh_metadata=refresh,
        )
    if out_of_retries or closed:
        return Fail(error=error, indefinite=batch.indefinite, refresh_metadata=refresh)
    kind = RefreshThenRetry if refresh else Retry
    return kind(error=error, maybe_written=written, backoff=backoff)


def delivery_timeout_error(
    batch: BatchState, rules: RetryRules, *, last_error: str | None = None
) -> KafkaTimeoutError:
    """The error of a batch whose delivery timeout ran out: it names the cause, the
    error of the attempt that just failed or, for a batch that expired while waiting
    to be retried, the error of its previous attempt."""
    where = (
        f"{batch.tp.topic}-{batch.tp.partition}: {batch.record_count} record(s) not "
        f"delivered within delivery_timeout_ms={rules.delivery_timeout_ms}"
    )
    earlier = batch.last_error
    if last_error is None and earlier is None:
        return KafkaTimeoutError(f"{where}: never sent (no leader known for the partition?)")
    if last_error is None or last_error == earlier:
        return KafkaTimeoutError(f"{where}; last error: {earlier or last_error}")
    before = f"; before that: {earlier}" if earlier else ""
    return KafkaTimeoutError(f"{where}; last error: {last_error}{before}")


def transport_failure(code: grpc.StatusCode) -> TransportFailure:
    """Classify a failed call's gRPC status."""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return TransportFailure.DEADLINE
    if code in CONNECTION_CODES:
        return TransportFailure.CONNECTION
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return TransportFailure.DENIED
    if code in REFUSED_BEFORE_PROCESSING:
        return TransportFailure.REFUSED
    return TransportFailure.OTHER
