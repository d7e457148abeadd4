"""The consumer's consumer-group arguments, checked: its group settings (`group_id`
and the rest) and the offsets given to `commit()`."""

from __future__ import annotations

from typing import Any

from client.errors import KafkaConfigurationError
from client.group import GroupSettings
from client.records import OffsetAndMetadata, TopicPartition
from client.transport import check_number


def group_settings(
    *,
    group_id: str | None,
    group_instance_id: str | None,
    enable_auto_commit: bool,
    auto_commit_interval_ms: int,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    max_poll_interval_ms: int,
    client_id: str,
) -> GroupSettings | None:
    """The checked group settings, or None without `group_id` (today's behaviour)."""
    if group_id is None:
        if group_instance_id is not None:
            raise KafkaConfigurationError("group_instance_id needs group_id")
        return None
    if not isinstance(group_id, str) or not group_id:
        raise KafkaConfigurationError(f"group_id must be a non-empty str, got {group_id!r}")
    if group_instance_id is not None and (
        not isinstance(group_instance_id, str) or not group_instance_id
    ):
        raise KafkaConfigurationError(
            f"group_instance_id must be a non-empty str, got {group_instance_id!r}"
        )
    if not isinstance(enable_auto_commit, bool):
        raise KafkaConfigurationError(
            f"enable_auto_commit must be a bool, got {enable_auto_commit!r}"
        )
    for name, value in (
        ("auto_commit_interval_ms", auto_commit_interval_ms),
        ("session_timeout_ms", session_timeout_ms),
        ("heartbeat_interval_ms", heartbeat_interval_ms),
        ("max_poll_interval_ms", max_poll_interval_ms),
    ):
        check_number(name, value, minimum=1, integral=True)
    return GroupSettings(
        group_id=group_id,
        group_instance_id=group_instance_id,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        max_poll_interval_ms=max_poll_interval_ms,
        enable_auto_commit=enable_auto_commit,
        auto_commit_interval_ms=auto_commit_interval_ms,
        client_id=client_id,
    )


def commit_offsets(offsets: dict[TopicPartition, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    """`commit()`'s argument checked: each value an offset (int >= 0) or an
    `OffsetAndMetadata`."""
    if not isinstance(offsets, dict):
        raise TypeError(f"offsets must be a dict {{TopicPartition: offset}}, got {offsets!r}")
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        meta = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        if not isinstance(meta.offset, int) or isinstance(meta.offset, bool) or meta.offset < 0:
            raise ValueError(f"the offset to commit for {tp} must be an int >= 0, got {value!r}")
        result[TopicPartition(*tp)] = meta
    return result
