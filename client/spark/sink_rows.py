"""The sink's columns: check a DataFrame's schema, and cut Arrow batches into
`send_batch()` calls.

Columns mirror Spark's Kafka sink: `value` (required, binary or string), `key` (binary
or string), `topic` (string; the `topic` option overrides it), `partition` (int; null
lets the producer's partitioner choose) and `headers`
(`array<struct<key: string, value: binary>>`). Other columns are ignored, as Spark's
Kafka sink does. Pure: `check_sink_schema` inspects a Spark schema, `send_groups` works
on one `pyarrow.RecordBatch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from client.spark.errors import SinkOptionError

if TYPE_CHECKING:
    import pyarrow as pa

_COLUMNS_HELP: Final = (
    "the minikafka sink writes columns value (binary or string, required), key (binary or "
    "string), topic (string, unless the topic option is set), partition (int) and headers "
    "(array<struct<key:string,value:binary>>)"
)


class SinkColumns(msgspec.Struct, frozen=True, kw_only=True):
    """Which optional sink columns a DataFrame has."""

    key: bool = False
    topic: bool = False
    partition: bool = False
    headers: bool = False


class SendGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Rows of one batch going to one topic (and one partition, or the partitioner),
    in their order in the batch: the arguments of one `Producer.send_batch()` call."""

    topic: str
    partition: int | None
    values: list[bytes | None]
    keys: list[bytes | None] | None
    headers: list[list[tuple[str, bytes]] | None] | None


def _is_headers(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType):
        return False
    item = data_type.elementType
    if not isinstance(item, StructType) or [f.name for f in item.fields] != ["key", "value"]:
        return False
    return isinstance(item["key"].dataType, StringType) and isinstance(
        item["value"].dataType, BinaryType | StringType
    )


def check_sink_schema(schema: StructType, *, topic_option: str | None) -> SinkColumns:
    """The optional columns of `schema`; `SinkOptionError` naming the column when one is
    missing or of a wrong type."""
    types = {field.name: field.dataType for field in schema.fields}

    def bad(name: str) -> SinkOptionError:
        return SinkOptionError(
            f"column {name!r} has type {types[name].simpleString()}; {_COLUMNS_HELP}"
        )

    if "value" not in types:
        present = ", ".join(types) or "none"
        raise SinkOptionError(f"no value column (columns: {present}); {_COLUMNS_HELP}")
    for name in ("value", "key"):
        if name in types and not isinstance(types[name], BinaryType | StringType):
            raise bad(name)
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise bad("topic")
    if "topic" not in types and topic_option is None:
        raise SinkOptionError(
            "no topic: set the topic option or give a topic column (string); " + _COLUMNS_HELP
        )
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise bad("partition")
    if "headers" in types and not _is_headers(types["headers"]):
        raise bad("headers")
    return SinkColumns(
        key="key" in types,
        topic="topic" in types and topic_option is None,
        partition="partition" in types,
        headers="headers" in types,
    )


def _as_bytes(column: pa.ChunkedArray | pa.Array) -> list[bytes | None]:
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(
            pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary()
        )
    values: list[bytes | None] = column.to_pylist()
    return values


def _headers(column: pa.Array, row_offset: int) -> list[list[tuple[str, bytes]] | None]:
    out: list[list[tuple[str, bytes]] | None] = []
    for index, item in enumerate(column.to_pylist()):
        if not item:
            out.append(None)
            continue
        pairs: list[tuple[str, bytes]] = []
        for header in item:
            name, data = header["key"], header["value"]
            if name is None or data is None:
                raise SinkOptionError(
                    f"row {row_offset + index}: header {header!r} has a null key or value; "
                    "the minikafka sink writes only headers with both"
                )
            pairs.append((name, data.encode() if isinstance(data, str) else data))
        out.append(pairs)
    return out


def send_groups(
    batch: pa.RecordBatch, columns: SinkColumns, *, topic: str | None, row_offset: int = 0
) -> list[SendGroup]:
    """Cut one Arrow batch into `send_batch()` calls: one per (topic, partition) in the
    order each first appears, each keeping its rows in batch order (so rows with one
    key keep their order). `row_offset` numbers rows in error messages."""
    values = _as_bytes(batch.column("value"))
    keys = _as_bytes(batch.column("key")) if columns.key else None
    headers = _headers(batch.column("headers"), row_offset) if columns.headers else None
    count = batch.num_rows
    topics: Sequence[Any] = batch.column("topic").to_pylist() if columns.topic else [topic] * count
    partitions: Sequence[Any] = (
        batch.column("partition").to_pylist() if columns.partition else [None] * count
    )
    if not count:
        return []
    if not columns.partition and (not columns.topic or len(set(topics)) == 1):
        if topics[0] is None:
            raise SinkOptionError(f"row {row_offset}: the topic column is null")
        return [
            SendGroup(topic=topics[0], partition=None, values=values, keys=keys, headers=headers)
        ]
    rows: dict[tuple[str, int | None], list[int]] = {}
    for index, (name, partition) in enumerate(zip(topics, partitions, strict=True)):
        if name is None:
            raise SinkOptionError(f"row {row_offset + index}: the topic column is null")
        if partition is not None and partition < 0:
            raise SinkOptionError(f"row {row_offset + index}: partition {partition} is negative")
        rows.setdefault((name, partition), []).append(index)
    return [
        SendGroup(
            topic=name,
            partition=partition,
            values=[values[i] for i in indices],
            keys=None if keys is None else [keys[i] for i in indices],
            headers=None if headers is None else [headers[i] for i in indices],
        )
        for (name, partition), indices in rows.items()
    ]
