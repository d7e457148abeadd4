"""Applying one partition's Fetch answer to its state: records kept raw (only batch
headers read, for the next offset and the last epoch), errors decided by the PURE rules
of `client.offset_rules` (retry, reset, fail), and log truncation (KIP-320: a
`diverging_epoch` in the answer); and the answer a refused Fetch stands for."""

from __future__ import annotations

import logging
from collections.abc import Callable

from client.consumer_config import ConsumerConfig
from client.errors import CorruptRecordError, LogTruncationError, authorization_error
from client.metrics import ConsumerMetrics
from client.offset_rules import FetchErrorKind, on_fetch_error, truncation_action
from client.records import TopicPartition, scan_fetched
from client.subscription import PartitionState
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2

#: The fetcher's logger: these messages kept the name they had when they were logged there.
logger = logging.getLogger("client.fetcher")


class FetchAnswers:
    """Applies fetched partitions for one consumer's `Fetcher`; `request_metadata` and
    `wake` are the fetcher's, `clock` gives monotonic seconds."""

    def __init__(
        self,
        *,
        settings: ConsumerConfig,
        metrics: ConsumerMetrics,
        clock: Callable[[], float],
        request_metadata: Callable[[], None],
        wake: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.request_metadata = request_metadata
        self.wake = wake

    def apply(
        self,
        tp: TopicPartition,
        state: PartitionState,
        part: broker_pb2.FetchPartitionResponse,
        broker_id: int,
    ) -> bool:
        """Apply one partition's answer; True when records or an error for the user came."""
        if part.HasField("diverging_epoch") and part.diverging_epoch.epoch >= 0:
            self._on_diverging(
                tp, state, part.diverging_epoch.epoch, part.diverging_epoch.end_offset
            )
            return state.error is not None
        code = int(part.error_code)
        if code == ErrorCode.NONE:
            state.high_watermark = part.high_watermark
            # Read once: each read of a protobuf bytes field is a fresh copy (upb), and at
            # megabytes per fetch the copies and their page faults cost as much as decoding.
            records = part.records
            if not records:
                return False
            next_offset, last_epoch, corrupt = scan_fetched(records, state.fetch_offset)
            self.metrics.bytes.record(len(records), self.clock() * 1000)
            if next_offset > state.fetch_offset:
                state.raw.append((records, state.fetch_offset))
                state.fetch_offset = next_offset
                state.fetch_epoch = last_epoch
            if corrupt is not None:
                # The batches before the damaged one are handed out, then the error.
                state.fail(CorruptRecordError(tp, next_offset, str(corrupt)), next_offset)
            return True
        outcome = on_fetch_error(
            code,
            part.error_message,
            tp=tp,
            position=state.fetch_offset,
            auto_offset_reset=self.settings.auto_offset_reset,
        )
        if outcome.kind is FetchErrorKind.RESET:
            assert outcome.reset_to is not None
            logger.info(
                "%s-%s: offset %s out of range, resetting to %s",
                tp.topic,
                tp.partition,
                state.fetch_offset,
                self.settings.auto_offset_reset,
            )
            state.await_reset(outcome.reset_to)
            return False
        if outcome.kind is FetchErrorKind.RETRY_LATER:
            logger.debug("fetch %s from broker %s: error %s", tp, broker_id, code)
            state.retry_after = self.clock() + self.settings.retry_backoff_ms / 1000
            if outcome.refresh_metadata:
                self.request_metadata()
            return False
        assert outcome.error is not None
        if outcome.kind is FetchErrorKind.FAIL:
            state.fail(outcome.error, state.fetch_offset)
        else:
            state.error = outcome.error  # reported once, then fetched again
        return True

    def _on_diverging(
        self, tp: TopicPartition, state: PartitionState, epoch: int, end_offset: int
    ) -> None:
        position = state.position()
        settings = self.settings
        action = truncation_action(
            position=position,
            diverging_epoch=epoch,
            end_offset=end_offset,
            reset_on_truncation=settings.reset_on_truncation,
            auto_offset_reset=settings.auto_offset_reset,
        )
        if action.kind == "raise":
            logger.warning(
                "log of %s-%s truncated under the consumer: position %s, diverges at %s",
                tp.topic,
                tp.partition,
                position,
                end_offset,
            )
            state.fail(LogTruncationError(tp, position, end_offset), position)
            return
        if action.kind == "reset":
            logger.warning(
                "log of %s-%s truncated under the consumer: resetting from %s to %s",
                tp.topic,
                tp.partition,
                position,
                action.offset,
            )
        state.seek(action.offset, action.epoch)
        self.wake()


def refused_fetch(request: broker_pb2.FetchRequest, details: str) -> broker_pb2.FetchResponse:
    """The answer to a Fetch the broker refused with PERMISSION_DENIED: each partition
    with the authorization error its message names (TOPIC_AUTHORIZATION_FAILED)."""
    code = authorization_error(details, context="fetch").code
    return broker_pb2.FetchResponse(
        partitions=[
            broker_pb2.FetchPartitionResponse(
                topic=part.topic,
                partition=part.partition,
                error_code=int(code),
                error_message=details,
            )
            for part in request.partitions
        ]
    )
