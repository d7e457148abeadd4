"""Resolve a topic's effective settings from its configs and the broker defaults."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from broker.config import BrokerConfig
from broker.log.config import LogConfig
from minikafka.topic_config import FLUSH_POLICY, int_config


class TopicSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What one topic's partitions need to know about its configuration."""

    log: LogConfig
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    log_append_time: bool
    fsync: bool


def resolve_topic_settings(defaults: BrokerConfig, configs: Mapping[str, str]) -> TopicSettings:
    """Apply per-topic `configs` (already validated) over the broker's defaults."""

    def number(key: str, default: int | None = None) -> int:
        """The topic's value, else the broker default given, else the table's default."""
        return int_config(configs, key, default=default)

    fsync = configs.get(FLUSH_POLICY, "none") == "fsync"
    log = LogConfig(
        segment_bytes=number("segment.bytes", defaults.log_segment_bytes),
        segment_ms=number("segment.ms"),
        retention_ms=number("retention.ms", defaults.log_retention_ms),
        retention_bytes=number("retention.bytes", defaults.log_retention_bytes),
        max_message_bytes=number("max.message.bytes", defaults.message_max_bytes),
        flush_messages=number("flush.messages"),
        flush_ms=number("flush.ms"),
        fsync_on_append=fsync,
        timestamp_before_max_ms=number("message.timestamp.before.max.ms"),
        timestamp_after_max_ms=number("message.timestamp.after.max.ms"),
    )
    return TopicSettings(
        log=log,
        min_insync_replicas=number("min.insync.replicas", defaults.min_insync_replicas),
        unclean_leader_election_enable=configs.get("unclean.leader.election.enable") == "true",
        log_append_time=configs.get("message.timestamp.type") == "LogAppendTime",
        fsync=fsync,
    )
