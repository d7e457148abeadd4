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
from client.spark.offsets import TP, OffsetSpec, parse_offset_spec

logger = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS: Final = 120_000

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
    }
)
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


def parse_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate Spark options for a streaming (`readStream`) or batch (`read`) query."""
    options = {str(k).lower(): str(v) for k, v in raw.items()}
    for name in sorted(options):
        if name in _IGNORED or (name.startswith("kafka.") and name not in _KNOWN):
            logger.warning("minikafka source ignores option %s (no equivalent here)", name)
        elif name not in _KNOWN and name != "path":
            raise SourceOptionError(
                f"unknown option {name!r} for the minikafka source; supported: "
                "kafka.bootstrap.servers (alias bootstrap.servers), subscribe, "
                "subscribePattern, assign, startingOffsets, endingOffsets, failOnDataLoss, "
                "includeHeaders, maxOffsetsPerTrigger, minPartitions, kafkaConsumer.pollTimeoutMs"
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

    if "endingoffsets" in options and streaming:
        raise SourceOptionError(
            "endingOffsets is only for batch queries (spark.read); a stream has no end"
        )
    if "maxoffsetspertrigger" in options and not streaming:
        raise SourceOptionError("maxOffsetsPerTrigger is only for streaming queries")
    starting = parse_offset_spec(
        options.get("startingoffsets", "latest" if streaming else "earliest"),
        option="startingOffsets",
        ending=False,
        streaming=streaming,
    )
    ending = (
        None
        if streaming
        else parse_offset_spec(
            options.get("endingoffsets", "latest"),
            option="endingOffsets",
            ending=True,
            streaming=False,
        )
    )
    timeout_ms = _positive_int(options, "kafkaConsumer.pollTimeoutMs")
    tls = _tls(options)
    return SourceOptions(
        bootstrap_servers=bootstrap,
        topics=topics,
        topic_pattern=pattern,
        assigned=assigned,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(options, "minPartitions"),
        poll_timeout_ms=timeout_ms if timeout_ms is not None else DEFAULT_POLL_TIMEOUT_MS,
        tls=tls,
    )


def _tls(options: Mapping[str, str]) -> TlsSettings | None:
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
