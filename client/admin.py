"""Cluster administration: `AsyncAdmin` (asyncio) and `Admin` (sync, used by the CLI).

Create, delete, list and describe topics, add partitions, alter topic configs, elect
leaders, describe the cluster and a partition's history, and list offsets. Admin calls
go to any broker, which forwards them to the controller; `list_offsets` asks each
partition's leader. A per-topic or per-partition error is raised as the
`client.errors` class for its code, carrying the broker's message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from client.admin_args import ConfigValue, group_id_arg
from client.admin_cluster import ClusterAdmin
from client.admin_model import (
    BrokerDescription,
    ClusterDescription,
    ElectionResult,
    NewPartitions,
    OffsetInfo,
    OffsetSpec,
    PartitionDescription,
    PartitionHistory,
    PartitionHistoryEvent,
    TopicDescription,
    describe_topic,
    partition_history,
)
from client.admin_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OffsetAdmin
from client.admin_topics import TopicAdmin
from client.errors import IllegalStateError, check_config_keys
from client.group_admin import GroupDescription, GroupListing
from client.loop_thread import LoopThread
from client.records import NewTopic, OffsetAndMetadata, TopicPartition
from minikafka.acl import AclBinding, AclFilter


class AsyncAdmin(TopicAdmin, ClusterAdmin, OffsetAdmin):
    """The asyncio admin client: topic calls (`client.admin_topics`), cluster, election
    and ACL calls (`client.admin_cluster`), `list_offsets` (`client.admin_offsets`) and
    consumer-group calls (`client.group_admin`), over one set of broker connections
    (`client.admin_base`)."""

    # ---- consumer groups (see `client.group_admin`) -----------------------------------

    async def list_consumer_groups(self) -> list[GroupListing]:
        """Every group with members or committed offsets, from every broker."""
        self._check_open("list_consumer_groups()")
        return await self._groups.list_groups()

    async def describe_consumer_group(self, group_id: str) -> GroupDescription:
        """State, epoch, assignor and members (with their assignments) of `group_id`;
        `GroupIdNotFoundError` when it has neither members nor committed offsets."""
        self._check_open("describe_consumer_group()")
        return await self._groups.describe_group(group_id_arg(group_id))

    async def list_consumer_group_offsets(
        self, group_id: str
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets."""
        self._check_open("list_consumer_group_offsets()")
        return await self._groups.list_offsets(group_id_arg(group_id))

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Set the group's committed offsets; refused while the group has members
        (`UnknownMemberIdError`)."""
        self._check_open("alter_consumer_group_offsets()")
        checked = {
            TopicPartition(*tp): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v)
            for tp, v in offsets.items()
        }
        bad = [(tp, m.offset) for tp, m in checked.items() if m.offset < 0]
        if bad:
            raise ValueError(f"offsets must be >= 0, got {bad[0][1]} for {bad[0][0]}")
        await self._groups.alter_offsets(group_id_arg(group_id), checked)

    async def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups (their committed offsets); `NonEmptyGroupError` while a group
        has members."""
        self._check_open("delete_consumer_groups()")
        for group_id in group_ids:
            await self._groups.delete_group(group_id_arg(group_id))


class Admin:
    """Synchronous admin client (the CLI uses it).

    Example::

        with Admin("127.0.0.1:9092") as admin:
            admin.create_topics(NewTopic("orders", num_partitions=3, replication_factor=3))
            print(admin.describe_topics(["orders"])[0].partitions[0].leader)
    """

    def __init__(self, bootstrap_servers: str | Sequence[str] = "localhost:9092", **config: Any):
        check_config_keys("Admin", config, AsyncAdmin.__init__)
        self._thread = LoopThread(
            "minikafka-admin",
            closed_error=lambda: IllegalStateError("the admin client is closed"),
        )
        try:
            self._inner: AsyncAdmin = self._thread.run(self._make(bootstrap_servers, config))
        except BaseException:
            self._thread.stop()
            raise
        self._closed = False

    @staticmethod
    async def _make(bootstrap_servers: str | Sequence[str], config: dict[str, Any]) -> AsyncAdmin:
        return AsyncAdmin(bootstrap_servers, **config)

    def create_topics(
        self,
        new_topics: str | NewTopic | Iterable[str | NewTopic],
        *,
        num_partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
        validate_only: bool = False,
    ) -> None:
        self._thread.run(
            self._inner.create_topics(
                new_topics,
                num_partitions=num_partitions,
                replication_factor=replication_factor,
                configs=configs,
                validate_only=validate_only,
            )
        )

    def delete_topics(self, names: str | Iterable[str]) -> None:
        self._thread.run(self._inner.delete_topics(names))

    def list_topics(self) -> list[str]:
        return self._thread.run(self._inner.list_topics())

    def describe_topics(self, topics: str | Iterable[str] | None = None) -> list[TopicDescription]:
        return self._thread.run(self._inner.describe_topics(topics))

    def describe_cluster(self, topics: Iterable[str] = ()) -> ClusterDescription:
        return self._thread.run(self._inner.describe_cluster(topics))

    def alter_configs(
        self,
        topic: str,
        configs: Mapping[str, ConfigValue],
        *,
        delete: Iterable[str] = (),
        validate_only: bool = False,
    ) -> None:
        self._thread.run(
            self._inner.alter_configs(topic, configs, delete=delete, validate_only=validate_only)
        )

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        self._thread.run(self._inner.create_acls(list(acls)))

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        return self._thread.run(self._inner.delete_acls(list(filters)))

    def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        return self._thread.run(self._inner.describe_acls(acl_filter))

    def elect_leaders(
        self,
        election_type: Literal["preferred", "unclean"] = "preferred",
        partitions: Iterable[TopicPartition] | None = None,
        *,
        raise_errors: bool = False,
    ) -> list[ElectionResult]:
        return self._thread.run(
            self._inner.elect_leaders(election_type, partitions, raise_errors=raise_errors)
        )

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions | int],
        *,
        validate_only: bool = False,
    ) -> None:
        self._thread.run(
            self._inner.create_partitions(topic_partitions, validate_only=validate_only)
        )

    def describe_partition_history(self, topic: str, partition: int) -> PartitionHistory:
        return self._thread.run(self._inner.describe_partition_history(topic, partition))

    def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: OffsetSpec = "latest"
    ) -> dict[TopicPartition, OffsetInfo]:
        return self._thread.run(self._inner.list_offsets(partitions, spec))

    def list_consumer_groups(self) -> list[GroupListing]:
        return self._thread.run(self._inner.list_consumer_groups())

    def describe_consumer_group(self, group_id: str) -> GroupDescription:
        return self._thread.run(self._inner.describe_consumer_group(group_id))

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._thread.run(self._inner.list_consumer_group_offsets(group_id))

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        self._thread.run(self._inner.alter_consumer_group_offsets(group_id, offsets))

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        self._thread.run(self._inner.delete_consumer_groups(list(group_ids)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._inner.close(), 10.0)
        finally:
            self._thread.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "Admin",
    "AsyncAdmin",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigValue",
    "ElectionResult",
    "NewPartitions",
    "NewTopic",
    "OffsetInfo",
    "OffsetSpec",
    "PartitionDescription",
    "PartitionHistory",
    "PartitionHistoryEvent",
    "TopicDescription",
    "describe_topic",
    "partition_history",
]
