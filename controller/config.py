"""Configuration of the controller process: one frozen Struct passed down explicitly."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

from minikafka.limits import (
    MAX_PARTITIONS_PER_BROKER_DEFAULT,
    MAX_PARTITIONS_PER_CLUSTER_DEFAULT,
    MAX_PARTITIONS_PER_TOPIC_DEFAULT,
    MIN_SEGMENT_BYTES_DEFAULT,
    MIN_SEGMENT_MS_DEFAULT,
    TopicLimits,
)

PositiveMs = Annotated[int, msgspec.Meta(ge=1)]


class ControllerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the controller needs; built by the CLI (flags, TOML, environment).

    Constraints are checked by `msgspec.convert(raw, ControllerConfig)` and by `validate()`.
    """

    node_id: Annotated[int, msgspec.Meta(ge=0)] = 0
    listen: str = "127.0.0.1:9093"  # HOST:PORT for the gRPC ControllerService + RaftService
    data_dir: str
    metrics_listen: str | None = None  # HOST:PORT for Prometheus /metrics (None = off)
    #: TLS (PEM files, all three or none): mutual TLS on `listen` and on every channel
    #: this controller opens, to brokers and to the other voters (minikafka.tls).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    #: Kafka's ssl.principal.mapping.rules: certificate subject -> `User:NAME`.
    ssl_principal_mapping_rules: str = "DEFAULT"
    #: Enforce ACLs (minikafka.acl, minikafka.authorization): default deny.
    authorizer: bool = False
    #: Kafka's super.users, `User:a;User:b`: allowed everything (brokers, controllers).
    super_users: str = ""
    #: The cluster id a new data directory is formatted with. A quorum of one generates
    #: one when None; a larger quorum needs it (the same on every controller) to format.
    cluster_id: str | None = None
    #: The voters `ID@HOST:PORT,...` (Kafka's controller.quorum.voters); each address is
    #: where the other controllers reach that voter. None: a quorum of one (this node at
    #: `listen`).
    quorum: str | None = None
    #: Raft timing (Kafka: controller.quorum.election.timeout.ms / fetch.timeout.ms). A
    #: standby that heard nothing from the leader for the fetch timeout stands for election.
    quorum_election_timeout_ms: PositiveMs = 300
    quorum_fetch_timeout_ms: PositiveMs = 500
    session_timeout_ms: PositiveMs = 1500
    heartbeat_interval_ms: PositiveMs = 250
    default_replication_factor: Annotated[int, msgspec.Meta(ge=1)] = 1
    num_partitions: Annotated[int, msgspec.Meta(ge=1)] = 1  # used when a request asks for -1
    min_insync_replicas: Annotated[int, msgspec.Meta(ge=1)] = 1  # default for topics without it
    unclean_leader_election_enable: bool = False  # default for topics without the config
    #: KIP-966 eligible leader replicas (off: "last replica standing", Kafka before 4.0).
    eligible_leader_replicas: bool = True
    #: How an unclean election chooses: "longest-log" (survey the alive replicas' logs,
    #: take the longest by last epoch and end offset) or "first-alive" (Kafka's).
    unclean_recovery_strategy: Literal["longest-log", "first-alive"] = "longest-log"
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: PositiveMs = 30_000
    leader_imbalance_per_broker_percentage: Annotated[int, msgspec.Meta(ge=0, le=100)] = 10
    snapshot_every_records: Annotated[int, msgspec.Meta(ge=1)] = 1000
    # Propagation to brokers: per-call deadline and capped exponential retry back-off.
    broker_request_timeout_ms: PositiveMs = 5000
    broker_retry_backoff_ms: PositiveMs = 50
    broker_retry_backoff_max_ms: PositiveMs = 1000
    grpc_max_message_bytes: PositiveMs = 64 * 1024 * 1024
    # Limits checked where CreateTopics / AlterConfigs enter (minikafka.limits, README "Limits").
    max_partitions_per_topic: PositiveMs = MAX_PARTITIONS_PER_TOPIC_DEFAULT
    max_partitions_per_cluster: PositiveMs = MAX_PARTITIONS_PER_CLUSTER_DEFAULT
    max_partitions_per_broker: PositiveMs = MAX_PARTITIONS_PER_BROKER_DEFAULT
    min_segment_bytes: PositiveMs = MIN_SEGMENT_BYTES_DEFAULT
    min_segment_ms: PositiveMs = MIN_SEGMENT_MS_DEFAULT
    #: DELIBERATELY UNSAFE, for the replication simulator's hole-1 canary only (no option;
    #: never set in production): AlterPartition adds any unfenced replica, whatever broker
    #: epoch (if any) the leader saw it fetch with, as before KIP-903's fix.
    unsafe_test_isr_without_broker_epoch: bool = False
    #: DELIBERATELY UNSAFE, for the simulator's known-bug canaries only (tests/sim): hole
    #: 5 of the replication-safety issue reverted. A broker that comes back with a new
    #: data directory (wiped or replaced: a new `meta.properties` directory id) counts as
    #: a clean shutdown, as an empty directory did before the fix, instead of having lost
    #: every replica it held. Never set outside tests; not on the command line.
    unsafe_test_wiped_directory_is_clean: bool = False

    def topic_limits(self) -> TopicLimits:
        return TopicLimits(
            max_partitions_per_topic=self.max_partitions_per_topic,
            max_partitions_per_cluster=self.max_partitions_per_cluster,
            max_partitions_per_broker=self.max_partitions_per_broker,
            min_segment_bytes=self.min_segment_bytes,
            min_segment_ms=self.min_segment_ms,
        )

    def voters(self) -> dict[int, str]:
        """Voter id -> the address its peers dial (`quorum`, or this node alone)."""
        if self.quorum is None:
            return {self.node_id: self.listen}
        return parse_quorum(self.quorum)

    def validate(self) -> None:
        """Raise ValueError on a combination the field constraints cannot express."""
        voters = self.voters()
        if self.node_id not in voters:
            raise ValueError(
                f"--id {self.node_id} is not one of the voters in --quorum "
                f"({', '.join(map(str, sorted(voters)))})"
            )
        if self.cluster_id is not None and not _CLUSTER_ID.match(self.cluster_id):
            raise ValueError(
                f"cluster id {self.cluster_id!r} must be 1-64 letters, digits, '-' or '_'"
            )
        if self.quorum_fetch_timeout_ms <= 200:
            raise ValueError("quorum_fetch_timeout_ms must exceed 200 (the fetch long-poll)")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be smaller than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.broker_retry_backoff_ms > self.broker_retry_backoff_max_ms:
            raise ValueError("broker_retry_backoff_ms must not exceed broker_retry_backoff_max_ms")
        for name in ("listen", "metrics_listen"):
            value = getattr(self, name)
            if value is not None:
                split_host_port(value)


_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def parse_quorum(text: str) -> dict[int, str]:
    """Parse `ID@HOST:PORT[,ID@HOST:PORT...]` (distinct ids and addresses, ports > 0)."""
    voters: dict[int, str] = {}
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        id_text, at, address = part.partition("@")
        if not at or not id_text.strip().isdigit():
            raise ValueError(f"quorum voter {part!r} is not ID@HOST:PORT")
        node_id = int(id_text)
        _, port = split_host_port(address.strip())
        if port == 0:
            raise ValueError(f"quorum voter {part!r}: port 0 is not a port")
        if node_id in voters:
            raise ValueError(f"quorum voter id {node_id} appears twice")
        if address.strip() in voters.values():
            raise ValueError(f"quorum address {address.strip()} appears twice")
        voters[node_id] = address.strip()
    if not voters:
        raise ValueError("the quorum is empty: give ID@HOST:PORT,...")
    return voters


def split_host_port(address: str) -> tuple[str, int]:
    """Parse "HOST:PORT" (IPv6 hosts in brackets); raise ValueError with the address."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} of {address!r} is out of range")
    return host.strip("[]"), port
