"""Standalone mode: the metadata store of a single broker that is its own controller.

`minikafka broker --standalone` keeps topic definitions and the producer-id counter in
`DATA/standalone-metadata.json` (written atomically) and leads every partition itself at
leader epoch 0 with replication factor 1. The admin RPCs that a cluster forwards to the
controller are answered by an `AdminBackend` the process is composed with: the command
line builds it from the controller's own pure state machine
(`minikafka_cli.standalone_admin`), so a standalone broker and a cluster take the same
decisions by the same code (the broker never imports the controller). This module only
persists the outcome (`apply`) and opens, grows, reconfigures and removes the local
partitions accordingly; `describe_cluster` answers from what is actually open.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Protocol

import msgspec

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.metadata_cache import MetadataCache, PartitionInfo
from broker.replica.manager import ReplicaManager
from broker.replica.transitions import LeaderAndIsrPartition
from broker.server.broker_servicer import AdminBackend
from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2

logger = logging.getLogger(__name__)

METADATA_FILE = "standalone-metadata.json"


class StandaloneTopic(msgspec.Struct, kw_only=True):
    partitions: int
    configs: dict[str, str] = msgspec.field(default_factory=dict)


class StandaloneState(msgspec.Struct, kw_only=True):
    cluster_id: str
    next_producer_id: int = 0
    topics: dict[str, StandaloneTopic] = msgspec.field(default_factory=dict)


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


class StandaloneAdminFactory(Protocol):
    """Builds the admin backend of a standalone broker over its store (the composition
    root, `minikafka_cli`, passes one; see the module docstring)."""

    def __call__(
        self,
        *,
        store: StandaloneStore,
        config: BrokerConfig,
        endpoint: common_pb2.BrokerEndpoint,
        clock: Clock,
    ) -> AdminBackend: ...


class StandaloneStore:
    """Topic store of a standalone broker: persists and applies metadata decisions."""

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

    @property
    def broker_id(self) -> int:
        return self._broker_id

    def topic_configs(self, topic: str) -> dict[str, str]:
        found = self._state.topics.get(topic)
        return dict(found.configs) if found is not None else {}

    def _open_topic(
        self, name: str, topic: StandaloneTopic, *, now_ms: int, first: int = 0
    ) -> None:
        self._metadata.topic_configs[name] = dict(topic.configs)
        for index in range(first, topic.partitions):
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
            online = code is ErrorCode.NONE
            if not online:
                # Never crash-loop on one bad partition: serve the others, report this
                # one without a leader (clients get LEADER_NOT_AVAILABLE).
                logger.error(
                    "partition %s-%s is offline (%s); serving the other partitions",
                    name,
                    index,
                    code.name,
                )
            self._metadata.update_partition(
                PartitionInfo(
                    topic=name,
                    partition=index,
                    leader=self._broker_id if online else -1,
                    leader_epoch=0,
                    replicas=(self._broker_id,),
                    isr=(self._broker_id,),
                    partition_epoch=0,
                    state="ONLINE" if online else "OFFLINE",
                )
            )

    # ---- applying decisions ---------------------------------------------------------

    @property
    def state(self) -> StandaloneState:
        """The persisted topics and producer-id counter (a copy: change it with `apply`)."""
        return msgspec.structs.replace(
            self._state,
            topics={
                name: StandaloneTopic(partitions=topic.partitions, configs=dict(topic.configs))
                for name, topic in self._state.topics.items()
            },
        )

    def apply(self, new: StandaloneState, *, now_ms: int) -> None:
        """Make `new` the broker's metadata: persist it (atomically, first), then open the
        partitions of new topics and the partitions added to existing ones, remove the
        partitions of deleted topics (with their data) and apply changed configs.

        The decisions (validation, limits, defaults, producer ids) are taken before, by
        the admin backend the process was composed with (`minikafka_cli.standalone_admin`
        runs the controller's state machine); this store only persists and applies."""
        old = self._state
        self._state = msgspec.structs.replace(new, cluster_id=old.cluster_id)
        self._persist()
        for name, topic in old.topics.items():
            if name in new.topics:
                continue
            for index in range(topic.partitions):
                self._replicas.remove_partition(name, index, delete=True)
            self._metadata.remove_topic(name)
            logger.info("deleted topic %s", name)
        for name, topic in new.topics.items():
            before = old.topics.get(name)
            if before is None:
                self._open_topic(name, topic, now_ms=now_ms)
                logger.info("created topic %s with %s partitions", name, topic.partitions)
                continue
            if topic.partitions > before.partitions:
                self._open_topic(name, topic, now_ms=now_ms, first=before.partitions)
                logger.info(
                    "topic %s: partitions %s -> %s", name, before.partitions, topic.partitions
                )
            if topic.configs != before.configs:
                self._metadata.topic_configs[name] = dict(topic.configs)
                self._replicas.refresh_settings(name)

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
