"""MetadataCache: this broker's view of the cluster (brokers, partitions, topic configs).

Caller: the control servicer (UpdateMetadata / LeaderAndIsr from the controller) or the
standalone topic store. Read by the Metadata RPC and by the replica manager.
"""

from __future__ import annotations

import msgspec

from minikafka.acl import AclBinding


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True):
    broker_id: int
    host: str
    port: int
    rack: str = ""
    external_host: str = ""
    external_port: int = 0
    broker_epoch: int = 0
    in_controlled_shutdown: bool = False

    def address(self, *, external: bool) -> tuple[str, int]:
        """The address to hand out: the external one to external clients, when configured."""
        if external and self.external_host:
            return self.external_host, self.external_port
        return self.host, self.port


class PartitionInfo(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int
    state: str = "ONLINE"
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966)
    last_known_elr: tuple[int, ...] = ()


class MetadataCache:
    """Latest cluster metadata; replaced wholesale by each full update."""

    def __init__(self, *, cluster_id: str = "") -> None:
        self.cluster_id = cluster_id
        self.controller_id = -1
        self.controller_epoch = -1
        self.metadata_offset = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.partitions: dict[tuple[str, int], PartitionInfo] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        #: The controller's metadata offset of each topic's configs as applied: a request
        #: carrying older configs (a delayed LeaderAndIsr) never replaces them.
        self.topic_config_offsets: dict[str, int] = {}
        #: Every ACL of the cluster (the controller's set as of `metadata_offset`).
        self.acls: frozenset[AclBinding] = frozenset()

    def isr_eligible_epochs(self) -> dict[int, int]:
        """Brokers a leader may add to an ISR, with the broker epoch each must fetch with:
        live (unfenced) and not in controlled shutdown (KIP-841), registered (KIP-903)."""
        return {
            b.broker_id: b.broker_epoch
            for b in self.brokers.values()
            if b.broker_epoch > 0 and not b.in_controlled_shutdown
        }

    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self.partitions})

    def partitions_of(self, topic: str) -> list[PartitionInfo]:
        found = [info for (name, _), info in self.partitions.items() if name == topic]
        return sorted(found, key=lambda info: info.partition)

    def update_partition(self, info: PartitionInfo) -> None:
        """Record a partition state unless the cache already holds a newer one."""
        key = (info.topic, info.partition)
        current = self.partitions.get(key)
        if current is not None and (current.leader_epoch, current.partition_epoch) > (
            info.leader_epoch,
            info.partition_epoch,
        ):
            return
        self.partitions[key] = info

    def remove_topic(self, topic: str) -> None:
        for key in [key for key in self.partitions if key[0] == topic]:
            del self.partitions[key]
        self.topic_configs.pop(topic, None)
