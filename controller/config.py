"""Configuration of the controller process: one frozen Struct passed down explicitly."""

from __future__ import annotations

from typing import Annotated

import msgspec

PositiveMs = Annotated[int, msgspec.Meta(ge=1)]


class ControllerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the controller needs; built by the CLI (flags, TOML, environment).

    Constraints are checked by `msgspec.convert(raw, ControllerConfig)` and by `validate()`.
    """

    node_id: Annotated[int, msgspec.Meta(ge=0)] = 0
    listen: str = "127.0.0.1:9093"  # HOST:PORT for the gRPC ControllerService
    data_dir: str
    metrics_listen: str | None = None  # HOST:PORT for Prometheus /metrics (None = off)
    cluster_id: str | None = None  # generated and journaled on first start when None
    session_timeout_ms: PositiveMs = 1500
    heartbeat_interval_ms: PositiveMs = 250
    default_replication_factor: Annotated[int, msgspec.Meta(ge=1)] = 1
    num_partitions: Annotated[int, msgspec.Meta(ge=1)] = 1  # used when a request asks for -1
    min_insync_replicas: Annotated[int, msgspec.Meta(ge=1)] = 1  # default for topics without it
    unclean_leader_election_enable: bool = False  # default for topics without the config
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: PositiveMs = 30_000
    leader_imbalance_per_broker_percentage: Annotated[int, msgspec.Meta(ge=0, le=100)] = 10
    snapshot_every_records: Annotated[int, msgspec.Meta(ge=1)] = 1000
    # Propagation to brokers: per-call deadline and capped exponential retry back-off.
    broker_request_timeout_ms: PositiveMs = 5000
    broker_retry_backoff_ms: PositiveMs = 50
    broker_retry_backoff_max_ms: PositiveMs = 1000
    grpc_max_message_bytes: PositiveMs = 64 * 1024 * 1024

    def validate(self) -> None:
        """Raise ValueError on a combination the field constraints cannot express."""
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


def split_host_port(address: str) -> tuple[str, int]:
    """Parse "HOST:PORT" (IPv6 hosts in brackets); raise ValueError with the address."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} of {address!r} is out of range")
    return host.strip("[]"), port
