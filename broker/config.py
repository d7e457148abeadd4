"""BrokerConfig: every setting of one broker process, validated once at start."""

from __future__ import annotations

from typing import Annotated

import msgspec

from broker.log.quarantine import (
    QUARANTINE_MAX_BYTES_DEFAULT,
    QUARANTINE_MAX_COPY_BYTES_DEFAULT,
)
from minikafka.limits import (
    MAX_PARTITIONS_PER_BROKER_DEFAULT,
    MAX_PARTITIONS_PER_CLUSTER_DEFAULT,
    MAX_PARTITIONS_PER_TOPIC_DEFAULT,
    MIN_SEGMENT_BYTES_DEFAULT,
    MIN_SEGMENT_MS_DEFAULT,
    TopicLimits,
)

PositiveMs = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class BrokerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of one broker process (Kafka's names, with units last)."""

    broker_id: Annotated[int, msgspec.Meta(ge=0)]
    listen: str
    data_dir: str
    controller: str | None = None
    advertise: str | None = None
    #: Optional second listener for clients outside the brokers' network (see DESIGN §9).
    external_listen: str | None = None
    external_advertise: str | None = None
    rack: str | None = None
    standalone: bool = False
    metrics_listen: str | None = None
    #: TLS (PEM files, all three or none): mutual TLS on `listen`, TLS on
    #: `external_listen`, and on every channel this broker opens (minikafka.tls).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    #: Kafka's ssl.principal.mapping.rules: certificate subject -> `User:NAME`.
    ssl_principal_mapping_rules: str = "DEFAULT"
    #: Enforce ACLs (minikafka.acl, minikafka.authorization): default deny.
    authorizer: bool = False
    #: Kafka's super.users, `User:a;User:b`: allowed everything (brokers, controllers).
    super_users: str = ""
    # Replication
    replica_lag_time_max_ms: PositiveMs = 10_000
    replica_fetch_wait_max_ms: PositiveMs = 500
    #: Total bytes of one follower fetch response, and each partition's share of it.
    replica_fetch_response_max_bytes: PositiveMs = 10 * 1024 * 1024
    replica_fetch_max_bytes: PositiveMs = 2 * 1024 * 1024
    replica_fetch_backoff_ms: PositiveMs = 100
    # Requests
    request_timeout_ms_max: PositiveMs = 120_000
    fetch_max_bytes: PositiveMs = 64 * 1024 * 1024
    message_max_bytes: PositiveMs = 1024 * 1024 + 1024
    # Consumer groups: the internal topic __consumer_offsets (read when it is created)
    offsets_topic_num_partitions: PositiveMs = 50
    offsets_topic_replication_factor: PositiveMs = 3
    offsets_commit_timeout_ms: PositiveMs = 5_000
    offsets_compaction_min_records: PositiveMs = 10_000
    group_consumer_session_timeout_ms: PositiveMs = 45_000
    group_consumer_heartbeat_interval_ms: PositiveMs = 5_000
    # Topic defaults (per-topic configs override these)
    num_partitions: PositiveMs = 1
    min_insync_replicas: PositiveMs = 1
    log_segment_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 64 * 1024 * 1024
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: PositiveMs = 30_000
    log_flush_interval_ms: PositiveMs = 1_000
    checkpoint_interval_ms: PositiveMs = 5_000
    # Limits (README "Limits"). Topic limits apply to a standalone broker's CreateTopics /
    # AlterConfigs (a cluster's controller has its own); the rest guard this process.
    max_partitions_per_topic: PositiveMs = MAX_PARTITIONS_PER_TOPIC_DEFAULT
    max_partitions_per_cluster: PositiveMs = MAX_PARTITIONS_PER_CLUSTER_DEFAULT
    max_partitions_per_broker: PositiveMs = MAX_PARTITIONS_PER_BROKER_DEFAULT
    min_segment_bytes: PositiveMs = MIN_SEGMENT_BYTES_DEFAULT
    min_segment_ms: PositiveMs = MIN_SEGMENT_MS_DEFAULT
    #: Discarded batches kept in the partitions' quarantines (loss receipts), whole broker;
    #: the oldest are evicted first, a larger discard keeps only its receipt, 0: receipts only.
    quarantine_max_bytes: NonNegative = QUARANTINE_MAX_BYTES_DEFAULT
    #: The most one truncation copies into the quarantine (on the follower's fetch path).
    quarantine_max_copy_bytes: NonNegative = QUARANTINE_MAX_COPY_BYTES_DEFAULT
    #: Segment `.log` files open at once (LRU; the rest are opened on use, closed when idle).
    max_open_segment_files: PositiveMs = 1024
    #: HTTP/2 streams (concurrent requests) one connection may have open.
    max_concurrent_streams: PositiveMs = 256
    #: Fetch response bytes handed to gRPC but not yet sent, broker-wide and per connection;
    #: a fetch beyond them waits (up to its max_wait_ms) and is then answered without records.
    max_outstanding_response_bytes: PositiveMs = 256 * 1024 * 1024
    max_outstanding_response_bytes_per_connection: PositiveMs = 128 * 1024 * 1024
    #: Server keepalive: ping an idle connection, close it if the ping is not answered.
    keepalive_time_ms: NonNegative = 30_000
    keepalive_timeout_ms: PositiveMs = 10_000
    #: Connections are closed at this age (GOAWAY, then the grace for in-flight requests):
    #: the only way to free a response a client never reads (gRPC cannot cancel it alone).
    max_connection_age_ms: NonNegative = 120_000
    max_connection_age_grace_ms: PositiveMs = 30_000
    # Liveness against the controller (the controller's values win once registered)
    heartbeat_interval_ms: PositiveMs = 250
    use_uvloop: bool = True
    #: DELIBERATELY UNSAFE, for the fault suite's self-test only: the leader's HW follows
    #: its own LEO (acks=all then acknowledges before followers have the data).
    unsafe_test_hw_is_leo: bool = False
    #: For the fault suite only: the machine's boot id as this broker sees it (a power
    #: loss the suite simulates is a reboot: a new boot id). None: the real one.
    unsafe_test_boot_id: str | None = None
    #: DELIBERATELY UNSAFE, for the replication simulator's known-bug canaries only (no
    #: option; never set in production): switch off the whole fix of hole 1 of the
    #: replication-safety issue (KIP-903: follower progress without a broker epoch, kept
    #: across ISR changes and restarts, expansion proposed on any follower's fetch; the
    #: controller's side is `ControllerConfig.unsafe_test_isr_without_broker_epoch`) ...
    unsafe_test_isr_without_broker_epoch: bool = False
    #: ... or of hole 4 (a follower applies a fetch answer while it is still a follower,
    #: whatever leader, leader epoch and fetch offset it now has, and its log appends a
    #: batch of an older epoch than its epoch cache's latest, dropping newer entries).
    unsafe_test_apply_stale_fetch_answers: bool = False
    # DELIBERATELY UNSAFE, for the simulator's known-bug canaries only (tests/sim): each
    # switches one fix of the replication-safety issue off, so the tests can prove the
    # simulation finds the hole. Never set outside tests; not on the command line.
    #: Hole 2 reverted: control requests are applied before this broker has registered,
    #: with any broker epoch then (and -1 always), and replica fetches are served before
    #: it has registered.
    unsafe_test_control_before_registration: bool = False
    #: Hole 6 reverted (KIP-207): a new leader answers ListOffsets with its lagging HW
    #: instead of OFFSET_NOT_AVAILABLE.
    unsafe_test_latest_offset_before_epoch_start: bool = False

    def topic_limits(self) -> TopicLimits:
        return TopicLimits(
            max_partitions_per_topic=self.max_partitions_per_topic,
            max_partitions_per_cluster=self.max_partitions_per_cluster,
            max_partitions_per_broker=self.max_partitions_per_broker,
            min_segment_bytes=self.min_segment_bytes,
            min_segment_ms=self.min_segment_ms,
        )
