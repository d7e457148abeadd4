"""Option parsing of the Spark source (client/spark/options.py)."""

from __future__ import annotations

import pytest

from client.spark.errors import SourceOptionError
from client.spark.offsets import OffsetSpec
from client.spark.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    DEFAULT_POLL_TIMEOUT_MS,
    FetchConfig,
    TlsSettings,
    parse_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_streaming_defaults_mirror_spark() -> None:
    got = parse_options({**BASE, "subscribe": "b, a,a"}, streaming=True)
    assert got.bootstrap_servers == ("127.0.0.1:9092",)
    assert got.topics == ("a", "b")
    assert got.starting == OffsetSpec(kind="latest")
    assert got.ending is None
    assert got.fail_on_data_loss is True
    assert got.include_headers is False
    assert got.max_offsets_per_trigger is None
    assert got.poll_timeout_ms == DEFAULT_POLL_TIMEOUT_MS


def test_batch_defaults_and_case_insensitive_names() -> None:
    got = parse_options(
        {
            "BOOTSTRAP.SERVERS": "h1:1,h2:2",
            "ASSIGN": '{"t": [1, 0], "u": [3]}',
            "includeheaders": "TRUE",
            "minPartitions": "8",
            "failOnDataLoss": "false",
        },
        streaming=False,
    )
    assert got.bootstrap_servers == ("h1:1", "h2:2")
    assert got.assigned == (("t", 0), ("t", 1), ("u", 3))
    assert got.starting == OffsetSpec(kind="earliest")
    assert got.ending == OffsetSpec(kind="latest")
    assert got.include_headers is True
    assert got.min_partitions == 8
    assert got.fail_on_data_loss is False


def test_subscribe_pattern_matches_whole_names() -> None:
    got = parse_options({**BASE, "subscribePattern": "orders-.*"}, streaming=True)
    assert got.matches("orders-eu")
    assert not got.matches("old-orders-eu")


@pytest.mark.parametrize(
    ("options", "streaming", "match"),
    [
        ({"subscribe": "t"}, True, "kafka.bootstrap.servers .* is required"),
        ({**BASE, "subscribe": "t", "bootstrap.servers": "x:1"}, True, "both set and differ"),
        ({"kafka.bootstrap.servers": "nohost", "subscribe": "t"}, True, "expected HOST:PORT"),
        (BASE, True, r"exactly one of .* \(given: none\)"),
        ({**BASE, "subscribe": "t", "assign": '{"t": [0]}'}, True, "given: subscribe, assign"),
        ({**BASE, "subscribe": " , "}, True, "at least one topic"),
        ({**BASE, "subscribePattern": "("}, True, "is not a regex"),
        ({**BASE, "assign": '{"t": []}'}, True, "non-empty list"),
        ({**BASE, "assign": '{"t": [-1]}'}, True, "bad partition"),
        ({**BASE, "assign": "t:0"}, True, "cannot parse"),
        ({**BASE, "subscribe": "t", "endingOffsets": "latest"}, True, "only for batch"),
        ({**BASE, "subscribe": "t", "maxOffsetsPerTrigger": "5"}, False, "only for streaming"),
        ({**BASE, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "positive integer"),
        ({**BASE, "subscribe": "t", "minPartitions": "many"}, True, "positive integer"),
        ({**BASE, "subscribe": "t", "failOnDataLoss": "yes"}, True, "'true' or 'false'"),
        ({**BASE, "subscribe": "t", "subscibe": "t"}, True, "unknown option 'subscibe'"),
        ({**BASE, "subscribe": "t", "startingOffsets": "latest"}, False, "not allowed for batch"),
    ],
    ids=[
        "no-bootstrap",
        "conflicting-bootstrap",
        "bad-bootstrap",
        "no-strategy",
        "two-strategies",
        "empty-subscribe",
        "bad-pattern",
        "assign-empty-list",
        "assign-negative",
        "assign-not-json",
        "ending-in-stream",
        "max-offsets-in-batch",
        "max-offsets-zero",
        "min-partitions-text",
        "bad-bool",
        "typo",
        "batch-from-latest",
    ],
)
def test_bad_options_are_rejected_clearly(
    options: dict[str, str], streaming: bool, match: str
) -> None:
    with pytest.raises(SourceOptionError, match=match):
        parse_options(options, streaming=streaming)


def test_kafka_client_options_are_ignored_not_rejected(caplog: pytest.LogCaptureFixture) -> None:
    got = parse_options(
        {**BASE, "subscribe": "t", "kafka.group.id": "g", "groupIdPrefix": "p"}, streaming=True
    )
    assert got.topics == ("t",)
    assert "kafka.group.id" in caplog.text
    assert "groupidprefix" in caplog.text


def test_timestamp_options_take_precedence_as_in_spark() -> None:
    both = {
        **BASE,
        "subscribe": "t",
        "startingOffsets": "earliest",
        "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
    }
    got = parse_options(both, streaming=True)
    assert got.starting == OffsetSpec(kind="timestamp", offsets={("t", 0): 5})
    got = parse_options({**both, "startingTimestamp": "7"}, streaming=True)
    assert got.starting == OffsetSpec(kind="timestamp", timestamp_ms=7)
    assert got.starting_no_match == "error"
    batch = parse_options(
        {
            **BASE,
            "subscribe": "t",
            "endingOffsets": '{"t": {"0": 3}}',
            "endingOffsetsByTimestamp": '{"t": {"0": 9}}',
            "startingOffsetsByTimestampStrategy": "LATEST",
        },
        streaming=False,
    )
    assert batch.ending == OffsetSpec(kind="timestamp", offsets={("t", 0): 9})
    assert batch.starting_no_match == "latest"
    batch = parse_options(
        {**BASE, "subscribe": "t", "endingTimestamp": "11", "endingOffsetsByTimestamp": "{"},
        streaming=False,
    )
    assert batch.ending == OffsetSpec(kind="timestamp", timestamp_ms=11)


def test_max_records_per_partition_and_consumer_settings() -> None:
    got = parse_options(
        {
            **BASE,
            "subscribe": "t",
            "maxRecordsPerPartition": "1000",
            "kafka.fetch.max.bytes": "1048576",
            "kafka.max.partition.fetch.bytes": "65536",
            "kafka.fetch.max.wait.ms": "0",
            "kafka.request.timeout.ms": "9000",
        },
        streaming=True,
    )
    assert got.max_records_per_partition == 1000
    assert got.fetch == FetchConfig(
        fetch_max_bytes=1 << 20,
        max_partition_fetch_bytes=65536,
        fetch_max_wait_ms=0,
        request_timeout_ms=9000,
    )
    assert parse_options({**BASE, "subscribe": "t"}, streaming=True).fetch == FetchConfig()


@pytest.mark.parametrize(
    ("extra", "streaming", "match"),
    [
        ({"endingTimestamp": "5"}, True, "endingTimestamp is only for batch"),
        ({"endingOffsetsByTimestamp": '{"t": {"0": 5}}'}, True, "only for batch"),
        ({"startingTimestamp": "yesterday"}, True, "startingTimestamp must be a time"),
        ({"startingOffsetsByTimestamp": "[1]"}, True, "must be JSON like"),
        ({"startingOffsetsByTimestampStrategy": "skip"}, True, "'error' or 'latest'"),
        ({"maxRecordsPerPartition": "0"}, False, "maxRecordsPerPartition must be a positive"),
        ({"kafka.fetch.max.bytes": "0"}, True, r"kafka.fetch.max.bytes must be an integer >= 1"),
        ({"kafka.fetch.max.wait.ms": "x"}, True, "must be an integer >= 0, got 'x'"),
        ({"kafka.auto.offset.reset": "earliest"}, True, "not supported: set startingOffsets"),
        ({"kafka.value.deserializer": "x"}, True, "values are always binary"),
        ({"kafka.max.poll.records": "5"}, True, r"unknown option 'kafka.max.poll.records'.*"),
    ],
    ids=[
        "ending-ts-in-stream",
        "ending-by-ts-in-stream",
        "bad-starting-ts",
        "by-ts-not-object",
        "bad-strategy",
        "max-records-zero",
        "fetch-bytes-zero",
        "fetch-wait-text",
        "auto-offset-reset",
        "deserializer",
        "unknown-kafka-option",
    ],
)
def test_new_options_are_checked(extra: dict[str, str], streaming: bool, match: str) -> None:
    with pytest.raises(SourceOptionError, match=match):
        parse_options({**BASE, "subscribe": "t", **extra}, streaming=streaming)


def test_unknown_option_error_lists_the_valid_ones() -> None:
    with pytest.raises(SourceOptionError) as info:
        parse_options({**BASE, "subscribe": "t", "startingOffset": "earliest"}, streaming=True)
    message = str(info.value)
    for name in (
        "startingOffsets",
        "startingTimestamp",
        "endingOffsetsByTimestamp",
        "maxRecordsPerPartition",
        "kafka.fetch.max.bytes",
    ):
        assert name in message


def test_min_offsets_per_trigger_and_max_trigger_delay() -> None:
    got = parse_options(
        {**BASE, "subscribe": "t", "minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "500"},
        streaming=True,
    )
    assert got.min_offsets_per_trigger == 100
    assert got.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 900_000
    got = parse_options(
        {**BASE, "subscribe": "t", "minOffsetsPerTrigger": "1", "maxTriggerDelay": "30s"},
        streaming=True,
    )
    assert got.max_trigger_delay_ms == 30_000


@pytest.mark.parametrize(
    ("extra", "streaming", "match"),
    [
        ({"minOffsetsPerTrigger": "5"}, False, "minOffsetsPerTrigger is only for streaming"),
        (
            {"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            True,
            r"\(9\) must not exceed",
        ),
        ({"maxTriggerDelay": "5m"}, True, "maxTriggerDelay needs minOffsetsPerTrigger"),
        ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "later"}, True, "must be a duration"),
    ],
    ids=["min-in-batch", "min-above-max", "delay-alone", "bad-delay"],
)
def test_min_offsets_options_are_checked(
    extra: dict[str, str], streaming: bool, match: str
) -> None:
    with pytest.raises(SourceOptionError, match=match):
        parse_options({**BASE, "subscribe": "t", **extra}, streaming=streaming)


def test_tls_options() -> None:
    got = parse_options(
        {
            **BASE,
            "subscribe": "t",
            "kafka.security.protocol": "ssl",
            "kafka.ssl.cafile": "/certs/ca.crt",
            "kafka.ssl.certfile": "/certs/client.crt",
            "kafka.ssl.keyfile": "/certs/client.key",
        },
        streaming=True,
    )
    assert got.tls == TlsSettings(
        ssl_cafile="/certs/ca.crt",
        ssl_certfile="/certs/client.crt",
        ssl_keyfile="/certs/client.key",
    )
    assert parse_options({**BASE, "subscribe": "t"}, streaming=True).tls is None


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        pytest.param({"kafka.security.protocol": "SASL_SSL"}, "PLAINTEXT or SSL", id="sasl"),
        pytest.param({"kafka.ssl.cafile": "/ca"}, "is not SSL", id="files-without-ssl"),
        pytest.param(
            {"kafka.security.protocol": "SSL", "kafka.ssl.certfile": "/c"},
            "go together",
            id="cert-without-key",
        ),
    ],
)
def test_bad_tls_options(extra: dict[str, str], match: str) -> None:
    with pytest.raises(SourceOptionError, match=match):
        parse_options({**BASE, "subscribe": "t", **extra}, streaming=True)
