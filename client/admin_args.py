"""Argument checks for admin calls: topic names, topic configs, `NewTopic`s, partition
lists and group ids, each refused with a clear error naming the call; and the raising of
per-topic errors from an answer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from client.errors import from_response
from client.records import NewTopic, TopicPartition
from minikafka.errors import ErrorCode
from minikafka.v1 import controller_pb2

#: A topic config value: a str as Kafka spells it, or a number or bool converted to one.
ConfigValue = str | int | float | bool


def topic_names(names: str | Iterable[str], what: str) -> list[str]:
    """Topic names given as one str or an iterable of them (a str is never split)."""
    if isinstance(names, str):
        return [names]
    if not isinstance(names, Iterable):
        raise TypeError(f"{what}: give a topic name or a list of them, got {names!r}")
    result = list(names)
    for name in result:
        if not isinstance(name, str):
            raise TypeError(f"{what}: topic names must be str, got {name!r}")
    return result


def _config_value(key: object, value: object, what: str) -> str:
    """A topic config value as the string the wire carries (bools as Kafka spells them)."""
    if not isinstance(key, str):
        raise TypeError(f"{what}: config keys must be str, got {key!r}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TypeError(
        f"{what}: the value of config {key!r} must be a str (or a number), got "
        f"{type(value).__name__} {value!r}"
    )


def topic_configs(configs: Mapping[str, object] | None, what: str) -> dict[str, str]:
    if configs is None:
        return {}
    if not isinstance(configs, Mapping):
        raise TypeError(f"{what}: configs must be a dict of str to str, got {configs!r}")
    return {k: _config_value(k, v, what) for k, v in configs.items()}


def new_topic(item: object, defaults: NewTopic) -> NewTopic:
    """`item` (a `NewTopic` or a name taking `defaults`) as a checked `NewTopic`."""
    if isinstance(item, str):
        item = NewTopic(
            item,
            num_partitions=defaults.num_partitions,
            replication_factor=defaults.replication_factor,
            configs=defaults.configs,
        )
    if not isinstance(item, NewTopic):
        raise TypeError(
            f"create_topics() takes topic names or NewTopic(name, num_partitions, "
            f"replication_factor), got {type(item).__name__} {item!r}"
        )
    if not isinstance(item.name, str):
        raise TypeError(f"NewTopic name must be a str, got {item.name!r}")
    for field in ("num_partitions", "replication_factor"):
        value = getattr(item, field)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                f"NewTopic {item.name!r}: {field} must be an int (-1: the broker default), "
                f"got {type(value).__name__} {value!r}"
            )
    configs = topic_configs(item.configs, f"NewTopic {item.name!r}")
    return NewTopic(item.name, item.num_partitions, item.replication_factor, configs)


def group_id_arg(group_id: object) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise ValueError(f"a group id must be a non-empty str, got {group_id!r}")
    return group_id


def election_partitions(partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
    if partitions is None:
        return []
    return topic_partitions(partitions, "elect_leaders()")


def topic_partitions(partitions: Iterable[TopicPartition], what: str) -> list[TopicPartition]:
    if isinstance(partitions, str | TopicPartition) or not isinstance(partitions, Iterable):
        raise TypeError(f"{what}: partitions must be a list of TopicPartition, got {partitions!r}")
    result = []
    for tp in partitions:
        if not (
            isinstance(tp, tuple)
            and len(tp) == 2
            and isinstance(tp[0], str)
            and isinstance(tp[1], int)
            and not isinstance(tp[1], bool)
        ):
            raise TypeError(f"{what}: expected TopicPartition(topic, partition), got {tp!r}")
        result.append(TopicPartition(tp[0], tp[1]))
    return result


def raise_topic_errors(results: Iterable[controller_pb2.TopicResult], what: str) -> None:
    for result in results:
        if result.error_code != ErrorCode.NONE:
            raise from_response(
                result.error_code, result.error_message, context=f"{what} {result.name!r}"
            )
