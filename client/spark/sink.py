"""The `minikafka` PySpark sink: `df.write.format("minikafka")` and
`df.writeStream.format("minikafka")`.

    (df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")
       .write.format("minikafka")
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .option("topic", "orders")
       .mode("append").save())

Spark builds the writer on the driver and pickles it to every task; each task's
`write()` gets the task's rows as Arrow record batches, builds its own `Producer` on the
executor (never pickled), hands each batch to `Producer.send_batch()` a (topic,
partition) group at a time, flushes, and only then returns its commit message. Any
delivery error fails the task, and Spark retries it or fails the job.

Delivery is at-least-once, as with Spark's Kafka sink: the producer is idempotent (its
own retries write nothing twice), but a retried task or a replayed micro-batch writes
its rows again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from client.futures import FutureBatchMetadata
from client.producer import AsyncProducer, Producer
from client.spark.errors import SinkOptionError, SinkWriteError
from client.spark.sink_options import SinkOptions, parse_sink_options
from client.spark.sink_rows import SinkColumns, check_sink_schema, send_groups
from minikafka.errors import MiniKafkaError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote: rows per topic (every row acknowledged by the cluster)."""

    rows: int
    rows_by_topic: dict[str, int] = field(default_factory=dict)


def _check_producer_config(options: SinkOptions) -> None:
    """Fail on the driver, before any task runs, when the producer settings are bad
    (constructing a producer does no I/O)."""
    try:
        AsyncProducer(list(options.bootstrap_servers), **options.producer_config)
    except (TypeError, ValueError) as exc:
        raise SinkOptionError(f"bad producer setting in the kafka.* options: {exc}") from exc


def _raise_failed(future: FutureBatchMetadata, topic: str, rows: int) -> None:
    error = future.exception(timeout=0)
    if error is None:
        return
    code = error.code if isinstance(error, MiniKafkaError) else None
    raise SinkWriteError(
        f"could not deliver {rows} rows to topic {topic!r}: {type(error).__name__}: {error}",
        code=code,
    ) from error


def write_task(
    options: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> SinkCommitMessage:
    """Executor side: deliver every row of `batches` and return once all are
    acknowledged; raise `SinkWriteError` (failing the task) on any delivery error."""
    producer = Producer(list(options.bootstrap_servers), **options.producer_config)
    failed = True
    try:
        pending: list[tuple[FutureBatchMetadata, str, int]] = []
        by_topic: dict[str, int] = {}
        rows = 0
        for batch in batches:
            for group in send_groups(batch, columns, topic=options.topic, row_offset=rows):
                future = producer.send_batch(
                    group.topic, group.values, group.keys, group.headers, group.partition
                )
                pending.append((future, group.topic, len(group.values)))
                by_topic[group.topic] = by_topic.get(group.topic, 0) + len(group.values)
            rows += batch.num_rows
            # Fail fast on a failed call, and keep only calls still in flight.
            still: list[tuple[FutureBatchMetadata, str, int]] = []
            for item in pending:
                if item[0].done():
                    _raise_failed(*item)
                else:
                    still.append(item)
            pending = still
        producer.flush()
        for item in pending:
            _raise_failed(*item)
        failed = False
        return SinkCommitMessage(rows=rows, rows_by_topic=by_topic)
    finally:
        # After a failure, drop what is still buffered: the task fails anyway.
        producer.close(timeout=0 if failed else None)


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, dict[str, int]]:
    rows = 0
    by_topic: dict[str, int] = {}
    for message in messages:
        if isinstance(message, SinkCommitMessage):
            rows += message.rows
            for topic, count in message.rows_by_topic.items():
                by_topic[topic] = by_topic.get(topic, 0) + count
    return rows, by_topic


class _SinkPlan:
    """Options and columns checked on the driver; travels to the tasks (picklable)."""

    def __init__(self, raw_options: Any, schema: StructType) -> None:
        self.options = parse_sink_options(raw_options)
        self.columns = check_sink_schema(schema, topic_option=self.options.topic)
        _check_producer_config(self.options)


class MiniKafkaWriter(DataSourceArrowWriter):
    """`df.write.format("minikafka")` (mode `append`)."""

    def __init__(self, plan: _SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.plan.options, self.plan.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, by_topic = _summary(messages)
        logger.info("minikafka sink wrote %d rows: %s", rows, by_topic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, by_topic = _summary(messages)
        logger.warning(
            "minikafka sink write failed; %d rows of the tasks that finished were written "
            "(%s) and stay in the topic",
            rows,
            by_topic,
        )


class MiniKafkaStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("minikafka")`: at-least-once, one task per input partition
    of each micro-batch."""

    def __init__(self, plan: _SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.plan.options, self.plan.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, by_topic = _summary(messages)
        logger.info("minikafka sink micro-batch %d wrote %d rows: %s", batchId, rows, by_topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, by_topic = _summary(messages)
        logger.warning(
            "minikafka sink micro-batch %d failed; %d rows were written (%s) and are "
            "written again when the batch is retried (at-least-once)",
            batchId,
            rows,
            by_topic,
        )


def make_writer(raw_options: Any, schema: StructType, overwrite: bool) -> MiniKafkaWriter:
    if overwrite:
        raise SinkOptionError(
            "the minikafka sink only appends to topics: use mode('append'), not overwrite"
        )
    return MiniKafkaWriter(_SinkPlan(raw_options, schema))


def make_stream_writer(
    raw_options: Any, schema: StructType, overwrite: bool
) -> MiniKafkaStreamWriter:
    """`overwrite` (output mode complete) writes the whole result table every trigger,
    as Spark's Kafka sink does: a topic has nothing to overwrite."""
    return MiniKafkaStreamWriter(_SinkPlan(raw_options, schema))
