"""The synchronous `Consumer` (kafka-python style): an `AsyncConsumer` on a private event
loop thread, plus an iterator that reads ahead a batch and gives back what it has not
yielded before any other call."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

from client.consumer import AsyncConsumer
from client.consumer_config import PartitionArg, check_poll_args
from client.delivery import RecordDelivery
from client.errors import ConsumerStoppedError, check_config_keys
from client.group import ConsumerRebalanceListener
from client.loop_thread import LoopThread
from client.records import ConsumerRecord, OffsetAndTimestamp, TopicPartition


class Consumer:
    """Synchronous consumer (kafka-python style) over an `AsyncConsumer` run on a
    private event loop thread.

    Example::

        with Consumer("orders", bootstrap_servers="127.0.0.1:9092",
                      auto_offset_reset="earliest", consumer_timeout_ms=1000) as consumer:
            for record in consumer:          # stops after 1 s without records
                print(record.offset, record.value)

    Iteration reads ahead a batch of records; `poll`, `position`, `seek` and the
    other calls first give back what the iterator has not yielded yet, so mixing
    iteration with them never skips a record.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        **config: Any,
    ) -> None:
        check_config_keys("Consumer", config, AsyncConsumer.__init__)
        self._thread = LoopThread(
            "minikafka-consumer",
            closed_error=lambda: ConsumerStoppedError("the consumer is closed"),
        )
        try:
            self._inner: AsyncConsumer = self._thread.run(
                self._make(topics, bootstrap_servers, config)
            )
        except BaseException:
            self._thread.stop()
            raise
        self._iter_buffer: list[ConsumerRecord] = []
        self._iter_index = 0
        self._iter_generations: dict[TopicPartition, int] = {}
        self._closed = False

    @staticmethod
    async def _make(
        topics: Sequence[str], bootstrap_servers: str | Sequence[str], config: dict[str, Any]
    ) -> AsyncConsumer:
        consumer = AsyncConsumer(*topics, bootstrap_servers=bootstrap_servers, **config)
        await consumer.start()
        return consumer

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return self._thread.run(run())

    def _give_back(self) -> None:
        """Return the iterator's read-ahead to the consumer (see the class docstring)."""
        if self._iter_index < len(self._iter_buffer):
            unread = self._iter_buffer[self._iter_index :]
            generations = self._iter_generations
            self._call(lambda: self._delivery().unread(unread, generations))
        self._iter_buffer = []
        self._iter_index = 0

    def subscribe(
        self,
        topics: str | Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """See `AsyncConsumer.subscribe`; the listener is called on the consumer's own
        thread (keep it short, and call no blocking method of this consumer from it)."""
        self._give_back()
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        self._call(lambda: self._inner.subscribe(topic_list, pattern=pattern, listener=listener))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._give_back()
        tps = partitions if isinstance(partitions, str | TopicPartition) else list(partitions)
        self._call(lambda: self._inner.assign(tps))

    def unsubscribe(self) -> None:
        self._give_back()
        self._call(self._inner.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._call(self._inner.assignment)
        return result

    def subscription(self) -> set[str]:
        result: set[str] = self._call(self._inner.subscription)
        return result

    def topics(self) -> set[str]:
        return self._thread.run(self._inner.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._thread.run(self._inner.partitions_for_topic(topic))

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """`{TopicPartition: [ConsumerRecord]}`, waiting up to `timeout_ms` for records."""
        check_poll_args(timeout_ms, max_records)
        self._give_back()
        return self._thread.run(self._inner.getmany(timeout_ms=timeout_ms, max_records=max_records))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._give_back()
        self._call(lambda: self._inner.seek(partition, offset))

    def seek_to_beginning(self, *partitions: PartitionArg) -> None:
        self._give_back()
        self._thread.run(self._inner.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: PartitionArg) -> None:
        self._give_back()
        self._thread.run(self._inner.seek_to_end(*partitions))

    def position(self, partition: TopicPartition) -> int:
        self._give_back()
        return self._thread.run(self._inner.position(partition))

    def highwater(self, partition: TopicPartition) -> int | None:
        result: int | None = self._call(lambda: self._inner.highwater(partition))
        return result

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = partitions if isinstance(partitions, str | TopicPartition) else list(partitions)
        return self._thread.run(self._inner.beginning_offsets(tps))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = partitions if isinstance(partitions, str | TopicPartition) else list(partitions)
        return self._thread.run(self._inner.end_offsets(tps))

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """See `AsyncConsumer.offsets_for_times`."""
        return self._thread.run(self._inner.offsets_for_times(timestamps))

    def pause(self, *partitions: TopicPartition) -> None:
        """See `AsyncConsumer.pause` (the iterator's read-ahead is given back first)."""
        self._give_back()
        self._call(lambda: self._inner.pause(*partitions))

    def resume(self, *partitions: TopicPartition) -> None:
        self._call(lambda: self._inner.resume(*partitions))

    def paused(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._call(self._inner.paused)
        return result

    def commit(self, offsets: dict[TopicPartition, Any] | None = None) -> None:
        """See `AsyncConsumer.commit` (records the iterator read ahead but has not
        yielded yet are given back first, so they are not committed)."""
        self._give_back()
        self._thread.run(self._inner.commit(offsets))

    def commit_async(
        self,
        offsets: dict[TopicPartition, Any] | None = None,
        callback: Callable[[dict[TopicPartition, Any] | None, Any], object] | None = None,
    ) -> concurrent.futures.Future[None]:
        """`commit` without waiting: a future of its outcome; `callback(offsets,
        None or the exception)` runs when it is known (kafka-python's signature)."""
        self._give_back()
        future = asyncio.run_coroutine_threadsafe(self._inner.commit(offsets), self._thread.loop)
        if callback is not None:

            def done(f: concurrent.futures.Future[None]) -> None:
                callback(offsets, None if f.cancelled() else f.exception())

            future.add_done_callback(done)
        return future

    def committed(self, partition: TopicPartition) -> int | None:
        """See `AsyncConsumer.committed`."""
        return self._thread.run(self._inner.committed(partition))

    def metrics(self) -> dict[str, dict[str, float]]:
        """See `AsyncConsumer.metrics`."""
        result: dict[str, dict[str, float]] = self._call(self._inner.metrics)
        return result

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; `StopIteration` after `consumer_timeout_ms` without one,
        or once the consumer is closed."""
        if self._iter_index < len(self._iter_buffer):
            record = self._iter_buffer[self._iter_index]
            self._iter_index += 1
            return record
        if self._closed:
            raise StopIteration
        clock_s = self._inner.clock
        idle_since = clock_s()
        limit_ms = self._inner.consumer_timeout_ms
        while True:
            wait_ms = int(min(1000.0, max(limit_ms - (clock_s() - idle_since) * 1000, 0)))
            try:
                batch, generations = self._thread.run(self._read_ahead(wait_ms))
            except ConsumerStoppedError:
                raise StopIteration from None
            records = [r for recs in batch.values() for r in recs]
            if records:
                self._iter_buffer = records
                self._iter_index = 1
                self._iter_generations = generations
                return records[0]
            if (clock_s() - idle_since) * 1000 >= limit_ms:
                raise StopIteration

    async def _read_ahead(
        self, wait_ms: int
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], dict[TopicPartition, int]]:
        batch = await self._inner.getmany(timeout_ms=wait_ms)
        return batch, self._delivery().generations(batch)

    def _delivery(self) -> RecordDelivery:
        runtime = self._inner._runtime
        assert runtime is not None
        return runtime.delivery

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._iter_buffer = []
        self._iter_index = 0
        try:
            self._thread.run(self._inner.stop(), 10.0)
        finally:
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
