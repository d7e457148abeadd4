"""PURE topic configs: the one table of keys (Kafka's names), types, defaults and ranges.

Used by every entry point that accepts topic configs (the controller, a standalone broker,
the CLI) and by the broker when it resolves a topic's settings, so a standalone broker and
a cluster accept exactly the same configs with the same defaults and refuse bad input with
the same message (`tests/unit/minikafka/test_topic_config_contract.py`). Values are stored
normalised (integers in canonical form, booleans in lower case). Ranges that are policy
(`segment.bytes`, `segment.ms` minima) come from `minikafka.limits.TopicLimits`.
Unknown keys, malformed values and `min.insync.replicas` above the replication factor
are refused with INVALID_CONFIG naming the key (Kafka silently caps min.insync.replicas;
we refuse, so a producer with acks=all is never surprised). Topic names follow Kafka's rule.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.limits import MESSAGE_BYTES_MAX, MESSAGE_BYTES_MIN, TopicLimits

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"
FLUSH_POLICY: Final = "flush.policy"
SEGMENT_BYTES: Final = "segment.bytes"
SEGMENT_MS: Final = "segment.ms"
MESSAGE_TIMESTAMP_BEFORE_MAX_MS: Final = "message.timestamp.before.max.ms"
MESSAGE_TIMESTAMP_AFTER_MAX_MS: Final = "message.timestamp.after.max.ms"


class InvalidTopicConfigError(MiniKafkaError):
    """A topic config key is unknown or its value is invalid."""

    default_code = ErrorCode.INVALID_CONFIG


class Kind(enum.Enum):
    INT = "int"
    BOOL = "bool"
    CHOICE = "choice"


class TopicConfigDef(msgspec.Struct, frozen=True, kw_only=True):
    """One topic config: its type, range or choices, and default.

    `default` None means the broker's (or controller's) default applies; `special` lists
    integer values accepted outside [minimum, maximum] with a meaning of their own (-1).
    """

    name: str
    kind: Kind
    doc: str
    default: str | None = None
    minimum: int = 0
    maximum: int = INT64_MAX
    special: tuple[int, ...] = ()
    choices: tuple[str, ...] = ()


def _int(
    name: str,
    doc: str,
    *,
    minimum: int,
    maximum: int = INT64_MAX,
    default: str | None = None,
    special: tuple[int, ...] = (),
) -> TopicConfigDef:
    return TopicConfigDef(
        name=name,
        kind=Kind.INT,
        doc=doc,
        default=default,
        minimum=minimum,
        maximum=maximum,
        special=special,
    )


def _choice(name: str, doc: str, *choices: str, default: str) -> TopicConfigDef:
    return TopicConfigDef(name=name, kind=Kind.CHOICE, doc=doc, default=default, choices=choices)


#: Every topic config the brokers understand (Kafka's names, defaults and, where Kafka has
#: them, ranges; `segment.*` minima are policy, see `minikafka.limits`).
TOPIC_CONFIGS: Final[Mapping[str, TopicConfigDef]] = {
    d.name: d
    for d in (
        _int(
            MIN_INSYNC_REPLICAS,
            "replicas that must have a record before acks=all succeeds",
            minimum=1,
            maximum=INT32_MAX,
        ),
        TopicConfigDef(
            name=UNCLEAN_LEADER_ELECTION_ENABLE,
            kind=Kind.BOOL,
            doc="elect an out-of-sync replica when no in-sync one is alive (may lose data)",
            default="false",
        ),
        _int("retention.ms", "delete segments older than this (-1: keep)", minimum=-1),
        _int(
            "retention.bytes",
            "delete the oldest segments beyond this size (-1: no limit)",
            minimum=-1,
        ),
        _int(
            SEGMENT_BYTES,
            "roll to a new segment file at this size (minimum: --min-segment-bytes)",
            minimum=1,
            maximum=INT32_MAX,
        ),
        _int(
            SEGMENT_MS,
            "roll to a new segment file at this age (minimum: --min-segment-ms)",
            minimum=1,
            default=str(7 * 24 * 3600 * 1000),
        ),
        _int(
            "max.message.bytes",
            f"largest batch a producer may send (at least {MESSAGE_BYTES_MIN}, at most "
            f"{MESSAGE_BYTES_MAX}: one batch and its framing always fit a gRPC message)",
            minimum=MESSAGE_BYTES_MIN,
            maximum=MESSAGE_BYTES_MAX,
        ),
        _int(
            "flush.messages",
            "fsync after this many messages (-1: never, rely on replication)",
            minimum=1,
            default="-1",
            special=(-1,),
        ),
        _int(
            "flush.ms",
            "fsync when the oldest unflushed message is this old (-1: never)",
            minimum=0,
            default="-1",
            special=(-1,),
        ),
        _choice(
            FLUSH_POLICY,
            "fsync: fsync every record before it counts towards the high watermark",
            "none",
            "fsync",
            default="none",
        ),
        _choice(
            "message.timestamp.type",
            "CreateTime (the producer's) or LogAppendTime (the leader's clock)",
            "CreateTime",
            "LogAppendTime",
            default="CreateTime",
        ),
        _int(
            MESSAGE_TIMESTAMP_BEFORE_MAX_MS,
            "refuse CreateTime batches whose timestamp is further in the past than this",
            minimum=0,
            default=str(INT64_MAX),
        ),
        _int(
            MESSAGE_TIMESTAMP_AFTER_MAX_MS,
            "refuse CreateTime batches whose timestamp is further in the future than this",
            minimum=0,
            default=str(3600 * 1000),
        ),
        _choice(
            "cleanup.policy", "delete (compaction is not supported)", "delete", default="delete"
        ),
    )
}


def _range(definition: TopicConfigDef, limits: TopicLimits) -> tuple[int, int, str]:
    """The accepted range of an integer config, and the limit that sets its minimum."""
    if definition.name == SEGMENT_BYTES:
        return limits.min_segment_bytes, definition.maximum, "min.segment.bytes"
    if definition.name == SEGMENT_MS:
        return limits.min_segment_ms, definition.maximum, "min.segment.ms"
    return definition.minimum, definition.maximum, ""


def normalise_topic_config(key: str, value: str, *, limits: TopicLimits) -> str:
    """The canonical form of one config value; raises `InvalidTopicConfigError`."""
    definition = TOPIC_CONFIGS.get(key)
    if definition is None:
        raise InvalidTopicConfigError(
            f"unknown topic config {key!r}; known configs: {', '.join(sorted(TOPIC_CONFIGS))}"
        )
    if definition.kind is Kind.BOOL:
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidTopicConfigError(
                f"invalid value {value!r} for {key}: expected true or false"
            )
        return lowered
    if definition.kind is Kind.CHOICE:
        if value not in definition.choices:
            raise InvalidTopicConfigError(
                f"invalid value {value!r} for {key}: expected one of {list(definition.choices)}"
            )
        return value
    text = value.strip()
    if not re.fullmatch(r"-?[0-9]+", text):
        raise InvalidTopicConfigError(f"invalid value {value!r} for {key}: expected an integer")
    number = int(text)
    minimum, maximum, limit = _range(definition, limits)
    if number not in definition.special and not minimum <= number <= maximum:
        special = "".join(f" or {s}" for s in definition.special)
        named = f" (limit {limit}={minimum})" if limit and number < minimum else ""
        raise InvalidTopicConfigError(
            f"invalid value {number} for {key}: must be between {minimum} and {maximum}"
            f"{special}{named}"
        )
    return str(number)


def validate_topic_configs(
    configs: Mapping[str, str], *, replication_factor: int, limits: TopicLimits | None = None
) -> dict[str, str]:
    """Return the normalised configs or raise `InvalidTopicConfigError` (INVALID_CONFIG)
    naming the offending key; `min.insync.replicas` may not exceed the replication factor."""
    limits = limits or TopicLimits()
    normalised = {
        key: normalise_topic_config(key, configs[key], limits=limits) for key in sorted(configs)
    }
    min_insync = normalised.get(MIN_INSYNC_REPLICAS)
    if min_insync is not None and int(min_insync) > replication_factor:
        raise InvalidTopicConfigError(
            f"{MIN_INSYNC_REPLICAS} {min_insync} is larger than the replication factor "
            f"{replication_factor}: no write with acks=all could ever succeed"
        )
    return normalised


def config_value(configs: Mapping[str, str], key: str, *, default: str | None = None) -> str | None:
    """A topic's value for `key`: its override, else `default` (a broker default), else the
    table's default."""
    value = configs.get(key)
    if value is not None:
        return value
    return default if default is not None else TOPIC_CONFIGS[key].default


def int_config(configs: Mapping[str, str], key: str, *, default: int | None = None) -> int:
    """`config_value` as an integer (for keys whose table default is None, pass `default`)."""
    value = config_value(configs, key, default=None if default is None else str(default))
    if value is None:
        raise KeyError(f"topic config {key} has no default here")
    return int(value)


def min_insync_replicas(configs: Mapping[str, str], *, default: int) -> int:
    return int_config(configs, MIN_INSYNC_REPLICAS, default=default)


def unclean_leader_election_enabled(configs: Mapping[str, str], *, default: bool) -> bool:
    value = configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)
    return default if value is None else value.lower() == "true"


def validate_topic_name(name: str) -> None:
    """Raise INVALID_TOPIC_EXCEPTION unless `name` is a legal Kafka topic name."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise MiniKafkaError(problem, code=ErrorCode.INVALID_TOPIC_EXCEPTION)


#: Kafka's legal topic names (`org.apache.kafka.common.internals.Topic`).
TOPIC_NAME_LENGTH_MAX: Final = 249
_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_problem(name: str) -> str | None:
    """Why `name` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"topic name is {len(name)} characters long, the maximum is {TOPIC_NAME_LENGTH_MAX}"
    if not _TOPIC_NAME.fullmatch(name):
        return (
            f"topic name {name!r} contains characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return None


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic whose name differs from `name` only by '.' against '_' (Kafka
    refuses such a pair: the two are one name in metric names), or None."""
    if "." not in name and "_" not in name:
        return None
    folded = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == folded:
            return other
    return None


def with_effective_defaults(
    configs: Mapping[str, str], *, default_min_insync_replicas: int, replication_factor: int
) -> dict[str, str]:
    """`configs` of a new topic with the cluster's `min.insync.replicas` written in when
    not given: one effective value, recorded with the topic and shown by `topic describe`,
    so no process decides by a default of its own. A default above the topic's replication
    factor is refused, as an explicit value would be (Kafka caps it silently)."""
    if MIN_INSYNC_REPLICAS in configs:
        return dict(configs)
    if default_min_insync_replicas > replication_factor:
        raise InvalidTopicConfigError(
            f"the cluster default min.insync.replicas={default_min_insync_replicas} is above "
            f"the replication factor {replication_factor}: set min.insync.replicas for this topic"
        )
    return {**configs, MIN_INSYNC_REPLICAS: str(default_min_insync_replicas)}
