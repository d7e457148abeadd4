"""Journal records: the only way the controller's state changes (see `state_machine.replay`).

Records are full upserts (a `PartitionRecord` carries the whole new registration), so a
snapshot is simply the records that rebuild the current state, and replaying any record
twice is harmless. Encoded with msgspec msgpack as a tagged union.
"""

from __future__ import annotations

import msgspec

from controller.model import BrokerRegistration, PartitionRegistration, TopicRecord
from minikafka.acl import AclBinding


class ClusterIdRecord(msgspec.Struct, frozen=True, kw_only=True, tag="cluster_id"):
    cluster_id: str


class ControllerEpochRecord(msgspec.Struct, frozen=True, kw_only=True, tag="controller_epoch"):
    controller_id: int
    controller_epoch: int


class BrokerRecord(msgspec.Struct, frozen=True, kw_only=True, tag="broker"):
    registration: BrokerRegistration


class TopicUpsertRecord(msgspec.Struct, frozen=True, kw_only=True, tag="topic"):
    topic: TopicRecord


class PartitionRecord(msgspec.Struct, frozen=True, kw_only=True, tag="partition"):
    topic: str
    partition: int
    registration: PartitionRegistration


class RemoveTopicRecord(msgspec.Struct, frozen=True, kw_only=True, tag="remove_topic"):
    name: str


class ProducerIdsRecord(msgspec.Struct, frozen=True, kw_only=True, tag="producer_ids"):
    next_producer_id: int  # every id below this one has been handed out


class AclRecord(msgspec.Struct, frozen=True, kw_only=True, tag="acl"):
    binding: AclBinding


class RemoveAclRecord(msgspec.Struct, frozen=True, kw_only=True, tag="remove_acl"):
    binding: AclBinding


Record = (
    ClusterIdRecord
    | ControllerEpochRecord
    | BrokerRecord
    | TopicUpsertRecord
    | PartitionRecord
    | RemoveTopicRecord
    | ProducerIdsRecord
    | AclRecord
    | RemoveAclRecord
)
