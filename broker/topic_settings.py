"""Resolve a topic's effective settings from its configs and the broker defaults."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from broker.config import BrokerConfig
from broker.log.config import LogConfig


class TopicSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What one topic's partitions need to know about its configuration."""

    log: LogConfig
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    log_append_time: bool
    fsync: bool


def resolve_topic_settings(defaults: BrokerConfig, configs: Mapping[str, str]) -> TopicSettings:
    """Apply per-topic `configs` (already validated) over the broker's defaults."""

    def number(key: str, default: int) -> int:
        value = configs.get(key)
        return default if value is None else int(value)

    fsync = configs.get("flush.policy", "none") == "fsync"
    log = LogConfig(
        segment_bytes=number("segment.bytes", defaults.log_segment_bytes),
        segment_ms=number("segment.ms", 7 * 24 * 3600 * 1000),
        retention_ms=number("retention.ms", defaults.log_retention_ms),
        retention_bytes=number("retention.bytes", defaults.log_retention_bytes),
        max_message_bytes=number("max.message.bytes", defaults.message_max_bytes),
        flush_messages=number("flush.messages", -1),
        flush_ms=number("flush.ms", -1),
        fsync_on_append=fsync,
    )
    return TopicSettings(
        log=log,
        min_insync_replicas=number("min.insync.replicas", defaults.min_insync_replicas),
        unclean_leader_election_enable=configs.get("unclean.leader.election.enable") == "true",
        log_append_time=configs.get("message.timestamp.type") == "LogAppendTime",
        fsync=fsync,
    )
