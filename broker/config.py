"""BrokerConfig: every setting of one broker process, validated once at start."""

from __future__ import annotations

from typing import Annotated

import msgspec

PositiveMs = Annotated[int, msgspec.Meta(ge=1)]


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
    # Topic defaults (per-topic configs override these)
    num_partitions: PositiveMs = 1
    min_insync_replicas: PositiveMs = 1
    log_segment_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 64 * 1024 * 1024
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: PositiveMs = 30_000
    log_flush_interval_ms: PositiveMs = 1_000
    checkpoint_interval_ms: PositiveMs = 5_000
    # Liveness against the controller (the controller's values win once registered)
    heartbeat_interval_ms: PositiveMs = 250
    use_uvloop: bool = True
    #: DELIBERATELY UNSAFE, for the fault suite's self-test only: the leader's HW follows
    #: its own LEO (acks=all then acknowledges before followers have the data).
    unsafe_test_hw_is_leo: bool = False
