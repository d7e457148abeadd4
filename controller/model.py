"""The controller's metadata model: immutable registrations and the whole cluster state.

Every value here is a frozen Struct; `state_machine.replay` derives a new `ClusterState`
from the old one and a journal record, and nothing else ever builds one.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from minikafka.acl import AclBinding

NO_LEADER: Final = -1

PartitionKey = tuple[str, int]


class PartitionStatus(enum.Enum):
    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"  # no leader
    RECOVERING = "RECOVERING"  # after an unclean election, until |ISR| >= min.insync.replicas


class BrokerRegistration(msgspec.Struct, frozen=True, kw_only=True):
    """A broker as the controller knows it.

    Lifecycle: registered (fenced) -> unfenced once caught up on metadata -> in controlled
    shutdown -> fenced. Liveness (heartbeat deadlines) is not journaled: see `liveness`.
    """

    broker_id: int
    host: str
    port: int
    rack: str = ""
    external_host: str = ""
    external_port: int = 0
    incarnation_id: str
    broker_epoch: int
    fenced: bool = True
    in_controlled_shutdown: bool = False
    #: The identity of the broker's data directory (written when it was formatted); a
    #: broker that comes back with another one has lost every replica it held.
    directory_id: str = ""


class PartitionRegistration(msgspec.Struct, frozen=True, kw_only=True):
    """Replicas (assignment order, first = preferred), leader, ISR and their epochs.

    `leader_epoch` changes only with the leader; `partition_epoch` on every change.
    `elr` (eligible leader replicas, KIP-966): replicas that left the ISR while it was
    below min.insync.replicas (the high watermark was frozen, so they hold every committed
    record); electable when no ISR member is. `last_known_elr`: replicas that were in the
    ISR or ELR when it was last below the minimum but are eligible no more (an unclean
    restart): what an operator looks at before an unclean election. Both are cleared when
    the ISR is back at min.insync.replicas.
    """

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...]
    partition_epoch: int = 0
    recovering: bool = False  # set by an unclean election, cleared when the ISR is healthy
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def status(self) -> PartitionStatus:
        if self.leader == NO_LEADER:
            return PartitionStatus.OFFLINE
        if self.recovering:
            return PartitionStatus.RECOVERING
        return PartitionStatus.ONLINE


class TopicRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A topic: name, partition count and its explicitly set configs (validated strings)."""

    name: str
    num_partitions: int
    configs: dict[str, str] = msgspec.field(default_factory=dict)


class ClusterState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the journal holds, as of `metadata_offset` (the last applied record)."""

    cluster_id: str = ""
    controller_id: int = 0
    controller_epoch: int = 0
    metadata_offset: int = 0
    last_broker_epoch: int = 0  # broker epochs are issued from here, never reused
    next_producer_id: int = 0
    brokers: dict[int, BrokerRegistration] = msgspec.field(default_factory=dict)
    # Offset of the last record that changed each broker (an unfence needs the broker to
    # have applied metadata at least this new).
    broker_offsets: dict[int, int] = msgspec.field(default_factory=dict)
    topics: dict[str, TopicRecord] = msgspec.field(default_factory=dict)
    partitions: dict[PartitionKey, PartitionRegistration] = msgspec.field(default_factory=dict)
    deleted_topics: tuple[str, ...] = ()  # the most recent deletions, newest last (bounded)
    acls: frozenset[AclBinding] = frozenset()  # minikafka.acl; pushed to every broker

    def topic_partitions(self, topic: str) -> list[PartitionKey]:
        record = self.topics.get(topic)
        if record is None:
            return []
        return [(topic, index) for index in range(record.num_partitions)]

    def eligible_brokers(self) -> frozenset[int]:
        """Brokers that may lead or join an ISR: registered, unfenced, not shutting down."""
        return frozenset(
            broker_id
            for broker_id, broker in self.brokers.items()
            if not broker.fenced and not broker.in_controlled_shutdown
        )
