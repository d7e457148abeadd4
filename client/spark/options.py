"""Parse and validate the Spark source's options (names mirror Spark's Kafka source).

Spark hands options over as a case-insensitive mapping of strings; `parse_options`
turns them into a frozen `SourceOptions` or raises `SourceOptionError` naming the
option and what is wrong. Pure: no I/O, no pyspark.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Final

import msgspec

from client.spark.errors import SourceOptionError
from client.spark.offsets import (
    TP,
    OffsetSpec,
    parse_duration_ms,
    parse_offset_spec,
    parse_timestamp,
    parse_timestamps_by_partition,
)

logger = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS: Final = 120_000
#: `maxTriggerDelay` unless given (Spark's default, 15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60_000

#: Option names we understand, lower-cased (Spark's options are case-insensitive).
_KNOWN: Final = frozenset(
    {
        "bootstrap.servers",
        "kafka.bootstrap.servers",
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "endingoffsets",
        "failondataloss",
        "includeheaders",
        "maxoffsetspertrigger",
        "minpartitions",
        "kafkaconsumer.polltimeoutms",
        # TLS (kafka-python's names under Spark's `kafka.` prefix; PEM files).
        "kafka.security.protocol",
        "kafka.ssl.cafile",
        "kafka.ssl.certfile",
        "kafka.ssl.keyfile",
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "endingtimestamp",
        "endingoffsetsbytimestamp",
        "maxrecordsperpartition",
        "minoffsetspertrigger",
        "maxtriggerdelay",
    }
)
#: `kafka.<name>` consumer settings the source's reader uses -> (field of
#: `FetchConfig`, smallest value).
CONSUMER_OPTIONS: Final = {
    "fetch.max.bytes": ("fetch_max_bytes", 1),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", 1),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", 0),
    "request.timeout.ms": ("request_timeout_ms", 1),
}
#: `kafka.<name>` settings Spark's Kafka source refuses, and why (the same here).
_REFUSED_CONSUMER_OPTIONS: Final = {
    "auto.offset.reset": "set startingOffsets instead",
    "key.deserializer": "keys are always binary; cast them in the DataFrame",
    "value.deserializer": "values are always binary; cast them in the DataFrame",
    "enable.auto.commit": "the query's progress lives in its checkpoint, not in committed offsets",
    "interceptor.classes": "the source reads with its own reader",
}
#: `kafka.<name>` settings accepted and ignored, as Spark's Kafka source ignores them
#: (it never commits offsets to a consumer group).
_IGNORED_CONSUMER_OPTIONS: Final = frozenset({"group.id", "client.id"})
#: Spark Kafka options that have no meaning here; accepted with a warning so that jobs
#: written for Spark's Kafka source keep running.
_IGNORED: Final = frozenset(
    {"groupidprefix", "fetchoffset.numretries", "fetchoffset.retryintervalms"}
)


class TlsSettings(msgspec.Struct, frozen=True, kw_only=True):
    """kafka.security.protocol=SSL and its PEM files (paths every executor can read)."""

    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None


class FetchConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the source's reader fetches (`kafka.*` consumer settings, Kafka's defaults
    scaled to one reader per Spark task)."""

    fetch_max_bytes: int = 4 << 20
    max_partition_fetch_bytes: int = 4 << 20
    fetch_max_wait_ms: int = 500
    request_timeout_ms: int = 5_000


#: The reader's fetch settings when no `kafka.*` option changes them.
DEFAULT_FETCH: Final = FetchConfig()


class SourceOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Validated options of one minikafka source."""

    bootstrap_servers: tuple[str, ...]
    #: Topics from `subscribe` (sorted); empty when `assign` or `subscribePattern` is used.
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    #: Partitions from `assign` (sorted); empty otherwise.
    assigned: tuple[TP, ...] = ()
    starting: OffsetSpec
    ending: OffsetSpec | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    #: TLS: the client's settings (`client.security.client_tls`; the files are read by
    #: each reader, on the driver and on the executors).
    tls: TlsSettings | None = None
    #: `startingOffsetsByTimestampStrategy`: "error" or "latest" when no record is as
    #: recent as the starting time.
    starting_no_match: str = "error"
    max_records_per_partition: int | None = None
    #: `minOffsetsPerTrigger`: skip triggers with fewer new records, for at most
    #: `max_trigger_delay_ms` since the last batch.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fetch: FetchConfig = DEFAULT_FETCH

    def matches(self, topic: str) -> bool:
        """Whether a topic of the cluster is read by `subscribe` / `subscribePattern`."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics


def parse_bootstrap(value: str) -> tuple[str, ...]:
    """`"h1:p1,h2:p2"` -> `("h1:p1", "h2:p2")`, each checked to be HOST:PORT."""
    addresses: list[str] = []
    for part in value.split(","):
        address = part.strip()
        if not address:
            continue
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SourceOptionError(
                f"bad bootstrap server {address!r}: expected HOST:PORT with a port in 1-65535"
            )
        addresses.append(address)
    if not addresses:
        raise SourceOptionError("kafka.bootstrap.servers is empty: give at least one HOST:PORT")
    return tuple(addresses)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise SourceOptionError(f"{name} must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise SourceOptionError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise SourceOptionError(f"{name} must be a positive integer, got {raw!r}")
    return value


def _parse_assign(raw: str) -> tuple[TP, ...]:
    hint = 'assign must be JSON like {"topicA": [0, 1], "topicB": [2]}'
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"{hint}; cannot parse {raw!r}: {exc}") from exc
    if not isinstance(value, dict) or not value:
        raise SourceOptionError(f"{hint}, got {raw!r}")
    out: set[TP] = set()
    for topic, partitions in value.items():
        if not topic or not isinstance(partitions, list) or not partitions:
            raise SourceOptionError(f"{hint}; topic {topic!r} needs a non-empty list")
        for partition in partitions:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise SourceOptionError(f"{hint}; {topic!r} has a bad partition {partition!r}")
            out.add((topic, partition))
    return tuple(sorted(out))


def valid_option_names() -> str:
    """The source's options, for error messages."""
    return (
        "kafka.bootstrap.servers (alias bootstrap.servers), subscribe, subscribePattern, "
        "assign, startingOffsets, startingTimestamp, startingOffsetsByTimestamp, "
        "startingOffsetsByTimestampStrategy, endingOffsets, endingTimestamp, "
        "endingOffsetsByTimestamp, failOnDataLoss, includeHeaders, maxOffsetsPerTrigger, "
        "minOffsetsPerTrigger, maxTriggerDelay, "
        "minPartitions, maxRecordsPerPartition, kafkaConsumer.pollTimeoutMs, "
        + ", ".join(f"kafka.{name}" for name in CONSUMER_OPTIONS)
        + ", kafka.group.id (ignored)"
    )


def _consumer_option(name: str, raw: str) -> dict[str, int]:
    """A `kafka.*` option as a `FetchConfig` field (empty when ignored)."""
    setting = name.removeprefix("kafka.")
    if setting in _IGNORED_CONSUMER_OPTIONS:
        logger.warning("minikafka source ignores option %s, as Spark's Kafka source does", name)
        return {}
    if setting in _REFUSED_CONSUMER_OPTIONS:
        raise SourceOptionError(
            f"option {name} is not supported: {_REFUSED_CONSUMER_OPTIONS[setting]}"
        )
    if setting not in CONSUMER_OPTIONS:
        raise SourceOptionError(
            f"unknown option {name!r} for the minikafka source; supported: " + valid_option_names()
        )
    field, minimum = CONSUMER_OPTIONS[setting]
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise SourceOptionError(f"{name} must be an integer >= {minimum}, got {raw!r}")
    return {field: value}


def _starting_spec(options: Mapping[str, str], *, streaming: bool) -> OffsetSpec:
    """startingTimestamp, else startingOffsetsByTimestamp, else startingOffsets (Spark's
    precedence)."""
    if "startingtimestamp" in options:
        return parse_timestamp(options["startingtimestamp"], option="startingTimestamp")
    if "startingoffsetsbytimestamp" in options:
        return parse_timestamps_by_partition(
            options["startingoffsetsbytimestamp"], option="startingOffsetsByTimestamp"
        )
    return parse_offset_spec(
        options.get("startingoffsets", "latest" if streaming else "earliest"),
        option="startingOffsets",
        ending=False,
        streaming=streaming,
    )


def _ending_spec(options: Mapping[str, str]) -> OffsetSpec:
    """endingTimestamp, else endingOffsetsByTimestamp, else endingOffsets (batch only)."""
    if "endingtimestamp" in options:
        return parse_timestamp(options["endingtimestamp"], option="endingTimestamp")
    if "endingoffsetsbytimestamp" in options:
        return parse_timestamps_by_partition(
            options["endingoffsetsbytimestamp"], option="endingOffsetsByTimestamp"
        )
    return parse_offset_spec(
        options.get("endingoffsets", "latest"), option="endingOffsets", ending=True, streaming=False
    )


def parse_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate Spark options for a streaming (`readStream`) or batch (`read`) query."""
    options = {str(k).lower(): str(v) for k, v in raw.items()}
    fetch: dict[str, int] = {}
    for name in sorted(options):
        if name in _KNOWN or name == "path":
            continue
        if name in _IGNORED:
            logger.warning("minikafka source ignores option %s (no equivalent here)", name)
        elif name.startswith("kafka."):
            fetch.update(_consumer_option(name, options[name]))
        else:
            raise SourceOptionError(
                f"unknown option {name!r} for the minikafka source; supported: "
                + valid_option_names()
            )

    servers = options.get("kafka.bootstrap.servers") or options.get("bootstrap.servers")
    if (
        "kafka.bootstrap.servers" in options
        and "bootstrap.servers" in options
        and parse_bootstrap(options["kafka.bootstrap.servers"])
        != parse_bootstrap(options["bootstrap.servers"])
    ):
        raise SourceOptionError(
            "kafka.bootstrap.servers and bootstrap.servers are both set and differ; give one"
        )
    if not servers:
        raise SourceOptionError(
            "option kafka.bootstrap.servers (or bootstrap.servers) is required, "
            "e.g. '127.0.0.1:9092'"
        )
    bootstrap = parse_bootstrap(servers)

    strategies = [n for n in ("subscribe", "subscribepattern", "assign") if n in options]
    if len(strategies) != 1:
        given = ", ".join(strategies) or "none"
        raise SourceOptionError(
            f"exactly one of subscribe, subscribePattern or assign is required (given: {given})"
        )
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TP, ...] = ()
    if "subscribe" in options:
        topics = tuple(sorted({t.strip() for t in options["subscribe"].split(",") if t.strip()}))
        if not topics:
            raise SourceOptionError("subscribe must list at least one topic, e.g. 'orders'")
    elif "subscribepattern" in options:
        pattern = options["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError(f"subscribePattern {pattern!r} is not a regex: {exc}") from exc
    else:
        assigned = _parse_assign(options["assign"])

    ending_given = [
        name
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
        if name.lower() in options
    ]
    if ending_given and streaming:
        raise SourceOptionError(
            f"{', '.join(ending_given)} is only for batch queries (spark.read); a stream has no end"
        )
    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if name.lower() in options and not streaming:
            raise SourceOptionError(f"{name} is only for streaming queries")
    min_offsets = _positive_int(options, "minOffsetsPerTrigger")
    max_offsets = _positive_int(options, "maxOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise SourceOptionError(
            f"minOffsetsPerTrigger ({min_offsets}) must not exceed maxOffsetsPerTrigger "
            f"({max_offsets})"
        )
    if "maxtriggerdelay" in options and min_offsets is None:
        raise SourceOptionError("maxTriggerDelay needs minOffsetsPerTrigger")
    max_delay_ms = (
        parse_duration_ms(options["maxtriggerdelay"], option="maxTriggerDelay")
        if "maxtriggerdelay" in options
        else DEFAULT_MAX_TRIGGER_DELAY_MS
    )
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SourceOptionError(
            "startingOffsetsByTimestampStrategy must be 'error' or 'latest', got "
            f"{options['startingoffsetsbytimestampstrategy']!r}"
        )
    timeout_ms = _positive_int(options, "kafkaConsumer.pollTimeoutMs")
    tls = parse_tls(options)
    return SourceOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        topic_pattern=pattern,
        assigned=assigned,
        starting=_starting_spec(options, streaming=streaming),
        ending=None if streaming else _ending_spec(options),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        max_offsets_per_trigger=max_offsets,
        min_partitions=_positive_int(options, "minPartitions"),
        poll_timeout_ms=timeout_ms if timeout_ms is not None else DEFAULT_POLL_TIMEOUT_MS,
        tls=tls,
        starting_no_match=strategy,
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition"),
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_delay_ms,
        fetch=FetchConfig(**fetch),
    )


#: The TLS options the source and the sink share (Kafka's names, kafka-python's meaning).
TLS_OPTIONS: Final = (
    "kafka.security.protocol",
    "kafka.ssl.cafile",
    "kafka.ssl.certfile",
    "kafka.ssl.keyfile",
)


def parse_tls(options: Mapping[str, str]) -> TlsSettings | None:
    """`kafka.security.protocol` (PLAINTEXT or SSL) and `kafka.ssl.{cafile,certfile,keyfile}`
    of lower-cased `options`: None for plaintext; SourceOptionError when they contradict."""
    protocol = options.get("kafka.security.protocol", "PLAINTEXT").upper()
    files = {name: options.get(f"kafka.ssl.{name}") for name in ("cafile", "certfile", "keyfile")}
    given = [f"kafka.ssl.{name}" for name, value in files.items() if value]
    if protocol not in ("PLAINTEXT", "SSL"):
        raise SourceOptionError(
            f"kafka.security.protocol must be PLAINTEXT or SSL, got {protocol!r}"
        )
    if protocol == "PLAINTEXT":
        if given:
            raise SourceOptionError(
                f"{', '.join(given)} given but kafka.security.protocol is not SSL"
            )
        return None
    if bool(files["certfile"]) != bool(files["keyfile"]):
        raise SourceOptionError("kafka.ssl.certfile and kafka.ssl.keyfile go together")
    return TlsSettings(
        ssl_cafile=files["cafile"] or None,
        ssl_certfile=files["certfile"] or None,
        ssl_keyfile=files["keyfile"] or None,
    )
