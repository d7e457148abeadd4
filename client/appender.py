"""Placing records: serialize, check, choose the partition, append to the accumulator.

`RecordAppender.try_append` is the per-record path of `send()` (thread-safe: the sync
`Producer` calls it from user threads) and is kept short: plain bytes without
serializers or headers take the fewest steps. `plan_batch` / `fill`, the path of
`send_batch()`, come from `client.batch_append`; the argument checks from
`client.record_args`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from client.accumulator import RECORD_OVERHEAD_BYTES, BufferFull, RecordAccumulator
from client.batch_append import BatchAppending, BatchPlan
from client.errors import IllegalStateError, MessageSizeTooLargeError
from client.futures import FutureRecordMetadata
from client.metadata import ClusterView
from client.partitioner import DefaultPartitioner, Partitioner
from client.producer_config import topic_batch_size
from client.record_args import (
    HasView,
    Headers,
    Serializer,
    TopicRoute,
    bad_partition,
    bad_timestamp,
    header_pairs,
    to_bytes,
)
from client.records import TopicPartition
from client.transport import check_topic_name

_time_ns = time.time_ns


class _NoConnection:
    @property
    def view(self) -> ClusterView:
        raise IllegalStateError("call `await producer.start()` first")


_NO_VIEW: HasView = _NoConnection()  # type: ignore[assignment]


class RecordAppender(BatchAppending):
    """Places records into the accumulator for one producer (see the module docstring).

    `view` gives the current cluster view and `wake` wakes the sender (from any thread);
    `check_open` raises when the producer is closed or failed."""

    def __init__(
        self,
        *,
        accumulator: RecordAccumulator,
        max_request_size: int,
        partitioner: Partitioner | None,
        key_serializer: Serializer | None,
        value_serializer: Serializer | None,
        wake: Callable[[], None],
        refusal: Callable[[], BaseException],
    ) -> None:
        self._accumulator = accumulator
        self._append = accumulator.append
        self._max_request_size = max_request_size
        self._user_partitioner = partitioner
        self._partitioner = DefaultPartitioner()
        self._sticky = self._partitioner.sticky
        #: No serializers: bytes keys and values are appended as they are.
        self._plain = key_serializer is None and value_serializer is None
        #: ... and no user partitioner: unkeyed records go to the sticky partition.
        self._sticky_plain = self._plain and partitioner is None
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._wake = wake
        self._refusal = refusal
        #: Set by the producer: its connections (`conn.view` is the current metadata).
        self.conn: HasView = _NO_VIEW
        #: Set once the producer is closed or its sender crashed: appends raise
        #: `refusal()` from then on.
        self.refused = False
        self._topic_cache: dict[str, TopicRoute] = {}

    # ---- one record -------------------------------------------------------------------

    def try_append(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Headers,
        timestamp_ms: int | None,
    ) -> FutureRecordMetadata | Literal["metadata", "buffer"]:
        """Append without waiting: the record's future, or why it must wait."""
        if self.refused:
            raise self._refusal()
        # Per-record work is what bounds a Python producer: plain bytes without key,
        # serializers, headers, partition or timestamp (the common case) take the
        # shortest path.
        if (
            key is None
            and partition is None
            and headers is None
            and timestamp_ms is None
            and type(value) is bytes
            and self._sticky_plain
        ):
            route = self._topic_cache.get(topic) if type(topic) is str else None
            partition = self._sticky.get(topic)
            if route is not None and route.view is self.conn.view and partition is not None:
                size = RECORD_OVERHEAD_BYTES + len(value)
                if size <= self._max_request_size:
                    try:
                        future, wake = self._append(
                            route.tps[partition],
                            _time_ns() // 1_000_000,
                            None,
                            value,
                            None,
                            size,
                            None,
                            route.batch_size,
                        )
                    except BufferFull:
                        return "buffer"
                    if wake:
                        if future._index > 0:  # the sticky partition's batch is full
                            self._partitioner.on_new_batch(
                                topic, partition, route.partitions, route.available
                            )
                        self._wake()
                    return future
        if self._plain and type(value) is bytes and (key is None or type(key) is bytes):
            size = RECORD_OVERHEAD_BYTES + len(value) + (0 if key is None else len(key))
        else:
            if self._key_serializer is not None or not (key is None or type(key) is bytes):
                key = to_bytes("key", key, self._key_serializer)
            if self._value_serializer is not None or not (value is None or type(value) is bytes):
                value = to_bytes("value", value, self._value_serializer)
            size = RECORD_OVERHEAD_BYTES
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
        if headers:
            headers, header_bytes = header_pairs(headers)
            size += header_bytes
        else:
            headers = None
        if size > self._max_request_size:
            raise MessageSizeTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size={self._max_request_size}"
            )
        try:
            route = self._topic_cache.get(topic)
        except TypeError:  # unhashable: no topic name (check_topic_name says so)
            route = None
        if route is None or route.view is not self.conn.view:
            route = self._route(topic)
            if route is None:
                return "metadata"
        if partition is None:
            if self._user_partitioner is not None:
                partition = self._user_partitioner(key, route.partitions, route.available)
            elif key is None:
                partition = self._sticky.get(topic)
                if partition is None:
                    partition = self._partitioner(topic, key, route.partitions, route.available)
            else:
                partition = self._partitioner(topic, key, route.partitions, route.available)
        tp = route.tps.get(partition)
        if tp is None:
            raise bad_partition(topic, partition, route)
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            raise bad_timestamp(timestamp_ms)
        try:
            future, wake = self._append(
                tp, timestamp_ms, key, value, headers, size, None, route.batch_size
            )
        except BufferFull:
            return "buffer"
        if wake:
            if key is None and self._user_partitioner is None and future._index > 0:
                self._partitioner.on_new_batch(topic, partition, route.partitions, route.available)
            self._wake()
        return future

    def _route(self, topic: str) -> TopicRoute | None:
        """The partitions of `topic` under the current view, cached (None: unknown);
        checks the name first."""
        check_topic_name(topic)
        view = self.conn.view
        found = view.partitions_for(topic)
        if found is None:
            return None
        cached = self._topic_cache.get(topic)
        if cached is not None and cached.partitions != found:
            self._partitioner.reset(topic)
        route = TopicRoute(
            view=view,
            partitions=found,
            available=view.available_partitions(topic),
            tps={p: TopicPartition(topic, p) for p in found},
            batch_size=topic_batch_size(self._accumulator.batch_size, view, topic),
        )
        self._topic_cache[topic] = route
        return route


__all__ = ["BatchPlan", "Headers", "RecordAppender", "Serializer"]
