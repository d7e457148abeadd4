"""The row schema of the source (Spark's Kafka source schema) and its Arrow twin.

`read()` yields `pyarrow.RecordBatch`es, which Spark accepts only when their schema is
exactly `to_arrow_schema(spark_schema, timezone="UTC")`: `binary` (not large_binary),
`int32` partition, `timestamp[us, tz=UTC]`, nullable fields, list items named `element`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from client.spark.decode import Columns

if TYPE_CHECKING:
    import pyarrow as pa

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def spark_schema(include_headers: bool) -> StructType:
    """`key, value, topic, partition, offset, timestamp, timestampType[, headers]`."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for `spark_schema(include_headers)`."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def to_record_batch(
    columns: Columns, *, topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """One Arrow record batch of `columns`; records without headers get null headers
    (as Spark's Kafka source does), not an empty list."""
    import pyarrow as pa

    schema = arrow_schema(include_headers)
    count = len(columns)
    arrays = [
        pa.array(columns.keys, type=pa.binary()),
        pa.array(columns.values, type=pa.binary()),
        pa.array([topic] * count, type=pa.string()),
        pa.array([partition] * count, type=pa.int32()),
        pa.array(columns.offsets, type=pa.int64()),
        pa.array([ts * 1000 for ts in columns.timestamps_ms], type=schema.field("timestamp").type),
        pa.array(columns.timestamp_types, type=pa.int32()),
    ]
    if include_headers:
        arrays.append(
            pa.array(
                [
                    None if headers is None else [{"key": k, "value": v} for k, v in headers]
                    for headers in columns.headers
                ],
                type=schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
