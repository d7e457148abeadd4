"""Group transitions: refusals (named rows), join/leave/fence/expiry scenarios, static
membership, offset commit and fetch checks. Time is a number passed in."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from broker.group.membership import (
    check_invariants,
    check_offset_commit,
    check_offset_fetch,
    expire,
    heartbeat,
    next_deadline_ms,
    restart_deadlines,
    without_deadlines,
)
from broker.group.model import (
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    TopicPartition,
    group_state,
)
from minikafka.errors import ErrorCode

CONFIG = GroupConfig(
    session_timeout_ms=10_000,
    min_session_timeout_ms=1_000,
    max_session_timeout_ms=60_000,
    heartbeat_interval_ms=1_000,
    max_size=3,
)
COUNTS = {"t": 4}


def parts(text: str) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(item[0], int(item[1:])) for item in text.split())


def beat(
    group: Group,
    member_id: str,
    epoch: int,
    *,
    now_ms: int = 0,
    counts: dict[str, int] | None = None,
    **fields: Any,
) -> tuple[Group, HeartbeatResult]:
    request = HeartbeatRequest(member_id=member_id, member_epoch=epoch, **fields)
    after, result = heartbeat(
        group, request, partition_counts=counts or COUNTS, now_ms=now_ms, config=CONFIG
    )
    assert check_invariants(after) == []
    return after, result


def join(
    group: Group, member_id: str, *, now_ms: int = 0, **fields: Any
) -> tuple[Group, HeartbeatResult]:
    fields.setdefault("subscribed_topics", frozenset({"t"}))
    fields.setdefault("owned", frozenset())
    return beat(group, member_id, 0, now_ms=now_ms, **fields)


def settle(group: Group, *, now_ms: int = 0) -> Group:
    """Every member heartbeats owning what it was last given, until nothing changes."""
    for _ in range(10):
        before = group
        for member in sorted(group.members.values(), key=lambda m: m.member_id):
            group, result = beat(
                group, member.member_id, member.member_epoch, owned=member.assigned, now_ms=now_ms
            )
            assert result.error == 0
        if group == before:
            return group
    raise AssertionError("the group did not settle in 10 rounds")


def one_member() -> Group:
    group, _ = join(Group(group_id="g"), "a")
    return group


def two_members() -> Group:
    group, _ = join(one_member(), "b")
    return settle(group)


def static_member() -> Group:
    group, _ = join(Group(group_id="g"), "a", instance_id="host-1")
    return group


def full_group() -> Group:
    group = two_members()
    group, _ = join(group, "c")
    return group


# (group, request fields) -> error code; a refusal leaves the group as it was.
REFUSALS = [
    (
        "empty member id",
        one_member,
        {"member_id": "", "member_epoch": 1},
        ErrorCode.INVALID_REQUEST,
    ),
    (
        "epoch below -2",
        one_member,
        {"member_id": "a", "member_epoch": -3},
        ErrorCode.INVALID_REQUEST,
    ),
    (
        "join without subscription",
        one_member,
        {"member_id": "x", "member_epoch": 0},
        ErrorCode.INVALID_REQUEST,
    ),
    (
        "static leave without instance id",
        one_member,
        {"member_id": "a", "member_epoch": -2},
        ErrorCode.INVALID_REQUEST,
    ),
    (
        "unknown assignor",
        one_member,
        {
            "member_id": "x",
            "member_epoch": 0,
            "subscribed_topics": frozenset({"t"}),
            "server_assignor": "sticky",
        },
        ErrorCode.UNSUPPORTED_ASSIGNOR,
    ),
    (
        "session timeout below the minimum",
        one_member,
        {
            "member_id": "x",
            "member_epoch": 0,
            "subscribed_topics": frozenset({"t"}),
            "session_timeout_ms": 10,
        },
        ErrorCode.INVALID_SESSION_TIMEOUT,
    ),
    (
        "zero rebalance timeout",
        one_member,
        {
            "member_id": "x",
            "member_epoch": 0,
            "subscribed_topics": frozenset({"t"}),
            "rebalance_timeout_ms": 0,
        },
        ErrorCode.INVALID_REQUEST,
    ),
    (
        "heartbeat from unknown member",
        one_member,
        {"member_id": "x", "member_epoch": 1},
        ErrorCode.UNKNOWN_MEMBER_ID,
    ),
    (
        "leave of unknown member",
        one_member,
        {"member_id": "x", "member_epoch": -1},
        ErrorCode.UNKNOWN_MEMBER_ID,
    ),
    (
        "epoch ahead of the member's",
        one_member,
        {"member_id": "a", "member_epoch": 7},
        ErrorCode.FENCED_MEMBER_EPOCH,
    ),
    (
        "previous epoch owning more than assigned",
        two_members,
        {"member_id": "a", "member_epoch": 1, "owned": parts("t0 t1 t2 t3")},
        ErrorCode.FENCED_MEMBER_EPOCH,
    ),
    (
        "stale epoch without owned partitions",
        two_members,
        {"member_id": "a", "member_epoch": 1},
        ErrorCode.FENCED_MEMBER_EPOCH,
    ),
    (
        "group full",
        full_group,
        {"member_id": "d", "member_epoch": 0, "subscribed_topics": frozenset({"t"})},
        ErrorCode.GROUP_MAX_SIZE_REACHED,
    ),
    (
        "instance id used by a live member",
        static_member,
        {
            "member_id": "b",
            "member_epoch": 0,
            "instance_id": "host-1",
            "subscribed_topics": frozenset({"t"}),
        },
        ErrorCode.UNRELEASED_INSTANCE_ID,
    ),
    (
        "static leave with another instance id",
        static_member,
        {"member_id": "a", "member_epoch": -2, "instance_id": "host-2"},
        ErrorCode.FENCED_MEMBER_EPOCH,
    ),
]


@pytest.mark.parametrize(
    ("make_group", "fields", "code"),
    [pytest.param(*row[1:], id=row[0]) for row in REFUSALS],
)
def test_refusals(make_group: Any, fields: dict[str, Any], code: ErrorCode) -> None:
    group = make_group()
    after, result = heartbeat(
        group, HeartbeatRequest(**fields), partition_counts=COUNTS, now_ms=5, config=CONFIG
    )
    assert (result.error, result.assignment) == (int(code), None)
    assert result.message
    assert after == group


def test_first_member_gets_everything_at_epoch_one() -> None:
    group, result = join(Group(group_id="g"), "a")
    assert (result.member_epoch, result.assignment, result.heartbeat_interval_ms) == (
        1,
        parts("t0 t1 t2 t3"),
        1_000,
    )
    assert group_state(group) is GroupState.STABLE


def test_joiner_waits_until_the_owner_revokes() -> None:
    group = one_member()
    group, b = join(group, "b")
    assert (b.member_epoch, b.assignment) == (2, frozenset())  # t2, t3 still held by a
    assert group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert group_state(group) is GroupState.RECONCILING
    group, a = beat(group, "a", 1, owned=parts("t0 t1 t2 t3"))
    assert (a.member_epoch, a.assignment) == (1, parts("t0 t1"))  # revoke first, epoch stays
    group, b = beat(group, "b", 2, owned=frozenset())
    assert b.assignment == frozenset()  # a has not confirmed yet
    group, a = beat(group, "a", 1, owned=parts("t0 t1"))
    assert (a.member_epoch, a.assignment) == (2, parts("t0 t1"))
    group, b = beat(group, "b", 2, owned=frozenset())
    assert b.assignment == parts("t2 t3")
    assert group_state(group) is GroupState.STABLE


def test_lost_answer_previous_epoch_accepted() -> None:
    group = two_members()
    # a's epoch went 1 -> 2 while it kept t0 t1; it retries with epoch 1 owning t0 t1.
    assert group.members["a"].previous_member_epoch == 1
    _, result = beat(group, "a", 1, owned=parts("t0 t1"))
    assert (result.error, result.member_epoch) == (0, 2)


def test_leave_releases_to_the_others() -> None:
    group = two_members()
    group, result = beat(group, "b", -1)
    assert (result.error, result.member_epoch) == (0, -1)
    assert set(group.members) == {"a"}
    group, a = beat(group, "a", 2, owned=parts("t0 t1"))
    assert (a.member_epoch, a.assignment) == (3, parts("t0 t1 t2 t3"))


def test_session_expiry_fences_a_silent_member() -> None:
    group = two_members()  # everybody heartbeated at 0: deadline 10_000
    group, a = beat(group, "a", 2, owned=parts("t0 t1"), now_ms=4_000)
    assert next_deadline_ms(group) == 10_000
    assert expire(group, now_ms=9_999, config=CONFIG) == (group, ())
    group, gone = expire(group, now_ms=10_000, config=CONFIG)
    assert gone == ("b",)
    assert check_invariants(group) == []
    group, a = beat(group, "a", 2, owned=parts("t0 t1"), now_ms=10_001)
    assert a.assignment == parts("t0 t1 t2 t3")
    # The expired member's next heartbeat is refused: it must rejoin.
    _, b = beat(group, "b", 2, owned=parts("t2 t3"), now_ms=10_002)
    assert b.error == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    group, _ = join(Group(group_id="g"), "a", rebalance_timeout_ms=500)
    group, _ = join(group, "b", now_ms=100)
    group, a = beat(group, "a", 1, owned=parts("t0 t1 t2 t3"), now_ms=200)
    assert (a.assignment, group.members["a"].revocation_deadline_ms) == (parts("t0 t1"), 700)
    group, b = beat(group, "b", 2, owned=frozenset(), now_ms=300)
    assert b.assignment == frozenset()  # t2 t3 are still being revoked by a
    group, gone = expire(group, now_ms=700, config=CONFIG)
    assert gone == ("a",)
    group, b = beat(group, "b", 2, owned=frozenset(), now_ms=701)
    assert b.assignment == parts("t0 t1 t2 t3")


def test_static_member_keeps_its_assignment_across_a_restart() -> None:
    group, _ = join(Group(group_id="g"), "a", instance_id="host-1")
    group, _ = join(group, "b", instance_id="host-2")
    group = settle(group)
    epoch_before = group.group_epoch
    group, left = beat(group, "a", -2, instance_id="host-1", now_ms=1_000)
    assert (left.error, left.member_epoch) == (0, -2)
    assert group.members["a"].left_temporarily
    assert group.group_epoch == epoch_before  # no rebalance
    # A heartbeat from the incarnation that left is refused.
    assert (
        beat(group, "a", 2, owned=parts("t0 t1"), now_ms=1_001)[1].error
        == ErrorCode.FENCED_MEMBER_EPOCH
    )
    group, back = join(group, "a2", instance_id="host-1", now_ms=2_000)
    assert (back.error, back.member_id, back.member_epoch, back.assignment) == (
        0,
        "a2",
        2,
        parts("t0 t1"),
    )
    assert set(group.members) == {"a2", "b"}
    assert group.group_epoch == epoch_before


def test_static_member_that_stays_away_expires() -> None:
    group, _ = join(Group(group_id="g"), "a", instance_id="host-1")
    group, _ = join(group, "b", now_ms=7_000)
    group, _ = beat(group, "a", -2, instance_id="host-1", now_ms=6_000)
    group, gone = expire(group, now_ms=16_000, config=CONFIG)
    assert gone == ("a",)


def test_dynamic_rejoin_releases_what_it_held() -> None:
    group = two_members()
    group, again = join(group, "a")
    assert again.member_epoch == group.group_epoch
    group = settle(group)
    assert group.members["a"].assigned | group.members["b"].assigned == parts("t0 t1 t2 t3")


def test_subscription_change_retargets() -> None:
    group = two_members()
    epoch = group.group_epoch
    counts = {"t": 4, "u": 2}
    group, _ = beat(
        group, "b", 2, owned=parts("t2 t3"), subscribed_topics=frozenset({"u"}), counts=counts
    )
    assert group.group_epoch == epoch + 1  # one transition, one epoch
    assert group.target == {"a": parts("t0 t1 t2 t3"), "b": parts("u0 u1")}


def test_partition_count_growth_retargets() -> None:
    group = one_member()
    group, a = beat(group, "a", 1, owned=parts("t0 t1 t2 t3"), counts={"t": 6})
    assert (a.member_epoch, a.assignment) == (2, parts("t0 t1 t2 t3 t4 t5"))


def test_assignor_most_members_ask_for() -> None:
    group, _ = join(Group(group_id="g"), "a", server_assignor="uniform")
    assert group.assignor == "uniform"
    group, _ = join(group, "b", server_assignor="range")
    group, _ = join(group, "c", server_assignor="range")
    assert group.assignor == "range"
    assert join(Group(group_id="h"), "a")[0].assignor == CONFIG.default_assignor


# (member id, member epoch) against a group with a at epoch 2 -> commit, fetch
OFFSET_CASES = [
    ("member at its epoch", "a", 2, ErrorCode.NONE, ErrorCode.NONE),
    ("stale member epoch", "a", 1, ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.STALE_MEMBER_EPOCH),
    ("unknown member", "x", 2, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID),
    ("no member while the group has members", "", -1, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.NONE),
]


@pytest.mark.parametrize(
    ("member_id", "epoch", "commit", "fetch"),
    [pytest.param(*row[1:], id=row[0]) for row in OFFSET_CASES],
)
def test_offset_checks(member_id: str, epoch: int, commit: ErrorCode, fetch: ErrorCode) -> None:
    group = two_members()
    assert group.members["a"].member_epoch == 2
    assert check_offset_commit(group, member_id, epoch) == commit
    assert check_offset_fetch(group, member_id, epoch) == fetch


def test_offsets_without_a_member_for_an_empty_or_unknown_group() -> None:
    assert check_offset_commit(None, "", -1) == ErrorCode.NONE
    assert check_offset_commit(Group(group_id="g"), "", -1) == ErrorCode.NONE
    assert check_offset_commit(None, "a", 3) == ErrorCode.UNKNOWN_MEMBER_ID
    assert check_offset_fetch(None, "", -1) == ErrorCode.NONE


def test_records_round_trip_through_msgspec() -> None:
    group = two_members()
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(group), type=Group)
    assert decoded == group


def test_a_new_coordinator_restarts_every_deadline() -> None:
    group, _ = join(Group(group_id="g"), "a", now_ms=0, rebalance_timeout_ms=500)
    group, _ = join(group, "b", now_ms=100)
    group, _ = beat(group, "a", 1, owned=parts("t0 t1 t2 t3"), now_ms=200)  # a revoking
    restarted = restart_deadlines(group, now_ms=50_000)
    assert {
        m: (v.session_deadline_ms, v.revocation_deadline_ms) for m, v in restarted.members.items()
    } == {
        "a": (60_000, 50_500),
        "b": (60_000, -1),
    }
    assert without_deadlines(restarted) == without_deadlines(group)
    assert expire(restarted, now_ms=50_499, config=CONFIG)[1] == ()


def test_only_deadlines_is_not_a_durable_change() -> None:
    group = two_members()
    later, _ = beat(group, "a", 2, owned=parts("t0 t1"), now_ms=5_000)
    assert later != group
    assert without_deadlines(later) == without_deadlines(group)
    moved, _ = beat(group, "b", -1)
    assert without_deadlines(moved) != without_deadlines(group)
