"""Per-topic configuration keys (Kafka's names), their types and validation.

Used by whoever accepts topic configs (the controller, a standalone broker, the CLI) so
that every entry point refuses the same bad input with the same message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final


class InvalidTopicConfigError(ValueError):
    """A topic config key is unknown or its value is invalid."""


def _int_validator(low: int, high: int = 2**63 - 1) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value)
        except ValueError:
            return f"{value!r} is not an integer"
        if not low <= number <= high:
            return f"{number} is out of range [{low}, {high}]"
        return None

    return check


def _choice_validator(*choices: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value not in choices:
            return f"{value!r} is not one of {', '.join(choices)}"
        return None

    return check


#: Known keys -> validator returning an error message or None.
TOPIC_CONFIG_KEYS: Final[Mapping[str, Callable[[str], str | None]]] = {
    "min.insync.replicas": _int_validator(1, 2**31 - 1),
    "unclean.leader.election.enable": _choice_validator("true", "false"),
    "retention.ms": _int_validator(-1),
    "retention.bytes": _int_validator(-1),
    "segment.bytes": _int_validator(1024, 2**31 - 1),
    "segment.ms": _int_validator(1),
    "max.message.bytes": _int_validator(0, 2**31 - 1),
    "flush.messages": _int_validator(-1),
    "flush.ms": _int_validator(-1),
    "flush.policy": _choice_validator("none", "fsync"),
    "message.timestamp.type": _choice_validator("CreateTime", "LogAppendTime"),
    "cleanup.policy": _choice_validator("delete"),
}


def validate_topic_configs(configs: Mapping[str, str], *, replication_factor: int | None) -> None:
    """Raise `InvalidTopicConfigError` for an unknown key, a bad value, or a
    `min.insync.replicas` above the replication factor (Kafka silently caps it; we refuse)."""
    for key, value in configs.items():
        validator = TOPIC_CONFIG_KEYS.get(key)
        if validator is None:
            known = ", ".join(sorted(TOPIC_CONFIG_KEYS))
            raise InvalidTopicConfigError(f"unknown topic config {key!r}; known keys: {known}")
        problem = validator(value)
        if problem is not None:
            raise InvalidTopicConfigError(f"invalid value for {key}: {problem}")
    min_isr = configs.get("min.insync.replicas")
    if min_isr is not None and replication_factor is not None and int(min_isr) > replication_factor:
        raise InvalidTopicConfigError(
            f"min.insync.replicas={min_isr} is larger than the replication factor "
            f"{replication_factor}: acks=all writes could never succeed"
        )


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
