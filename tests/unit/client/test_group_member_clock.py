"""A group member's timers (auto-commit, poll timeout) read the client's clock
(`ClientPorts.clock_s`, which the consumer sets to its `clock`), not the process's
monotonic clock, so a test or the simulator drives them on its own time."""

from __future__ import annotations

from client.group import GroupMember, GroupSettings
from client.records import TopicPartition
from client.subscription import SubscriptionState
from client.transport import BrokerConnections, ClientPorts

TP = TopicPartition("t", 0)
AUTO_COMMIT_INTERVAL_MS = 5_000
MAX_POLL_INTERVAL_MS = 300_000


def member_on(now_s: list[float]) -> tuple[GroupMember, list[set[TopicPartition]]]:
    conn = BrokerConnections("127.0.0.1:1", ports=ClientPorts(clock_s=lambda: now_s[0]))
    settings = GroupSettings(
        group_id="g",
        group_instance_id=None,
        session_timeout_ms=45_000,
        heartbeat_interval_ms=3_000,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        enable_auto_commit=True,
        auto_commit_interval_ms=AUTO_COMMIT_INTERVAL_MS,
        client_id="c",
    )
    member = GroupMember(
        settings,
        conn=conn,
        subscription=SubscriptionState([TP.topic], None),
        wake_fetcher=lambda: None,
    )
    member.identity.update(3, True)
    member.owned = {TP}
    commits: list[set[TopicPartition]] = []

    async def commit_quietly(partitions: set[TopicPartition]) -> None:
        commits.append(set(partitions))

    member.offsets.commit_quietly = commit_quietly  # type: ignore[method-assign,assignment]
    return member, commits


async def test_auto_commit_is_due_on_the_client_clock() -> None:
    now_s = [1_000.0]
    member, commits = member_on(now_s)
    await member.on_poll()
    assert commits == []
    now_s[0] += AUTO_COMMIT_INTERVAL_MS / 1000 - 0.001
    await member.on_poll()
    assert commits == []
    now_s[0] += 0.001
    await member.on_poll()
    assert commits == [{TP}]
    await member.on_poll()
    assert commits == [{TP}]  # the next one is an interval later


async def test_the_poll_timeout_is_measured_on_the_client_clock() -> None:
    now_s = [1_000.0]
    member, _commits = member_on(now_s)
    await member.on_poll()
    now_s[0] += MAX_POLL_INTERVAL_MS / 1000
    assert not member._poll_timed_out()
    now_s[0] += 0.001
    assert member._poll_timed_out()
