"""Placing records: serialize, check, choose the partition, append to the accumulator.

`RecordAppender.try_append` is the per-record path of `send()` (thread-safe: the sync
`Producer` calls it from user threads) and is kept short: plain bytes without
serializers or headers take the fewest steps. `plan_batch` / `fill` are the path of
`send_batch()`: the records of a call are checked and partitioned with a few C-level
passes, grouped by partition, and appended a batch at a time (`append_many`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from client.accumulator import RECORD_OVERHEAD_BYTES, BufferFull, RecordAccumulator
from client.errors import IllegalStateError, MessageSizeTooLargeError
from client.futures import BatchSlice, FutureBatchMetadata, FutureRecordMetadata
from client.metadata import ClusterView
from client.partitioner import DefaultPartitioner, Partitioner, default_partition
from client.producer_config import topic_batch_size
from client.records import TopicPartition
from client.transport import check_topic_name

Serializer = Callable[[Any], bytes | None]
_time_ns = time.time_ns


class _HasView(Protocol):
    view: ClusterView


class _NoConnection:
    @property
    def view(self) -> ClusterView:
        raise IllegalStateError("call `await producer.start()` first")


_NO_VIEW: _HasView = _NoConnection()  # type: ignore[assignment]
Headers = Sequence[tuple[str, bytes]] | None


class _TopicRoute(NamedTuple):
    """What `send()` needs to place a record of one topic, cached per metadata view."""

    view: ClusterView
    partitions: list[int]
    available: list[int]
    tps: dict[int, TopicPartition]
    batch_size: int


class BatchGroup(NamedTuple):
    """The records of a `send_batch()` call bound for one partition, in call order."""

    tp: TopicPartition
    keys: list[bytes | None] | None
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes]] | None] | None
    sizes: list[int]


class BatchPlan:
    """A `send_batch()` call being appended: its groups, how far each got, the batch
    slices its records went to. `fill` may take several rounds (waiting for buffer space
    between them); the future exists once every record is appended."""

    def __init__(
        self,
        topic: str,
        timestamp_ms: int,
        batch_size: int,
        groups: list[BatchGroup],
        order: list[int] | None,
    ) -> None:
        self.topic = topic
        self.timestamp_ms = timestamp_ms
        self.batch_size = batch_size
        self.groups = groups
        self.order = order
        self.group_index = 0
        self.taken = 0  # records of the current group already appended
        self.slices: list[BatchSlice] = []

    @property
    def done(self) -> bool:
        return self.group_index >= len(self.groups)

    def future(self) -> FutureBatchMetadata:
        return FutureBatchMetadata(self.slices, self.order)


def header_pairs(headers: Any) -> tuple[list[tuple[str, bytes]], int]:
    """`headers` as a list of `(str, bytes)` pairs and their estimated size; a clear
    `TypeError` for anything else (a dict, a pair of the wrong shape)."""
    if isinstance(headers, str | bytes | dict) or not isinstance(headers, Sequence):
        raise TypeError(
            "headers must be a list of (str, bytes) pairs, e.g. [('trace-id', b'42')], got "
            f"{type(headers).__name__}"
        )
    pairs: list[tuple[str, bytes]] = []
    size = 0
    for pair in headers:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"each header must be a (str, bytes) pair, got {pair!r}")
        name, data = pair
        if not isinstance(name, str) or not isinstance(data, bytes):
            raise TypeError(
                f"each header must be a (str, bytes) pair, got ({type(name).__name__}, "
                f"{type(data).__name__})"
            )
        size += len(name) + len(data) + 4
        pairs.append((name, data))
    return pairs, size


def to_bytes(what: str, data: Any, serializer: Serializer | None) -> bytes | None:
    """`data` (serialized first when a serializer is given) as bytes or None, with
    kafka-python's semantics; a clear `TypeError` for anything else."""
    if serializer is not None:
        data = serializer(data)
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(
        f"{what} must be bytes or None, got {type(data).__name__}; "
        f"pass {what}_serializer= to convert it (e.g. str.encode)"
    )


class RecordAppender:
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
        self.conn: _HasView = _NO_VIEW
        #: Set once the producer is closed or its sender crashed: appends raise
        #: `refusal()` from then on.
        self.refused = False
        self._topic_cache: dict[str, _TopicRoute] = {}

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
            raise _bad_partition(topic, partition, route)
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            raise _bad_timestamp(timestamp_ms)
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

    def _cached_route(self, topic: str) -> _TopicRoute | None:
        try:
            route = self._topic_cache.get(topic)
        except TypeError:  # unhashable: no topic name (check_topic_name says so)
            route = None
        if route is None or route.view is not self.conn.view:
            route = self._route(topic)
        return route

    def _route(self, topic: str) -> _TopicRoute | None:
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
        route = _TopicRoute(
            view=view,
            partitions=found,
            available=view.available_partitions(topic),
            tps={p: TopicPartition(topic, p) for p in found},
            batch_size=topic_batch_size(self._accumulator.batch_size, view, topic),
        )
        self._topic_cache[topic] = route
        return route

    # ---- many records (send_batch) ----------------------------------------------------

    def plan_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Headers] | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> BatchPlan | Literal["metadata"]:
        """Check, serialize and partition the records of a `send_batch()` call; raises
        (before anything is appended) for any bad record. "metadata": the topic's
        partitions are not known yet."""
        if self.refused:
            raise self._refusal()
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise TypeError(f"values must be a list of record values, got {type(values).__name__}")
        count = len(values)
        value_list = self._serialized("value", values, self._value_serializer)
        key_list = None
        if keys is not None:
            if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
                raise TypeError(f"keys must be a list (or None), got {type(keys).__name__}")
            if len(keys) != count:
                raise ValueError(f"keys has {len(keys)} items for {count} values")
            key_list = self._serialized("key", keys, self._key_serializer)
            if all(k is None for k in key_list):
                key_list = None
        sizes = [RECORD_OVERHEAD_BYTES + (0 if v is None else len(v)) for v in value_list]
        if key_list is not None:
            sizes = [s + (0 if k is None else len(k)) for s, k in zip(sizes, key_list, strict=True)]
        header_list: list[list[tuple[str, bytes]] | None] | None = None
        if headers is not None:
            if isinstance(headers, str | bytes) or not isinstance(headers, Sequence):
                raise TypeError(
                    "headers must be a list with one list of (str, bytes) pairs (or None) per "
                    f"value, got {type(headers).__name__}"
                )
            if len(headers) != count:
                raise ValueError(f"headers has {len(headers)} items for {count} values")
            header_list = []
            for index, item in enumerate(headers):
                if item:
                    pairs, extra = header_pairs(item)
                    header_list.append(pairs)
                    sizes[index] += extra
                else:
                    header_list.append(None)
        if sizes and max(sizes) > self._max_request_size:
            raise MessageSizeTooLargeError(
                f"record {sizes.index(max(sizes))} of ~{max(sizes)} bytes exceeds "
                f"max_request_size={self._max_request_size}"
            )
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            raise _bad_timestamp(timestamp_ms)
        route = self._cached_route(topic)
        if route is None:
            return "metadata"
        targets = self._partitions_of(topic, route, key_list, partition, count)
        if isinstance(targets, int):
            group = BatchGroup(route.tps[targets], key_list, value_list, header_list, sizes)
            return BatchPlan(topic, timestamp_ms, route.batch_size, [group], None)
        by_partition: dict[int, list[int]] = {}
        for index, target in enumerate(targets):
            by_partition.setdefault(target, []).append(index)
        groups = [
            BatchGroup(
                route.tps[target],
                None if key_list is None else [key_list[i] for i in indices],
                [value_list[i] for i in indices],
                None if header_list is None else [header_list[i] for i in indices],
                [sizes[i] for i in indices],
            )
            for target, indices in by_partition.items()
        ]
        order = [i for indices in by_partition.values() for i in indices]
        return BatchPlan(topic, timestamp_ms, route.batch_size, groups, order)

    def _serialized(
        self, what: str, items: Sequence[Any], serializer: Serializer | None
    ) -> list[bytes | None]:
        if serializer is None and set(map(type, items)) <= {bytes, type(None)}:
            return list(items)
        return [to_bytes(what, item, serializer) for item in items]

    def _partitions_of(
        self,
        topic: str,
        route: _TopicRoute,
        keys: list[bytes | None] | None,
        partition: int | None,
        count: int,
    ) -> int | list[int]:
        """One partition for every record, or the partition of each record."""
        if partition is not None:
            if route.tps.get(partition) is None:
                raise _bad_partition(topic, partition, route)
            return partition
        if self._user_partitioner is not None:
            user = self._user_partitioner
            targets = [user(k, route.partitions, route.available) for k in keys or [None] * count]
        elif keys is None:
            sticky = self._sticky.get(topic)
            if sticky is None:
                sticky = self._partitioner(topic, None, route.partitions, route.available)
            return sticky
        else:
            sticky = self._sticky.get(topic)
            partitions = len(route.partitions)
            targets = []
            for key in keys:
                if key is not None:
                    targets.append(default_partition(key, partitions))
                else:
                    if sticky is None:
                        sticky = self._partitioner(topic, None, route.partitions, route.available)
                    targets.append(sticky)
        for target in set(targets):
            if route.tps.get(target) is None:
                raise _bad_partition(topic, target, route)
        return targets

    def fill(self, plan: BatchPlan) -> bool:
        """Append as much of `plan` as the buffer takes now; True when all of it is."""
        accumulator = self._accumulator
        wake = False
        while not plan.done:
            group = plan.groups[plan.group_index]
            start = plan.taken
            slices, taken, woke = accumulator.append_many(
                group.tp,
                plan.timestamp_ms,
                None if group.keys is None else group.keys[start:],
                group.values[start:] if start else group.values,
                None if group.headers is None else group.headers[start:],
                group.sizes[start:] if start else group.sizes,
                plan.batch_size,
            )
            plan.slices.extend(slices)
            wake = wake or woke
            plan.taken += taken
            if plan.taken < len(group.values):
                break
            filled = any(piece.batch.closed for piece in slices)
            if filled and group.keys is None and self._user_partitioner is None:
                # The sticky partition's batch is full: unkeyed records move on (KIP-480).
                self._partitioner.on_new_batch(
                    plan.topic, group.tp.partition, *self._route_lists(plan.topic)
                )
            plan.group_index += 1
            plan.taken = 0
        if wake:
            self._wake()
        return plan.done

    def _route_lists(self, topic: str) -> tuple[list[int], list[int]]:
        route = self._topic_cache.get(topic)
        if route is None:
            return [], []
        return route.partitions, route.available


def _bad_partition(topic: str, partition: object, route: _TopicRoute) -> Exception:
    if isinstance(partition, bool) or not isinstance(partition, int):
        return TypeError(
            f"partition must be an int or None, got {type(partition).__name__} {partition!r}"
        )
    return ValueError(
        f"partition {partition} of {topic!r} does not exist (partitions {route.partitions})"
    )


def _bad_timestamp(timestamp_ms: object) -> TypeError:
    return TypeError(
        "timestamp_ms must be an int >= 0 (milliseconds since the epoch) or None, got "
        f"{type(timestamp_ms).__name__} {timestamp_ms!r}"
    )
