"""PURE validation of topic configs: known keys, types and ranges, normalised values.

Unknown keys, malformed values and `min.insync.replicas` above the replication factor are
refused with INVALID_CONFIG naming the key (Kafka silently caps min.insync.replicas; we
refuse, so a producer with acks=all is never surprised). Topic names follow Kafka's rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.record_batch import HEADER_SIZE

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
TOPIC_NAME_LENGTH_MAX: Final = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"


def _config_error(message: str) -> MiniKafkaError:
    return MiniKafkaError(message, code=ErrorCode.INVALID_CONFIG)


def _integer(minimum: int, maximum: int) -> Callable[[str, str], str]:
    def parse(key: str, value: str) -> str:
        text = value.strip()
        if not re.fullmatch(r"-?[0-9]+", text):
            raise _config_error(f"invalid value {value!r} for {key}: expected an integer")
        number = int(text)
        if not minimum <= number <= maximum:
            raise _config_error(
                f"invalid value {number} for {key}: must be between {minimum} and {maximum}"
            )
        return str(number)

    return parse


def _choice(*choices: str, case_sensitive: bool = True) -> Callable[[str, str], str]:
    def parse(key: str, value: str) -> str:
        for choice in choices:
            if value == choice or (not case_sensitive and value.lower() == choice.lower()):
                return choice
        raise _config_error(f"invalid value {value!r} for {key}: expected one of {list(choices)}")

    return parse


#: Every topic config the brokers understand, with its parser (value -> normalised value).
TOPIC_CONFIGS: Final[Mapping[str, Callable[[str, str], str]]] = {
    MIN_INSYNC_REPLICAS: _integer(1, INT32_MAX),
    UNCLEAN_LEADER_ELECTION_ENABLE: _choice("true", "false", case_sensitive=False),
    "retention.ms": _integer(-1, INT64_MAX),
    "retention.bytes": _integer(-1, INT64_MAX),
    "segment.bytes": _integer(HEADER_SIZE, INT32_MAX),  # room for one batch header
    "segment.ms": _integer(1, INT64_MAX),
    "max.message.bytes": _integer(0, INT32_MAX),
    "flush.messages": _integer(1, INT64_MAX),
    "flush.ms": _integer(0, INT64_MAX),
    "flush.policy": _choice("none", "fsync"),
    "message.timestamp.type": _choice("CreateTime", "LogAppendTime"),
    "cleanup.policy": _choice("delete"),
}


def validate_topic_name(name: str) -> None:
    """Raise INVALID_TOPIC_EXCEPTION unless `name` is a legal Kafka topic name."""
    if not name:
        raise MiniKafkaError("topic name is empty", code=ErrorCode.INVALID_TOPIC_EXCEPTION)
    if name in (".", ".."):
        raise MiniKafkaError(
            f"topic name {name!r} is not allowed", code=ErrorCode.INVALID_TOPIC_EXCEPTION
        )
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise MiniKafkaError(
            f"topic name is {len(name)} characters long, the maximum is {TOPIC_NAME_LENGTH_MAX}",
            code=ErrorCode.INVALID_TOPIC_EXCEPTION,
        )
    if not _TOPIC_NAME.fullmatch(name):
        raise MiniKafkaError(
            f"topic name {name!r} contains characters other than ASCII alphanumerics, '.', '_' "
            "and '-'",
            code=ErrorCode.INVALID_TOPIC_EXCEPTION,
        )


def validate_topic_configs(
    configs: Mapping[str, str], *, replication_factor: int
) -> dict[str, str]:
    """Return the normalised configs or raise INVALID_CONFIG naming the offending key."""
    normalised: dict[str, str] = {}
    for key in sorted(configs):
        parse = TOPIC_CONFIGS.get(key)
        if parse is None:
            raise _config_error(
                f"unknown topic config {key!r}; known configs: {', '.join(sorted(TOPIC_CONFIGS))}"
            )
        normalised[key] = parse(key, configs[key])
    min_insync = normalised.get(MIN_INSYNC_REPLICAS)
    if min_insync is not None and int(min_insync) > replication_factor:
        raise _config_error(
            f"{MIN_INSYNC_REPLICAS} {min_insync} is larger than the replication factor "
            f"{replication_factor}: no write with acks=all could ever succeed"
        )
    return normalised


def min_insync_replicas(configs: Mapping[str, str], *, default: int) -> int:
    value = configs.get(MIN_INSYNC_REPLICAS)
    return default if value is None else int(value)


def unclean_leader_election_enabled(configs: Mapping[str, str], *, default: bool) -> bool:
    value = configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)
    return default if value is None else value == "true"
