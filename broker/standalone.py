"""Standalone mode: a single broker that is its own controller.

`minikafka broker --standalone` keeps topic definitions and the producer-id counter in
`DATA/standalone-metadata.json` (written atomically) and leads every partition itself at
leader epoch 0 with replication factor 1. It answers the admin RPCs that a cluster
forwards to the controller, so clients and the CLI work the same against both.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path

import msgspec

from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.replica.manager import ReplicaManager
from broker.replica.transitions import LeaderAndIsrPartition
from minikafka.errors import ErrorCode
from minikafka.topic_config import (
    InvalidTopicConfigError,
    colliding_topic,
    validate_topic_configs,
)
from minikafka.v1 import common_pb2, controller_pb2

logger = logging.getLogger(__name__)

METADATA_FILE = "standalone-metadata.json"
TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000


class StandaloneTopic(msgspec.Struct, kw_only=True):
    partitions: int
    configs: dict[str, str] = msgspec.field(default_factory=dict)


class StandaloneState(msgspec.Struct, kw_only=True):
    cluster_id: str
    next_producer_id: int = 0
    topics: dict[str, StandaloneTopic] = msgspec.field(default_factory=dict)


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic name rules; returns the problem or None."""
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if not TOPIC_NAME_RE.match(name):
        return (
            f"topic name {name!r} is invalid: use 1-249 characters from "
            "ASCII letters, digits, '.', '_' and '-'"
        )
    return None


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class StandaloneController:
    """Topic store and admin handler of a standalone broker."""

    def __init__(
        self,
        *,
        data_dir: Path,
        broker_id: int,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        now_ms: int,
    ) -> None:
        self._path = data_dir / METADATA_FILE
        self._broker_id = broker_id
        self._replicas = replicas
        self._metadata = metadata
        if self._path.exists():
            self._state = msgspec.json.decode(self._path.read_bytes(), type=StandaloneState)
        else:
            self._state = StandaloneState(cluster_id=uuid.uuid4().hex)
            self._persist()
        metadata.cluster_id = self._state.cluster_id
        metadata.controller_id = broker_id
        for name, topic in self._state.topics.items():
            self._open_topic(name, topic, now_ms=now_ms)

    def _persist(self) -> None:
        write_atomically(self._path, msgspec.json.encode(self._state))

    def topic_configs(self, topic: str) -> dict[str, str]:
        found = self._state.topics.get(topic)
        return dict(found.configs) if found is not None else {}

    def _open_topic(self, name: str, topic: StandaloneTopic, *, now_ms: int) -> None:
        self._metadata.topic_configs[name] = dict(topic.configs)
        for index in range(topic.partitions):
            code = self._replicas.apply_leader_and_isr(
                LeaderAndIsrPartition(
                    topic=name,
                    partition=index,
                    leader=self._broker_id,
                    leader_epoch=0,
                    partition_epoch=0,
                    isr=frozenset({self._broker_id}),
                    replicas=(self._broker_id,),
                )
            )
            if code not in (ErrorCode.NONE,):
                raise RuntimeError(f"cannot lead {name}-{index}: {code.name}")
            self._metadata.update_partition(
                PartitionInfo(
                    topic=name,
                    partition=index,
                    leader=self._broker_id,
                    leader_epoch=0,
                    replicas=(self._broker_id,),
                    isr=(self._broker_id,),
                    partition_epoch=0,
                )
            )

    # ---- admin RPCs --------------------------------------------------------------

    def create_topics(
        self, request: controller_pb2.CreateTopicsRequest, *, now_ms: int
    ) -> controller_pb2.CreateTopicsResponse:
        response = controller_pb2.CreateTopicsResponse()
        for topic in request.topics:
            code, message = self._check_new_topic(topic)
            if code is ErrorCode.NONE and not request.validate_only:
                created = StandaloneTopic(
                    partitions=topic.num_partitions, configs=dict(topic.configs)
                )
                self._state.topics[topic.name] = created
                self._persist()
                self._open_topic(topic.name, created, now_ms=now_ms)
                logger.info("created topic %s with %s partitions", topic.name, created.partitions)
            response.topics.add(name=topic.name, error_code=int(code), error_message=message)
        return response

    def _check_new_topic(self, topic: controller_pb2.CreatableTopic) -> tuple[ErrorCode, str]:
        problem = validate_topic_name(topic.name)
        if problem is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, problem
        if topic.name in self._state.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"
        collision = colliding_topic(topic.name, self._state.topics)
        if collision is not None:
            return (
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"topic {topic.name!r} collides with existing topic {collision!r} "
                "('.' and '_' are the same character in metric names)",
            )
        if not 1 <= topic.num_partitions <= MAX_PARTITIONS:
            return (
                ErrorCode.INVALID_PARTITIONS,
                f"number of partitions must be between 1 and {MAX_PARTITIONS}, "
                f"got {topic.num_partitions}",
            )
        if topic.replication_factor != 1:
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {topic.replication_factor} is larger than the 1 "
                "available broker (standalone mode)"
                if topic.replication_factor > 1
                else f"replication factor must be at least 1, got {topic.replication_factor}",
            )
        try:
            validate_topic_configs(dict(topic.configs), replication_factor=1)
        except InvalidTopicConfigError as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        return ErrorCode.NONE, ""

    def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse:
        response = controller_pb2.DeleteTopicsResponse()
        for name in request.names:
            topic = self._state.topics.pop(name, None)
            if topic is None:
                response.topics.add(
                    name=name,
                    error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    error_message=f"topic {name!r} does not exist",
                )
                continue
            self._persist()
            for index in range(topic.partitions):
                self._replicas.remove_partition(name, index, delete=True)
            self._metadata.remove_topic(name)
            logger.info("deleted topic %s", name)
            response.topics.add(name=name, error_code=int(ErrorCode.NONE))
        return response

    def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse:
        topic = self._state.topics.get(request.topic)
        if topic is None:
            return controller_pb2.AlterConfigsResponse(
                error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                error_message=f"topic {request.topic!r} does not exist",
            )
        merged = dict(topic.configs)
        merged.update(request.set)
        for key in request.delete:
            merged.pop(key, None)
        try:
            validate_topic_configs(merged, replication_factor=1)
        except InvalidTopicConfigError as exc:
            return controller_pb2.AlterConfigsResponse(
                error_code=int(ErrorCode.INVALID_CONFIG), error_message=str(exc)
            )
        if not request.validate_only:
            topic.configs = merged
            self._persist()
            self._metadata.topic_configs[request.topic] = dict(merged)
            self._replicas.refresh_settings(request.topic)
        return controller_pb2.AlterConfigsResponse(error_code=int(ErrorCode.NONE))

    def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        response = controller_pb2.ElectLeadersResponse()
        targets = [(tp.topic, tp.partition) for tp in request.partitions] or sorted(
            self._metadata.partitions
        )
        for topic, partition in targets:
            if (topic, partition) not in self._metadata.partitions:
                response.results.add(
                    topic=topic,
                    partition=partition,
                    error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    error_message=f"unknown partition {topic}-{partition}",
                    leader=-1,
                )
                continue
            response.results.add(
                topic=topic,
                partition=partition,
                error_code=int(ErrorCode.ELECTION_NOT_NEEDED),
                error_message="standalone broker already leads every partition",
                leader=self._broker_id,
            )
        return response

    def init_producer_id(
        self, request: controller_pb2.InitProducerIdRequest
    ) -> controller_pb2.InitProducerIdResponse:
        if request.producer_id >= 0:
            if request.producer_id >= self._state.next_producer_id:
                return controller_pb2.InitProducerIdResponse(
                    error_code=int(ErrorCode.UNKNOWN_PRODUCER_ID), producer_id=-1
                )
            return controller_pb2.InitProducerIdResponse(
                error_code=int(ErrorCode.NONE),
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch + 1,
            )
        producer_id = self._state.next_producer_id
        self._state.next_producer_id += 1
        self._persist()
        return controller_pb2.InitProducerIdResponse(
            error_code=int(ErrorCode.NONE), producer_id=producer_id, producer_epoch=0
        )

    def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest, endpoint: common_pb2.BrokerEndpoint
    ) -> controller_pb2.DescribeClusterResponse:
        response = controller_pb2.DescribeClusterResponse(
            error_code=int(ErrorCode.NONE),
            cluster_id=self._state.cluster_id,
            controller_id=self._broker_id,
            controller_epoch=0,
        )
        response.brokers.add(endpoint=endpoint, broker_epoch=0, fenced=False)
        names = list(request.topics) or sorted(self._state.topics)
        for name in names:
            topic = self._state.topics.get(name)
            entry = response.topics.add(name=name)
            if topic is None:
                entry.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            entry.configs.update(topic.configs)
            for info in self._metadata.partitions_of(name):
                entry.partitions.add(
                    partition=info.partition,
                    leader=info.leader,
                    leader_epoch=info.leader_epoch,
                    replicas=info.replicas,
                    isr=info.isr,
                    partition_epoch=info.partition_epoch,
                    state=info.state,
                )
        return response
