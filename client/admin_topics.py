"""Topic administration: create, delete, list and describe topics, alter their
configs and add partitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from client.admin_args import (
    ConfigValue,
    new_topic,
    raise_topic_errors,
    topic_configs,
    topic_names,
)
from client.admin_base import AdminBase
from client.admin_model import NewPartitions, TopicDescription, describe_topic
from client.errors import UnknownTopicOrPartitionError, from_response
from client.records import NewTopic
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, controller_pb2


class TopicAdmin(AdminBase):
    """`AsyncAdmin`'s topic calls."""

    async def create_topics(
        self,
        new_topics: str | NewTopic | Iterable[str | NewTopic],
        *,
        num_partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create topics given as names (using the keyword defaults) or `NewTopic`s.

        Raises the error of the first topic that failed (e.g. `TopicAlreadyExistsError`).
        `-1` partitions or replication factor means the broker's default.
        """
        if isinstance(new_topics, str | NewTopic):
            items: list[object] = [new_topics]
        elif isinstance(new_topics, Iterable):
            items = list(new_topics)
        else:
            items = [new_topics]  # refused below with a clear message
        defaults = NewTopic(
            "",
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=topic_configs(configs, "create_topics()"),
        )
        topics = [new_topic(t, defaults) for t in items]
        request = controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs=t.configs,
                )
                for t in topics
            ],
            validate_only=validate_only,
            timeout_ms=self.request_timeout_ms,
        )
        response = await self._call(
            lambda stub: stub.CreateTopics(request, timeout=self._timeout_s), "CreateTopics"
        )
        raise_topic_errors(response.topics, "create topic")

    async def delete_topics(self, names: str | Iterable[str]) -> None:
        topics = topic_names(names, "delete_topics()")
        request = controller_pb2.DeleteTopicsRequest(
            names=topics, timeout_ms=self.request_timeout_ms
        )
        response = await self._call(
            lambda stub: stub.DeleteTopics(request, timeout=self._timeout_s), "DeleteTopics"
        )
        raise_topic_errors(response.topics, "delete topic")

    async def _metadata(self, topics: list[str]) -> broker_pb2.MetadataResponse:
        request = broker_pb2.MetadataRequest(topics=topics)
        return await self._call(
            lambda stub: stub.Metadata(request, timeout=self._timeout_s), "Metadata"
        )

    async def describe_topics(
        self, topics: str | Iterable[str] | None = None
    ) -> list[TopicDescription]:
        """Partitions (leader, epoch, replicas, ISR, state) and configs of `topics` (one
        name or a list), in the order given (all topics, sorted, by default).

        Raises `UnknownTopicOrPartitionError` for a named topic that does not exist.
        """
        names = topic_names(topics or (), "describe_topics()")
        response = await self._metadata(names)
        found = {t.name: describe_topic(t) for t in response.topics}
        result: list[TopicDescription] = []
        for name in names or sorted(found):
            info = found.get(name)
            if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicOrPartitionError(
                    f"describe topic {name!r}: topic {name!r} does not exist"
                )
            if info.error_code != ErrorCode.NONE:
                raise from_response(info.error_code, context=f"describe topic {name!r}")
            result.append(info)
        return result

    async def list_topics(self) -> list[str]:
        response = await self._metadata([])
        return sorted(t.name for t in response.topics if t.error_code == ErrorCode.NONE)

    async def alter_configs(
        self,
        topic: str,
        configs: Mapping[str, ConfigValue],
        *,
        delete: Iterable[str] = (),
        validate_only: bool = False,
    ) -> None:
        if not isinstance(topic, str):
            raise TypeError(f"alter_configs(): the topic must be a str, got {topic!r}")
        request = controller_pb2.AlterConfigsRequest(
            topic=topic,
            set=topic_configs(configs, f"alter_configs({topic!r})"),
            delete=topic_names(delete, f"alter_configs({topic!r}) delete"),
            validate_only=validate_only,
        )
        response = await self._call(
            lambda stub: stub.AlterConfigs(request, timeout=self._timeout_s), "AlterConfigs"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(
                response.error_code, response.error_message, context=f"alter configs of {topic!r}"
            )

    async def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions | int],
        *,
        validate_only: bool = False,
    ) -> None:
        """Grow each topic to its new total partition count (`NewPartitions(n)` or n).

        New partitions are placed as creation places them, at the topic's replication
        factor. Raises the error of the first topic that failed (e.g.
        `InvalidPartitionsError` when the count is not larger than the current one).
        """
        if not isinstance(topic_partitions, Mapping):
            raise TypeError(
                "create_partitions() takes a dict of topic name -> NewPartitions(total_count), "
                f"got {topic_partitions!r}"
            )
        topics = []
        for name, wanted in topic_partitions.items():
            if not isinstance(name, str):
                raise TypeError(f"create_partitions(): topic names must be str, got {name!r}")
            count = wanted.total_count if isinstance(wanted, NewPartitions) else wanted
            if isinstance(count, bool) or not isinstance(count, int):
                raise TypeError(
                    f"create_partitions(): the partition count of {name!r} must be an int, "
                    f"got {count!r}"
                )
            topics.append(controller_pb2.CreatePartitionsTopic(name=name, count=count))
        request = controller_pb2.CreatePartitionsRequest(
            topics=topics, validate_only=validate_only, timeout_ms=self.request_timeout_ms
        )
        response = await self._call(
            lambda stub: stub.CreatePartitions(request, timeout=self._timeout_s),
            "CreatePartitions",
        )
        raise_topic_errors(response.topics, "create partitions of topic")
