"""The `minikafka` PySpark data source: streaming and batch reads of committed records.

    spark.dataSource.register(MiniKafkaDataSource)
    df = (spark.readStream.format("minikafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())

Options and rows mirror Spark's Kafka source. Offsets are each partition's high
watermark, never the log end, so only committed records are read. Spark calls the
planning methods in a long-lived driver-side Python worker and `read()` in executor
workers on another reader instance, so everything `read()` needs travels in the
picklable `TopicPartitionRange`, and gRPC channels are opened lazily where used.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from client.spark.errors import DataLossError, SourceOptionError
from client.spark.offsets import (
    TP,
    TRUNCATED_KEY,
    NestedOffsets,
    Offsets,
    OffsetSpec,
    cap,
    delay_batch,
    epochs_of,
    flatten,
    nest,
    plan_ranges,
    rate_limit,
    resolve_spec,
    resolve_timestamps,
    split_ranges,
    timestamps_to_look_up,
    total_lag,
)
from client.spark.options import (
    DEFAULT_FETCH,
    FetchConfig,
    SourceOptions,
    TlsSettings,
    parse_options,
)
from client.spark.schema import spark_schema, to_record_batch
from client.spark.sink import make_stream_writer, make_writer
from client.spark.wire import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ClusterSnapshot, WireReader

logger = logging.getLogger(__name__)


def monotonic_ms() -> float:
    return time.monotonic() * 1000


@dataclass(frozen=True)
class TopicPartitionRange(InputPartition):
    """One Spark task: offsets `[start, end)` of one partition, and how to read them."""

    bootstrap_servers: tuple[str, ...]
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    timeout_ms: int
    tls: TlsSettings | None = None
    fetch: FetchConfig = DEFAULT_FETCH


def read_range(part: TopicPartitionRange) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of exactly the records `[part.start, part.end)` (executor side)."""
    with WireReader(
        part.bootstrap_servers, timeout_ms=part.timeout_ms, tls=part.tls, fetch=part.fetch
    ) as wire:
        for columns in wire.fetch_range(
            part.topic,
            part.partition,
            part.start,
            part.end,
            fail_on_data_loss=part.fail_on_data_loss,
        ):
            yield to_record_batch(
                columns,
                topic=part.topic,
                partition=part.partition,
                include_headers=part.include_headers,
            )


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = spark_schema(options.include_headers)
    if schema != expected:
        raise SourceOptionError(
            "the minikafka source has a fixed schema (Spark's Kafka source schema); do not "
            f"call .schema(...). Expected {expected.simpleString()}, got {schema.simpleString()}"
        )


class _Planner:
    """Driver-side offset queries shared by the stream and batch readers."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._wire: WireReader | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_wire"] = None  # never pickle a live channel
        return state

    @property
    def wire(self) -> WireReader:
        if self._wire is None:
            self._wire = WireReader(
                self.options.bootstrap_servers,
                timeout_ms=self.options.poll_timeout_ms,
                tls=self.options.tls,
                fetch=self.options.fetch,
            )
        return self._wire

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    def partitions(self, snapshot: ClusterSnapshot) -> list[TP]:
        """The partitions this query reads, as the cluster has them now."""
        options = self.options
        if options.assigned:
            return list(options.assigned)
        return sorted(tp for tp in snapshot.partitions if options.matches(tp[0]))

    def earliest(self, tps: Sequence[TP]) -> Offsets:
        return self.wire.list_offsets(tps, EARLIEST_TIMESTAMP) if tps else {}

    def latest(self, tps: Sequence[TP]) -> Offsets:
        return self.wire.list_offsets(tps, LATEST_TIMESTAMP) if tps else {}

    def resolve_start(self) -> Offsets:
        tps = self.partitions(self.wire.refresh())
        spec = self.options.starting
        if spec.kind == "timestamp":
            return self.by_timestamp(
                spec, tps, no_match=self.options.starting_no_match, option="startingTimestamp"
            )
        return resolve_spec(
            spec,
            tps,
            earliest=self.earliest(tps) if spec.kind != "latest" else {},
            latest=self.latest(tps) if spec.kind != "earliest" else {},
            option="startingOffsets",
        )

    def by_timestamp(
        self, spec: OffsetSpec, tps: Sequence[TP], *, no_match: str, option: str
    ) -> Offsets:
        """Offsets of a timestamp spec: per partition the first offset whose record is
        at least that recent (ListOffsets by timestamp), `no_match` where none is."""
        times = timestamps_to_look_up(spec, tps, option=option)
        found: Offsets = {}
        for timestamp_ms in sorted(set(times.values())):
            found.update(
                self.wire.list_offsets(
                    [tp for tp, t in times.items() if t == timestamp_ms], timestamp_ms
                )
            )
        latest = self.latest(sorted(tp for tp, offset in found.items() if offset < 0))
        return resolve_timestamps(
            found, times=times, latest=latest, no_match=no_match, option=option
        )

    def input_partitions(self, start: Offsets, end: Offsets) -> list[TopicPartitionRange]:
        new = sorted(tp for tp in end if tp not in start)
        ranges, backwards = plan_ranges(start, end, earliest=self.earliest(new))
        for item in backwards:
            self.data_loss(
                f"{item.topic}-{item.partition} offsets went back from {item.start} to {item.end}"
            )
        options = self.options
        return [
            TopicPartitionRange(
                bootstrap_servers=options.bootstrap_servers,
                topic=r.topic,
                partition=r.partition,
                start=r.start,
                end=r.end,
                include_headers=options.include_headers,
                fail_on_data_loss=options.fail_on_data_loss,
                timeout_ms=options.poll_timeout_ms,
                tls=options.tls,
                fetch=options.fetch,
            )
            for r in split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
        ]

    def data_loss(self, message: str) -> None:
        text = f"{message}. Some data may have been lost; set failOnDataLoss=false to go on."
        if self.options.fail_on_data_loss:
            raise DataLossError(text)
        logger.warning("%s", text)


class MiniKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of committed records; offsets are per-partition high watermarks."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner = _Planner(options)
        self._known: set[TP] = set()  # every partition whose offsets went to Spark
        self._last_hw: Offsets = {}
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this
        self._last_trigger_ms: float | None = None  # minOffsetsPerTrigger: last batch run
        self._truncated_records = 0  # delivered records found truncated (this run)
        self._checked: tuple[str, Offsets, Offsets] | None = None  # see _checked_start
        #: Monotonic milliseconds (tests may replace it).
        self.clock: Callable[[], float] = monotonic_ms

    # -- driver side ---------------------------------------------------------------------

    def initialOffset(self) -> NestedOffsets:
        return nest(self._planner.resolve_start())

    def getDefaultReadLimit(self) -> ReadLimit:
        """One limit only (Python has no composite limit): with `minOffsetsPerTrigger`
        it is `ReadMinRows`, and `latestOffset` applies `maxOffsetsPerTrigger` and
        `maxTriggerDelay` itself."""
        options = self.options
        if options.min_offsets_per_trigger:
            return ReadMinRows(options.min_offsets_per_trigger)
        limit = options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._high_watermarks(())
        logger.info("AvailableNow target offsets: %s", nest(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> NestedOffsets:
        """The end of the next micro-batch, with the leader epoch of each partition's
        last record in it (see `_with_epochs`)."""
        begin, begin_epochs = flatten(start), epochs_of(start)
        latest = cap(self._high_watermarks(begin), self._target)
        if any(offset > begin.get(tp, 0) for tp, offset in latest.items()):
            # A batch will read on: check first that the log under the start is the
            # one delivered (a truncated log may have been refilled past it).
            begin, begin_epochs = self._checked_start(start, fresh=True)
        for tp, offset in begin.items():
            latest[tp] = max(latest.get(tp, offset), offset)  # never behind the start
        max_rows: int | None = None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadMinRows):
            now_ms = self.clock()
            if delay_batch(
                new_records=total_lag(begin, latest),
                min_records=limit.min_rows,
                now_ms=now_ms,
                last_trigger_ms=self._last_trigger_ms,
                max_delay_ms=self.options.max_trigger_delay_ms,
            ):
                self._known.update(begin)
                return nest(begin, begin_epochs)
            self._last_trigger_ms = now_ms
            max_rows = self.options.max_offsets_per_trigger
        if max_rows is not None:
            new = sorted(tp for tp in latest if tp not in begin)
            effective = {**self._planner.earliest(new), **begin}
            latest = rate_limit(effective, latest, max_rows)
        self._known.update(latest)
        return nest(latest, self._with_epochs(begin, begin_epochs, latest))

    def _with_epochs(self, begin: Offsets, begin_epochs: Offsets, latest: Offsets) -> Offsets:
        """Per partition, the leader epoch of the record before its latest offset: kept
        from the start where the partition did not move, else read from the leader. The
        next batch checks it against the leader's log (`partitions`)."""
        epochs: Offsets = {}
        wire = self._planner.wire
        for (topic, partition), offset in sorted(latest.items()):
            tp = (topic, partition)
            if begin.get(tp) == offset:
                if tp in begin_epochs:
                    epochs[tp] = begin_epochs[tp]
            elif offset > 0:
                epoch = wire.epoch_of(topic, partition, offset - 1)
                if epoch is not None:
                    epochs[tp] = epoch
        return epochs

    def _high_watermarks(self, start: Iterable[TP]) -> Offsets:
        """Each partition's HW: of the partitions the query reads now, those it started
        from and those reported before (a vanished one is data loss).

        The latest offset never goes back: a new leader whose HW has not yet reached the
        start of its epoch answers OFFSET_NOT_AVAILABLE (KIP-207) and the wire reader
        asks again until it has caught up.
        """
        planner = self._planner
        snapshot = planner.wire.refresh()
        known = self._known | set(start)
        gone = sorted(tp for tp in known if tp not in snapshot.partitions)
        if gone:
            planner.data_loss(
                "partitions "
                + ", ".join(f"{t}-{p}" for t, p in gone)
                + " no longer exist in the cluster"
            )
        latest = planner.latest(sorted(set(planner.partitions(snapshot)) | (known - set(gone))))
        self._last_hw = latest
        return latest

    def reportLatestOffset(self) -> NestedOffsets | None:
        """Each partition's high watermark (the progress's `latestOffset`), and the
        records this run found truncated under the query (`TRUNCATED_KEY`)."""
        if not self._last_hw:
            return None
        return {**nest(self._last_hw), TRUNCATED_KEY: {"records": self._truncated_records}}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, _ = self._checked_start(start, fresh=False)
        until = flatten(end)
        if begin == until:
            return []
        return self._planner.input_partitions(begin, until)

    def _checked_start(self, start: dict[str, Any], *, fresh: bool) -> tuple[Offsets, Offsets]:
        """A batch's start offsets checked against the leaders' logs (`_validated`) and
        the epochs still valid for them. `latestOffset` checks (`fresh`) whenever a batch
        will read on; `partitions` reuses that answer for the same start, and checks
        itself when there is none (a batch replayed after a restart)."""
        key = json.dumps(start, sort_keys=True)
        if fresh or self._checked is None or self._checked[0] != key:
            begin, epochs = flatten(start), epochs_of(start)
            checked = self._validated(begin, epochs)
            valid = {tp: e for tp, e in epochs.items() if checked.get(tp) == begin.get(tp)}
            self._checked = (key, checked, valid)
        return dict(self._checked[1]), dict(self._checked[2])

    def _validated(self, begin: Offsets, epochs: Offsets) -> Offsets:
        """`begin`, checked against each leader's log with the leader epoch of the last
        record delivered (the consumer's diverging-epoch check, KIP-320): where the log
        was truncated below a delivered offset, fail (`failOnDataLoss=true`) or go on
        from the divergence point, counting the records that changed."""
        out = dict(begin)
        wire = self._planner.wire
        for (topic, partition), epoch in sorted(epochs.items()):
            offset = begin.get((topic, partition))
            if offset is None or offset <= 0:
                continue
            diverged = wire.divergence(topic, partition, offset, epoch)
            if diverged is None:
                continue
            message = (
                f"{topic}-{partition} was truncated under the query: offsets up to {offset} "
                f"were delivered (the last in leader epoch {epoch}), but the leader's log "
                f"diverges from them at offset {diverged} (an unclean leader election?); "
                f"offsets [{diverged}, {offset}) now hold other records"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(message + ". Set failOnDataLoss=false to read on from there.")
            logger.warning("%s; reading on from offset %d", message, diverged)
            self._truncated_records += offset - diverged
            out[(topic, partition)] = diverged
        return out

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint (commit may never run)."""

    def stop(self) -> None:
        self._planner.close()

    # -- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicPartitionRange)
        return read_range(partition)


class MiniKafkaBatchReader(DataSourceReader):
    """`spark.read`: committed records between `startingOffsets` and `endingOffsets`."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner = _Planner(options)

    def partitions(self) -> Sequence[InputPartition]:
        planner = self._planner
        try:
            start = planner.resolve_start()
            assert self.options.ending is not None
            tps = sorted(start)
            hw = planner.latest(tps)
            ending = self.options.ending
            if ending.kind == "timestamp":
                # As Spark's Kafka source: no record that recent ends at the latest offset.
                end = planner.by_timestamp(ending, tps, no_match="latest", option="endingTimestamp")
            else:
                end = resolve_spec(ending, tps, earliest={}, latest=hw, option="endingOffsets")
            past = sorted(tp for tp in tps if end[tp] > hw[tp])
            if past:
                raise SourceOptionError(
                    "endingOffsets past the high watermark (only committed records can be "
                    "read): " + ", ".join(f"{t}-{p} {end[(t, p)]} > {hw[(t, p)]}" for t, p in past)
                )
            _, backwards = plan_ranges(start, end, earliest={})
            if backwards:
                raise SourceOptionError(
                    "endingOffsets must not be below startingOffsets: "
                    + ", ".join(f"{r.topic}-{r.partition} {r.start} > {r.end}" for r in backwards)
                )
            return planner.input_partitions(start, end)
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TopicPartitionRange):
            # `partitions()` found nothing to read: Spark then runs one task with a
            # placeholder `InputPartition(None)`.
            return iter(())
        return read_range(partition)


class MiniKafkaDataSource(DataSource):
    """Register with `spark.dataSource.register(MiniKafkaDataSource)`; format `minikafka`
    for reads (`spark.read`, `spark.readStream`) and writes (`df.write`, `df.writeStream`,
    see `client.spark.sink`)."""

    @classmethod
    def name(cls) -> str:
        return "minikafka"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options, streaming=False)
        _check_schema(schema, options)
        return MiniKafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_options(self.options, streaming=True)
        _check_schema(schema, options)
        return MiniKafkaStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return make_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return make_stream_writer(self.options, schema, overwrite)
