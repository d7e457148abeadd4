"""The Spark sink's option parsing (client/spark/sink_options.py) and row grouping
(client/spark/sink_rows.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from client.spark.errors import SinkOptionError
from client.spark.sink_options import PRODUCER_OPTIONS, parse_sink_options
from client.spark.sink_rows import SendGroup, SinkColumns, check_sink_schema, send_groups

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_make_an_idempotent_acks_all_producer() -> None:
    got = parse_sink_options({**BASE, "topic": " out "})
    assert got.bootstrap_servers == ("127.0.0.1:9092",)
    assert got.topic == "out"
    assert got.producer_config == {"acks": "all", "client_id": "minikafka-spark"}


def test_kafka_options_become_producer_keywords() -> None:
    got = parse_sink_options(
        {
            "BOOTSTRAP.SERVERS": "h1:1,h2:2",
            "kafka.acks": "1",
            "kafka.linger.ms": "20",
            "kafka.batch.size": "65536",
            "kafka.compression.type": "none",
            "kafka.enable.idempotence": "FALSE",
            "kafka.max.in.flight.requests.per.connection": "3",
            "kafka.client.id": "job-7",
            "checkpointLocation": "/tmp/x",
            "path": "ignored",
        }
    )
    assert got.bootstrap_servers == ("h1:1", "h2:2")
    assert got.topic is None
    assert got.producer_config == {
        "acks": "1",
        "linger_ms": 20,
        "batch_size": 65536,
        "compression_type": None,
        "enable_idempotence": False,
        "max_in_flight_requests_per_connection": 3,
        "client_id": "job-7",
    }


def test_tls_options_become_the_producers_tls_settings() -> None:
    got = parse_sink_options(
        {
            **BASE,
            "kafka.security.protocol": "ssl",
            "kafka.ssl.cafile": "/certs/ca.crt",
            "kafka.ssl.certfile": "/certs/client.crt",
            "kafka.ssl.keyfile": "/certs/client.key",
        }
    )
    assert got.producer_config == {
        "acks": "all",
        "client_id": "minikafka-spark",
        "security_protocol": "SSL",
        "ssl_cafile": "/certs/ca.crt",
        "ssl_certfile": "/certs/client.crt",
        "ssl_keyfile": "/certs/client.key",
    }
    ca_only = parse_sink_options({**BASE, "kafka.security.protocol": "SSL"})
    assert ca_only.producer_config["security_protocol"] == "SSL"
    assert ca_only.producer_config["ssl_cafile"] is None
    plain = parse_sink_options({**BASE, "kafka.security.protocol": "PLAINTEXT"})
    assert "security_protocol" not in plain.producer_config


def test_every_producer_option_names_a_producer_keyword() -> None:
    import inspect

    from client.producer import AsyncProducer

    keywords = set(inspect.signature(AsyncProducer.__init__).parameters)
    assert {keyword for keyword, _ in PRODUCER_OPTIONS.values()} <= keywords


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"topic": "t"}, "kafka.bootstrap.servers .* is required"),
        ({**BASE, "bootstrap.servers": "x:1"}, "both set and differ"),
        ({"kafka.bootstrap.servers": "nohost"}, "expected HOST:PORT"),
        ({**BASE, "topic": " "}, "option topic must not be empty"),
        ({**BASE, "subscribe": "t"}, r"unknown option 'subscribe'.*supported: .*kafka\.linger\.ms"),
        ({**BASE, "kafka.key.serializer": "x"}, "unknown option 'kafka.key.serializer'"),
        ({**BASE, "kafka.linger.ms": "soon"}, "kafka.linger.ms must be an integer, got 'soon'"),
        ({**BASE, "kafka.enable.idempotence": "yes"}, "must be 'true' or 'false'"),
        ({**BASE, "kafka.client.id": ""}, "kafka.client.id must not be empty"),
        ({**BASE, "kafka.security.protocol": "SASL_SSL"}, "must be PLAINTEXT or SSL"),
        ({**BASE, "kafka.ssl.cafile": "/ca.crt"}, "kafka.ssl.cafile given but .* is not SSL"),
        (
            {**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.certfile": "/c.crt"},
            "kafka.ssl.certfile and kafka.ssl.keyfile go together",
        ),
        ({**BASE, "kafka.sasl.mechanism": "x"}, r"unknown option.*supported: .*kafka\.ssl\.cafile"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], match: str) -> None:
    with pytest.raises(SinkOptionError, match=match):
        parse_sink_options(options)


# ---- columns ---------------------------------------------------------------------------

HEADERS = "array<struct<key:string,value:binary>>"
HEADER_ARRAY = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


@pytest.mark.parametrize(
    ("ddl", "topic_option", "expected"),
    [
        ("value binary", "t", SinkColumns()),
        ("value string, key string, other int", "t", SinkColumns(key=True)),
        ("value binary, topic string", None, SinkColumns(topic=True)),
        ("value binary, topic string", "t", SinkColumns()),  # the option overrides
        (
            f"value binary, key binary, partition int, headers {HEADERS}",
            "t",
            SinkColumns(key=True, partition=True, headers=True),
        ),
    ],
)
def test_sink_columns(ddl: str, topic_option: str | None, expected: SinkColumns) -> None:
    assert check_sink_schema(_schema(ddl), topic_option=topic_option) == expected


@pytest.mark.parametrize(
    ("ddl", "topic_option", "match"),
    [
        ("key binary", "t", r"no value column \(columns: key\)"),
        ("value int", "t", "column 'value' has type int"),
        ("value binary, key array<int>", "t", "column 'key' has type array<int>"),
        ("value binary, topic int", "t", "column 'topic' has type int"),
        ("value binary", None, "no topic: set the topic option or give a topic column"),
        ("value binary, partition bigint", "t", "column 'partition' has type bigint"),
        ("value binary, headers array<string>", "t", "column 'headers' has type"),
    ],
)
def test_bad_columns_are_named(ddl: str, topic_option: str | None, match: str) -> None:
    with pytest.raises(SinkOptionError, match=match):
        check_sink_schema(_schema(ddl), topic_option=topic_option)


_TYPES: dict[str, DataType] = {
    "binary": BinaryType(),
    "string": StringType(),
    "int": IntegerType(),
    "bigint": LongType(),
    "array<int>": ArrayType(IntegerType()),
    "array<string>": ArrayType(StringType()),
    HEADERS: HEADER_ARRAY,
}


def _schema(ddl: str) -> StructType:
    """`"value binary, key string"` -> a StructType (`StructType.fromDDL` needs a JVM)."""
    fields = [item.strip().split(" ", 1) for item in ddl.split(", ")]
    return StructType([StructField(name, _TYPES[kind]) for name, kind in fields])


def _batch(**columns: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_one_topic_without_partitions_is_one_call() -> None:
    batch = _batch(value=["a", None, "c"], key=[b"k", None, b"k"])
    got = send_groups(batch, SinkColumns(key=True), topic="t")
    assert got == [
        SendGroup(
            topic="t",
            partition=None,
            values=[b"a", None, b"c"],
            keys=[b"k", None, b"k"],
            headers=None,
        )
    ]


def test_rows_are_grouped_by_topic_and_partition_in_batch_order() -> None:
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([b"0", b"1", b"2", b"3", b"4"]),
            "topic": pa.array(["a", "b", "a", "a", "b"]),
            "partition": pa.array([1, None, None, 1, None], type=pa.int32()),
            "headers": pa.array(
                [[{"key": "h", "value": b"x"}], None, [], None, None], type=header_type
            ),
        }
    )
    got = send_groups(batch, SinkColumns(topic=True, partition=True, headers=True), topic=None)
    assert got == [
        SendGroup(
            topic="a", partition=1, values=[b"0", b"3"], keys=None, headers=[[("h", b"x")], None]
        ),
        SendGroup(topic="b", partition=None, values=[b"1", b"4"], keys=None, headers=[None, None]),
        SendGroup(topic="a", partition=None, values=[b"2"], keys=None, headers=[None]),
    ]


def test_empty_batch_sends_nothing() -> None:
    assert send_groups(_batch(value=pa.array([], pa.binary())), SinkColumns(), topic="t") == []


@pytest.mark.parametrize(
    ("columns", "flags", "match"),
    [
        (
            {"value": [b"x", b"y"], "topic": ["a", None]},
            SinkColumns(topic=True),
            "row 11: the topic column is null",
        ),
        (
            {"value": [b"x"], "topic": [None]},
            SinkColumns(topic=True),
            "row 10: the topic column is null",
        ),
        (
            {"value": [b"x"], "partition": pa.array([-1], pa.int32())},
            SinkColumns(partition=True),
            "row 10: partition -1 is negative",
        ),
        (
            {
                "value": [b"x"],
                "headers": pa.array(
                    [[{"key": "h", "value": None}]],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                ),
            },
            SinkColumns(headers=True),
            "row 10: header .* has a null key or value",
        ),
    ],
)
def test_bad_rows_are_named(columns: dict[str, Any], flags: SinkColumns, match: str) -> None:
    with pytest.raises(SinkOptionError, match=match):
        send_groups(_batch(**columns), flags, topic="t", row_offset=10)
