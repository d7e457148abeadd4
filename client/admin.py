"""Cluster administration: `AsyncAdmin` (asyncio) and `Admin` (sync, used by the CLI).

Create, delete, list and describe topics, add partitions, alter topic configs, elect
leaders, describe the cluster and a partition's history, and list offsets. Admin calls
go to any broker, which forwards them to the controller; `list_offsets` asks each
partition's leader. A per-topic or per-partition error is raised as the
`client.errors` class for its code, carrying the broker's message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import grpc
import grpc.aio
import msgspec

from client.errors import (
    IllegalStateError,
    KafkaConnectionError,
    MiniKafkaClientError,
    NoBrokersAvailable,
    UnknownTopicOrPartitionError,
    authorization_error,
    check_config_keys,
    from_response,
)
from client.group_admin import GroupCalls, GroupDescription, GroupListing
from client.loop_thread import LoopThread
from client.records import NewTopic, OffsetAndMetadata, TopicPartition
from client.security import client_tls
from client.transport import BrokerConnections
from minikafka.acl import AclBinding, AclFilter
from minikafka.acl_wire import binding_from_wire, binding_to_wire, filter_to_wire
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2

T = TypeVar("T")
#: ListOffsets timestamps that name the log start and the high watermark (the wire's).
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
#: A topic config value: a str as Kafka spells it, or a number or bool converted to one.
ConfigValue = str | int | float | bool


class BrokerDescription(msgspec.Struct, frozen=True, kw_only=True):
    broker_id: int
    host: str
    port: int
    rack: str
    broker_epoch: int = -1
    fenced: bool = False
    in_controlled_shutdown: bool = False


class PartitionDescription(msgspec.Struct, frozen=True, kw_only=True):
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    #: "ONLINE", "OFFLINE" or "RECOVERING".
    state: str
    error_code: int = 0
    #: Eligible leader replicas (KIP-966): out of the ISR but holding every committed
    #: record, electable when no ISR member is.
    elr: list[int] = msgspec.field(default_factory=list)
    #: No longer eligible (restarted without proof that their log is whole): the last
    #: replicas known to have held every committed record.
    last_known_elr: list[int] = msgspec.field(default_factory=list)


class TopicDescription(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    partitions: list[PartitionDescription]
    configs: dict[str, str]
    error_code: int = 0


class ClusterDescription(msgspec.Struct, frozen=True, kw_only=True):
    cluster_id: str
    controller_id: int
    controller_epoch: int
    brokers: list[BrokerDescription]
    topics: list[TopicDescription]
    #: Whether the controller keeps eligible leader replicas (KIP-966).
    eligible_leader_replicas_enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.to_builtins(self)
        return result


class NewPartitions(msgspec.Struct, frozen=True):
    """The new total partition count of a topic, for `create_partitions` (kafka-python's
    `NewPartitions(total_count)`; explicit assignments are not supported: new partitions
    are placed as creation places them)."""

    total_count: int


#: Where `list_offsets` looks: the first offset, the high watermark, or the first offset
#: whose timestamp is at or after a time (ms since the epoch).
OffsetSpec = Literal["earliest", "latest"] | int


class OffsetInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A partition's offset as its leader answered, with the leader's log around it."""

    #: The offset asked for; -1 when no record has a timestamp at or after the one given.
    offset: int
    timestamp_ms: int
    leader_epoch: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


class PartitionHistoryEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a partition's history as the controller derived it (see
    `describe_partition_history`)."""

    metadata_offset: int
    time_ms: int
    replayed: bool
    kinds: list[str]
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    #: None when the controller does not have eligible leader replicas (KIP-966).
    elr: list[int] | None
    last_known_elr: list[int] | None
    state: str
    previous_leader: int
    #: The broker of a broker event (-1 on partition and controller events).
    broker_id: int
    broker_epoch: int
    detail: str


class PartitionHistory(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    events: list[PartitionHistoryEvent]
    #: Older events are missing (the bounded history dropped them, or the controller
    #: started after them).
    truncated: bool
    controller_id: int


class ElectionResult(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    leader: int
    error_code: int = 0
    error_message: str = ""

    @property
    def error(self) -> MiniKafkaClientError | None:
        """The partition's error (None on success)."""
        if self.error_code == ErrorCode.NONE:
            return None
        return from_response(
            self.error_code, self.error_message, context=f"{self.topic}-{self.partition}"
        )


def partition_history(
    topic: str, partition: int, response: controller_pb2.DescribePartitionHistoryResponse
) -> PartitionHistory:
    """The client's view of a `DescribePartitionHistory` answer."""
    return PartitionHistory(
        topic=topic,
        partition=partition,
        truncated=response.truncated,
        controller_id=response.controller_id,
        events=[
            PartitionHistoryEvent(
                metadata_offset=e.metadata_offset,
                time_ms=e.time_ms,
                replayed=e.replayed,
                kinds=list(e.kinds),
                leader=e.leader,
                leader_epoch=e.leader_epoch,
                partition_epoch=e.partition_epoch,
                replicas=list(e.replicas),
                isr=list(e.isr),
                elr=list(e.elr) if e.has_elr else None,
                last_known_elr=list(e.last_known_elr) if e.has_elr else None,
                state=e.state,
                previous_leader=e.previous_leader,
                broker_id=e.broker_id,
                broker_epoch=e.broker_epoch,
                detail=e.detail,
            )
            for e in response.events
        ],
    )


def describe_topic(topic: common_pb2.TopicMetadata) -> TopicDescription:
    return TopicDescription(
        name=topic.name,
        error_code=int(topic.error_code),
        configs=dict(topic.configs),
        partitions=sorted(
            (
                PartitionDescription(
                    partition=p.partition,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    offline_replicas=list(p.offline_replicas),
                    state=p.state or "ONLINE",
                    error_code=int(p.error_code),
                    elr=list(p.elr),
                    last_known_elr=list(p.last_known_elr),
                )
                for p in topic.partitions
            ),
            key=lambda d: d.partition,
        ),
    )


def _names(names: str | Iterable[str], what: str) -> list[str]:
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


def _configs(configs: Mapping[str, object] | None, what: str) -> dict[str, str]:
    if configs is None:
        return {}
    if not isinstance(configs, Mapping):
        raise TypeError(f"{what}: configs must be a dict of str to str, got {configs!r}")
    return {k: _config_value(k, v, what) for k, v in configs.items()}


def _new_topic(item: object, defaults: NewTopic) -> NewTopic:
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
    configs = _configs(item.configs, f"NewTopic {item.name!r}")
    return NewTopic(item.name, item.num_partitions, item.replication_factor, configs)


class AsyncAdmin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        client_id: str = "minikafka-admin",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_check_hostname: bool = True,
    ) -> None:
        tls = client_tls(
            security_protocol=security_protocol,
            ssl_cafile=ssl_cafile,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_check_hostname=ssl_check_hostname,
        )
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._conn = BrokerConnections(
            bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            client_id=client_id,
            tls=tls,
        )
        self._closed = False
        self._groups = GroupCalls(
            self._conn, timeout_s=request_timeout_ms / 1000, backoff_s=retry_backoff_ms / 1000
        )

    async def close(self) -> None:
        self._closed = True
        await self._conn.close()

    # ---- consumer groups (see `client.group_admin`) -----------------------------------

    async def list_consumer_groups(self) -> list[GroupListing]:
        """Every group with members or committed offsets, from every broker."""
        self._check_open("list_consumer_groups()")
        return await self._groups.list_groups()

    async def describe_consumer_group(self, group_id: str) -> GroupDescription:
        """State, epoch, assignor and members (with their assignments) of `group_id`;
        `GroupIdNotFoundError` when it has neither members nor committed offsets."""
        self._check_open("describe_consumer_group()")
        return await self._groups.describe_group(_group_id(group_id))

    async def list_consumer_group_offsets(
        self, group_id: str
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets."""
        self._check_open("list_consumer_group_offsets()")
        return await self._groups.list_offsets(_group_id(group_id))

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
        await self._groups.alter_offsets(_group_id(group_id), checked)

    async def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups (their committed offsets); `NonEmptyGroupError` while a group
        has members."""
        self._check_open("delete_consumer_groups()")
        for group_id in group_ids:
            await self._groups.delete_group(_group_id(group_id))

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise IllegalStateError(f"{what}: the admin client is closed")

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(
        self, fn: Callable[[broker_pb2_grpc.BrokerServiceAsyncStub], Awaitable[T]], what: str
    ) -> T:
        """Call any reachable broker; connection failures move on to the next one and
        are retried until the request timeout."""
        if self._closed:
            raise IllegalStateError(f"{what}: the admin client is closed")
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        errors: list[str] = []
        while True:
            for address in self._conn.any_stub_addresses():
                try:
                    return await fn(self._conn.stub(address))
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is grpc.StatusCode.PERMISSION_DENIED:
                        raise authorization_error(
                            exc.details() or "", context=f"{what} at {address}"
                        ) from exc
                    if exc.code() not in (
                        grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                    ):
                        raise KafkaConnectionError(
                            f"{what} failed at {address}: {exc.code().name} {exc.details()}"
                        ) from exc
                    errors.append(f"{address}: {exc.code().name}")
            if time.monotonic() >= deadline:
                raise NoBrokersAvailable(f"{what}: no broker answered ({'; '.join(errors[-3:])})")
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    @property
    def _timeout_s(self) -> float:
        return self.request_timeout_ms / 1000

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
            configs=_configs(configs, "create_topics()"),
        )
        topics = [_new_topic(t, defaults) for t in items]
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
        _raise_topic_errors(response.topics, "create topic")

    async def delete_topics(self, names: str | Iterable[str]) -> None:
        topics = _names(names, "delete_topics()")
        request = controller_pb2.DeleteTopicsRequest(
            names=topics, timeout_ms=self.request_timeout_ms
        )
        response = await self._call(
            lambda stub: stub.DeleteTopics(request, timeout=self._timeout_s), "DeleteTopics"
        )
        _raise_topic_errors(response.topics, "delete topic")

    async def describe_cluster(self, topics: Iterable[str] = ()) -> ClusterDescription:
        """Brokers (with fencing state) and topics as the controller sees them."""
        request = controller_pb2.DescribeClusterRequest(topics=_names(topics, "describe_cluster()"))
        response = await self._call(
            lambda stub: stub.DescribeCluster(request, timeout=self._timeout_s), "DescribeCluster"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, context="describe cluster")
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            controller_epoch=response.controller_epoch,
            brokers=sorted(
                (
                    BrokerDescription(
                        broker_id=b.endpoint.broker_id,
                        host=b.endpoint.host,
                        port=b.endpoint.port,
                        rack=b.endpoint.rack,
                        broker_epoch=b.broker_epoch,
                        fenced=b.fenced,
                        in_controlled_shutdown=b.in_controlled_shutdown,
                    )
                    for b in response.brokers
                ),
                key=lambda d: d.broker_id,
            ),
            topics=sorted((describe_topic(t) for t in response.topics), key=lambda d: d.name),
            eligible_leader_replicas_enabled=response.eligible_leader_replicas_enabled,
        )

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
        names = _names(topics or (), "describe_topics()")
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
            set=_configs(configs, f"alter_configs({topic!r})"),
            delete=_names(delete, f"alter_configs({topic!r}) delete"),
            validate_only=validate_only,
        )
        response = await self._call(
            lambda stub: stub.AlterConfigs(request, timeout=self._timeout_s), "AlterConfigs"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(
                response.error_code, response.error_message, context=f"alter configs of {topic!r}"
            )

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Add ACLs (kafka-acls --add); all or none: a malformed one raises
        `InvalidRequestError` and nothing is added. Existing ones are kept once."""
        request = controller_pb2.CreateAclsRequest(acls=[binding_to_wire(a) for a in acls])
        response = await self._call(
            lambda stub: stub.CreateAcls(request, timeout=self._timeout_s), "CreateAcls"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, response.error_message, context="create ACLs")

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove every ACL one of `filters` matches (kafka-acls --remove); returns them."""
        request = controller_pb2.DeleteAclsRequest(filters=[filter_to_wire(f) for f in filters])
        response = await self._call(
            lambda stub: stub.DeleteAcls(request, timeout=self._timeout_s), "DeleteAcls"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, response.error_message, context="delete ACLs")
        return [binding_from_wire(message) for message in response.deleted]

    async def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACLs `acl_filter` matches (all without one; kafka-acls --list)."""
        wanted = filter_to_wire(acl_filter or AclFilter())
        request = controller_pb2.DescribeAclsRequest(filter=wanted)
        response = await self._call(
            lambda stub: stub.DescribeAcls(request, timeout=self._timeout_s), "DescribeAcls"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(
                response.error_code, response.error_message, context="describe ACLs"
            )
        return [binding_from_wire(message) for message in response.acls]

    async def elect_leaders(
        self,
        election_type: Literal["preferred", "unclean"] = "preferred",
        partitions: Iterable[TopicPartition] | None = None,
        *,
        raise_errors: bool = False,
    ) -> list[ElectionResult]:
        """Run a preferred or unclean election for `partitions` (all when None).

        Each result carries its partition's code (`.error` gives the exception); with
        `raise_errors`, the first error other than ELECTION_NOT_NEEDED is raised.
        """
        kinds = {
            "preferred": controller_pb2.ElectionType.PREFERRED,
            "unclean": controller_pb2.ElectionType.UNCLEAN,
        }
        if election_type not in kinds:
            raise ValueError(
                f"election_type must be 'preferred' or 'unclean', got {election_type!r}"
            )
        request = controller_pb2.ElectLeadersRequest(
            election_type=kinds[election_type],
            partitions=[
                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in _election_partitions(partitions)
            ],
            timeout_ms=self.request_timeout_ms,
        )
        response = await self._call(
            lambda stub: stub.ElectLeaders(request, timeout=self._timeout_s), "ElectLeaders"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, context="elect leaders")
        outcomes = [
            ElectionResult(
                topic=r.topic,
                partition=r.partition,
                leader=r.leader,
                error_code=int(r.error_code),
                error_message=r.error_message,
            )
            for r in response.results
        ]
        if raise_errors:
            for o in outcomes:
                if o.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
                    raise from_response(
                        o.error_code,
                        o.error_message,
                        context=f"elect leader of {o.topic}-{o.partition}",
                    )
        return outcomes

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
        _raise_topic_errors(response.topics, "create partitions of topic")

    async def describe_partition_history(self, topic: str, partition: int) -> PartitionHistory:
        """The partition's history as the controller keeps it (bounded, in memory): every
        change of leader, leader epoch, ISR (and ELR), unclean elections, offline spells,
        and the registrations and fencing of its replicas' brokers, in metadata order."""
        request = controller_pb2.DescribePartitionHistoryRequest(topic=topic, partition=partition)
        response = await self._call(
            lambda stub: stub.DescribePartitionHistory(request, timeout=self._timeout_s),
            "DescribePartitionHistory",
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(
                response.error_code,
                response.error_message,
                context=f"history of {topic}-{partition}",
            )
        return partition_history(topic, partition, response)

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: OffsetSpec = "latest"
    ) -> dict[TopicPartition, OffsetInfo]:
        """The offset `spec` names in each partition, asked of its leader: "earliest"
        (the log start offset), "latest" (the high watermark: the offset the next
        committed record gets) or a timestamp in ms (the first offset whose record's
        timestamp is at or after it; -1 when none is).

        Retriable errors (leader moving, metadata behind, a new leader whose high
        watermark is not known yet) are retried until the request timeout.
        """
        wanted = _topic_partitions(partitions, "list_offsets()")
        if spec == "earliest":
            timestamp_ms = EARLIEST_TIMESTAMP
        elif spec == "latest":
            timestamp_ms = LATEST_TIMESTAMP
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            timestamp_ms = spec
        else:
            raise ValueError(
                f"list_offsets(): spec must be 'earliest', 'latest' or a timestamp in ms >= 0, "
                f"got {spec!r}"
            )
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        result: dict[TopicPartition, OffsetInfo] = {}
        pending = list(dict.fromkeys(wanted))
        while True:
            problems: dict[TopicPartition, MiniKafkaClientError] = {}
            view = await self._conn.fetch_view(sorted({tp.topic for tp in pending}))
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                info = view.partition(tp.topic, tp.partition)
                if info is None or info.leader < 0 or info.leader not in view.brokers:
                    problems[tp] = from_response(
                        ErrorCode.LEADER_NOT_AVAILABLE
                        if info is not None
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        context=f"list offsets of {tp.topic}-{tp.partition}",
                    )
                    continue
                by_leader.setdefault(info.leader, []).append(tp)
            for leader, tps in sorted(by_leader.items()):
                request = broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(
                            topic=tp.topic,
                            partition=tp.partition,
                            timestamp_ms=timestamp_ms,
                            current_leader_epoch=-1,
                        )
                        for tp in tps
                    ]
                )
                try:
                    reply = await self._conn.broker_stub(view.brokers[leader]).ListOffsets(
                        request, timeout=self._timeout_s
                    )
                except grpc.aio.AioRpcError as exc:
                    for tp in tps:
                        problems[tp] = KafkaConnectionError(
                            f"list offsets of {tp.topic}-{tp.partition}: leader {leader} "
                            f"{exc.code().name} {exc.details()}"
                        )
                    continue
                for part in reply.partitions:
                    tp = TopicPartition(part.topic, part.partition)
                    if part.error_code != ErrorCode.NONE:
                        problems[tp] = from_response(
                            part.error_code,
                            part.error_message,
                            context=f"list offsets of {tp.topic}-{tp.partition}",
                        )
                        continue
                    result[tp] = OffsetInfo(
                        offset=part.offset,
                        timestamp_ms=part.timestamp_ms,
                        leader_epoch=part.leader_epoch,
                        log_start_offset=part.log_start_offset,
                        high_watermark=part.high_watermark,
                        log_end_offset=part.log_end_offset,
                    )
            pending = [tp for tp in pending if tp not in result]
            if not pending:
                return {tp: result[tp] for tp in wanted}
            fatal = [p for p in problems.values() if not p.retriable]
            if fatal:
                raise fatal[0]
            if time.monotonic() >= deadline:
                first = problems.get(pending[0])
                if first is not None:
                    raise first
                raise NoBrokersAvailable(f"list offsets: no answer for {pending[0]}")
            await asyncio.sleep(self.retry_backoff_ms / 1000)


def _group_id(group_id: object) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise ValueError(f"a group id must be a non-empty str, got {group_id!r}")
    return group_id


def _election_partitions(partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
    if partitions is None:
        return []
    return _topic_partitions(partitions, "elect_leaders()")


def _topic_partitions(partitions: Iterable[TopicPartition], what: str) -> list[TopicPartition]:
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


def _raise_topic_errors(results: Iterable[controller_pb2.TopicResult], what: str) -> None:
    for result in results:
        if result.error_code != ErrorCode.NONE:
            raise from_response(
                result.error_code, result.error_message, context=f"{what} {result.name!r}"
            )


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
    "Admin",
    "AsyncAdmin",
    "BrokerDescription",
    "ClusterDescription",
    "ElectionResult",
    "NewPartitions",
    "NewTopic",
    "OffsetInfo",
    "OffsetSpec",
    "PartitionDescription",
    "PartitionHistory",
    "PartitionHistoryEvent",
    "TopicDescription",
]
