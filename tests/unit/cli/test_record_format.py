"""Console-consumer output: Kafka's formatter properties and JSON lines."""

from __future__ import annotations

import json

import pytest

from client.records import ConsumerRecord
from minikafka_cli.record_format import (
    FormatError,
    TextFormat,
    format_json,
    format_text,
    text_format,
)


def record(
    *,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: list[tuple[str, bytes]] | None = None,
    timestamp: int = 1_700_000_000_000,
    timestamp_type: int = 0,
) -> ConsumerRecord:
    return ConsumerRecord("orders", 2, 41, timestamp, timestamp_type, key, value, headers or (), 3)


@pytest.mark.parametrize(
    ("properties", "rec", "line"),
    [
        pytest.param({}, record(), b"v\n", id="value-only"),
        pytest.param(
            {"print.timestamp": "true"}, record(), b"CreateTime:1700000000000\tv\n", id="timestamp"
        ),
        pytest.param(
            {"print.timestamp": "true"},
            record(timestamp_type=1),
            b"LogAppendTime:1700000000000\tv\n",
            id="log-append-time",
        ),
        pytest.param(
            {"print.timestamp": "true"}, record(timestamp=-1), b"NO_TIMESTAMP\tv\n", id="no-ts"
        ),
        pytest.param(
            {"print.partition": "true", "print.offset": "true"},
            record(),
            b"Partition:2\tOffset:41\tv\n",
            id="partition-offset",
        ),
        pytest.param(
            {"print.headers": "true"},
            record(headers=[("a", b"1"), ("b", b"2")]),
            b"a:1,b:2\tv\n",
            id="headers",
        ),
        pytest.param({"print.headers": "true"}, record(), b"NO_HEADERS\tv\n", id="no-headers"),
        pytest.param(
            {"print.key": "true", "key.separator": "|"},
            record(key=None),
            b"null|v\n",
            id="null-key",
        ),
        pytest.param(
            {
                "print.timestamp": "true",
                "print.partition": "true",
                "print.offset": "true",
                "print.headers": "true",
                "print.key": "true",
            },
            record(headers=[("h", b"x")]),
            b"CreateTime:1700000000000\tPartition:2\tOffset:41\th:x\tk\tv\n",
            id="kafka-order",
        ),
        pytest.param(
            {"print.value": "false", "print.offset": "true"},
            record(),
            b"Offset:41\n",
            id="no-value",
        ),
        pytest.param({"null.literal": "-"}, record(value=None), b"-\n", id="null-literal"),
    ],
)
def test_kafka_formatter(properties: dict[str, str], rec: ConsumerRecord, line: bytes) -> None:
    assert format_text(rec, text_format(properties)) == line


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        pytest.param({"print.offset": "yes"}, "print.offset takes true or false", id="not-bool"),
        pytest.param({"print.everything": "true"}, "unknown formatter property", id="unknown"),
    ],
)
def test_bad_properties(properties: dict[str, str], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        text_format(properties)


def test_base_format_is_kept() -> None:
    base = TextFormat(print_key=True, key_separator=b":")
    assert format_text(record(), text_format({"print.offset": "true"}, base)) == b"Offset:41:k:v\n"


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        pytest.param(
            record(headers=[("h", b"x")]),
            {
                "topic": "orders",
                "partition": 2,
                "offset": 41,
                "timestamp": 1_700_000_000_000,
                "timestampType": "CreateTime",
                "key": "k",
                "value": "v",
                "headers": [{"key": "h", "value": "x"}],
            },
            id="text",
        ),
        pytest.param(
            record(key=None, value=b"\xff\x00", headers=[("h", b"\xfe")]),
            {
                "topic": "orders",
                "partition": 2,
                "offset": 41,
                "timestamp": 1_700_000_000_000,
                "timestampType": "CreateTime",
                "key": None,
                "value_base64": "/wA=",
                "headers": [{"key": "h", "value_base64": "/g=="}],
            },
            id="binary",
        ),
    ],
)
def test_json_lines(rec: ConsumerRecord, expected: dict[str, object]) -> None:
    line = format_json(rec)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == expected
