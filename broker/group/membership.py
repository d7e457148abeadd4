"""PURE group transitions: heartbeat (join, rejoin, leave, static leave), session and
rebalance-timeout expiry, and the member-epoch checks of offset commit and fetch.

Called by the group coordinator (the shell owns the clock, the timers and the topic
metadata; it passes `now_ms` and the partition counts in). Rules, as Kafka's
GroupMetadataManager.consumerGroupHeartbeat (KIP-848):

- **Join** (`member_epoch` 0) with a new member id adds a member (GROUP_MAX_SIZE_REACHED
  past `max_size`); with the id of a present dynamic member it replaces it with a fresh one
  (what the old one held is released). A static member (`instance_id`) whose instance id
  belongs to a member that left temporarily, or to itself, takes over that member's
  assignment and epoch without a rebalance; while another live member has that instance id
  the join is refused with UNRELEASED_INSTANCE_ID.
- **Heartbeat** (`member_epoch` > 0) from an unknown member id: UNKNOWN_MEMBER_ID. An epoch
  other than the member's current one is FENCED_MEMBER_EPOCH (the member must rejoin with
  epoch 0), except its previous epoch with owned partitions within its assignment (the
  answer that advanced it was lost). A refused heartbeat changes nothing.
- **Leave** (`member_epoch` -1) removes the member; **static leave** (-2) keeps it and its
  assignment, marked `left_temporarily`, until its session expires.
- The group epoch grows when a member joins, leaves or is fenced, a subscription or
  assignor preference changes, or a subscribed topic's partition count changes; the target
  is then recomputed at once (the assignment epoch is always the group epoch after a
  transition), and the member that sent the heartbeat is reconciled (`reconcile`).
- **Expiry**: a member whose session deadline passed (no heartbeat for its session timeout)
  or whose revocation deadline passed (it did not revoke within its rebalance timeout) is
  removed, as a leave.
- **Offsets**: a commit from a member must carry its current member epoch
  (STALE_MEMBER_EPOCH) and a known member id (UNKNOWN_MEMBER_ID); a commit without a member
  (epoch < 0, empty id: an admin or a consumer without subscription) is accepted only while
  the group has no members. A fetch without a member is always answered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import msgspec

from broker.group.assignors import ASSIGNORS, MemberSubscription
from broker.group.model import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Group,
    GroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    Member,
    TopicPartition,
)
from broker.group.reconcile import reconcile
from minikafka.errors import ErrorCode


def heartbeat(
    group: Group,
    request: HeartbeatRequest,
    *,
    partition_counts: Mapping[str, int],
    now_ms: int,
    config: GroupConfig,
) -> tuple[Group, HeartbeatResult]:
    """The group after one ConsumerGroupHeartbeat, and the answer to it."""
    refused = _validate(request, config)
    if refused is not None:
        return group, refused
    if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        return _leave(group, request, now_ms=now_ms, config=config)
    if request.member_epoch == JOIN_EPOCH:
        joined = _join(group, request, config)
        if isinstance(joined, HeartbeatResult):
            return group, joined
        group, member, changed = joined
    else:
        found = _current_member(group, request)
        if isinstance(found, HeartbeatResult):
            return group, found
        member, changed = found, False
    member, updated = _refresh(member, request, now_ms=now_ms)
    group = _put(group, member, bump=changed or updated)
    group = _with_partition_counts(group, partition_counts)
    group = _update_target(group, config)
    member = reconcile(
        group.members[member.member_id],
        owned=request.owned,
        assignment_epoch=group.assignment_epoch,
        target=group.target.get(member.member_id, frozenset()),
        held_by_others=_held_by_others(group, member.member_id),
        now_ms=now_ms,
    )
    group = _put(group, member, bump=False)
    return group, HeartbeatResult(
        member_id=member.member_id,
        member_epoch=member.member_epoch,
        heartbeat_interval_ms=config.heartbeat_interval_ms,
        assignment=member.assigned,
    )


def expire(group: Group, *, now_ms: int, config: GroupConfig) -> tuple[Group, tuple[str, ...]]:
    """Remove the members whose session or revocation deadline has passed; returns the new
    group and the removed member ids (sorted)."""
    expired = sorted(
        m.member_id
        for m in group.members.values()
        if now_ms >= m.session_deadline_ms
        or (m.revocation_deadline_ms >= 0 and now_ms >= m.revocation_deadline_ms)
    )
    if not expired:
        return group, ()
    return _remove(group, expired, config), tuple(expired)


def next_deadline_ms(group: Group) -> int | None:
    """When `expire` may next remove somebody (None: the group has no members)."""
    deadlines = [m.session_deadline_ms for m in group.members.values()]
    deadlines += [
        m.revocation_deadline_ms for m in group.members.values() if m.revocation_deadline_ms >= 0
    ]
    return min(deadlines, default=None)


def restart_deadlines(group: Group, *, now_ms: int) -> Group:
    """The group as a new coordinator loads it: every member's session (and pending
    revocation) runs from `now_ms`, as if it had just heartbeated (Kafka does the same)."""
    members = {
        member_id: msgspec.structs.replace(
            member,
            session_deadline_ms=now_ms + member.session_timeout_ms,
            revocation_deadline_ms=(
                now_ms + member.rebalance_timeout_ms if member.revocation_deadline_ms >= 0 else -1
            ),
        )
        for member_id, member in group.members.items()
    }
    return msgspec.structs.replace(group, members=members)


def without_deadlines(group: Group) -> Group:
    """The part of a group worth persisting: everything but the deadlines (a heartbeat
    that only moved a session deadline changes nothing durable)."""
    members = {
        member_id: msgspec.structs.replace(
            member,
            session_deadline_ms=0,
            revocation_deadline_ms=min(0, member.revocation_deadline_ms),
        )
        for member_id, member in group.members.items()
    }
    return msgspec.structs.replace(group, members=members)


def check_offset_commit(group: Group | None, member_id: str, member_epoch: int) -> ErrorCode:
    """May this commit be written? (see the module docstring)."""
    if member_epoch < 0 and not member_id:
        if group is None or not group.members:
            return ErrorCode.NONE
        return ErrorCode.UNKNOWN_MEMBER_ID
    return _check_member(group, member_id, member_epoch)


def check_offset_fetch(group: Group | None, member_id: str, member_epoch: int) -> ErrorCode:
    """May this fetch of committed offsets be answered? Without a member: always."""
    if member_epoch < 0 and not member_id:
        return ErrorCode.NONE
    return _check_member(group, member_id, member_epoch)


def check_invariants(group: Group) -> list[str]:
    """What is wrong with `group` (empty: nothing). Every transition keeps these."""
    problems: list[str] = []
    seen: dict[TopicPartition, str] = {}
    for member in group.members.values():
        for tp in member.held:
            if tp in seen:
                problems.append(f"{tp} held by {seen[tp]} and {member.member_id}")
            seen[tp] = member.member_id
        if member.member_epoch > group.assignment_epoch:
            problems.append(f"{member.member_id} epoch beyond the assignment epoch")
        if not member.assigned.isdisjoint(member.revoking):
            problems.append(f"{member.member_id} both owns and revokes a partition")
    if group.assignment_epoch != group.group_epoch:
        problems.append("target assignment behind the group epoch")
    if set(group.target) != set(group.members):
        problems.append("target members differ from the members")
    return problems


# ---- steps ----------------------------------------------------------------------------


def _refused(code: ErrorCode, message: str) -> HeartbeatResult:
    return HeartbeatResult(error=int(code), message=message)


def _validate(request: HeartbeatRequest, config: GroupConfig) -> HeartbeatResult | None:
    if not request.member_id:
        return _refused(ErrorCode.INVALID_REQUEST, "member_id must not be empty")
    if request.member_epoch < STATIC_LEAVE_EPOCH:
        return _refused(
            ErrorCode.INVALID_REQUEST, f"member_epoch {request.member_epoch} is below -2"
        )
    if request.member_epoch == JOIN_EPOCH and request.subscribed_topics is None:
        return _refused(ErrorCode.INVALID_REQUEST, "a join must carry subscribed_topics")
    if request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        return _refused(
            ErrorCode.INVALID_REQUEST, "member_epoch -2 (static leave) needs instance_id"
        )
    if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
        return _refused(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"server_assignor {request.server_assignor!r} is not one of {sorted(ASSIGNORS)}",
        )
    timeout = request.session_timeout_ms
    if timeout is not None and not (
        config.min_session_timeout_ms <= timeout <= config.max_session_timeout_ms
    ):
        return _refused(
            ErrorCode.INVALID_SESSION_TIMEOUT,
            f"session_timeout_ms {timeout} is outside [{config.min_session_timeout_ms}, "
            f"{config.max_session_timeout_ms}]",
        )
    if request.rebalance_timeout_ms is not None and request.rebalance_timeout_ms <= 0:
        return _refused(ErrorCode.INVALID_REQUEST, "rebalance_timeout_ms must be positive")
    return None


def _leave(
    group: Group, request: HeartbeatRequest, *, now_ms: int, config: GroupConfig
) -> tuple[Group, HeartbeatResult]:
    member = group.members.get(request.member_id)
    if member is None:
        return group, _refused(
            ErrorCode.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in the group"
        )
    answer = HeartbeatResult(member_id=member.member_id, member_epoch=request.member_epoch)
    if request.member_epoch == STATIC_LEAVE_EPOCH:
        if member.instance_id != request.instance_id:
            return group, _refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"instance_id {request.instance_id!r} is not this member's",
            )
        left = msgspec.structs.replace(
            member,
            left_temporarily=True,
            session_deadline_ms=now_ms + member.session_timeout_ms,
        )
        return _put(group, left, bump=False), answer
    return _remove(group, [member.member_id], config), answer


def _join(
    group: Group, request: HeartbeatRequest, config: GroupConfig
) -> tuple[Group, Member, bool] | HeartbeatResult:
    """(group without the replaced member, the joining member, whether the group epoch must
    grow), or the refusal."""
    if request.instance_id is not None:
        static = next(
            (m for m in group.members.values() if m.instance_id == request.instance_id), None
        )
        if static is not None:
            if static.member_id != request.member_id and not static.left_temporarily:
                return _refused(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"instance_id {request.instance_id!r} is used by member {static.member_id!r}",
                )
            group = _take_over(group, static, request.member_id)
            return group, group.members[request.member_id], False
    old = group.members.get(request.member_id)
    if old is not None:
        group = _without(group, [old.member_id])
    elif len(group.members) >= config.max_size:
        return _refused(
            ErrorCode.GROUP_MAX_SIZE_REACHED, f"the group has {config.max_size} members"
        )
    fresh = Member(
        member_id=request.member_id,
        instance_id=request.instance_id,
        session_timeout_ms=config.session_timeout_ms,
    )
    return group, fresh, True


def _take_over(group: Group, static: Member, member_id: str) -> Group:
    """A static member's new incarnation steps into the old one's place."""
    if static.member_id == member_id:
        return group
    members = {k: v for k, v in group.members.items() if k != static.member_id}
    target = {k: v for k, v in group.target.items() if k != static.member_id}
    members[member_id] = msgspec.structs.replace(static, member_id=member_id)
    target[member_id] = group.target.get(static.member_id, frozenset())
    return msgspec.structs.replace(group, members=members, target=target)


def _current_member(group: Group, request: HeartbeatRequest) -> Member | HeartbeatResult:
    member = group.members.get(request.member_id)
    if member is None:
        return _refused(
            ErrorCode.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in the group"
        )
    if request.member_epoch == member.member_epoch and not member.left_temporarily:
        return member
    lost_answer = (
        request.member_epoch == member.previous_member_epoch
        and request.owned is not None
        and request.owned <= member.assigned
        and not member.left_temporarily
    )
    if lost_answer:
        return member
    return _refused(
        ErrorCode.FENCED_MEMBER_EPOCH,
        f"member epoch {request.member_epoch} is not the member's epoch {member.member_epoch}",
    )


def _refresh(member: Member, request: HeartbeatRequest, *, now_ms: int) -> tuple[Member, bool]:
    """The member with what this heartbeat carries; True when the target may change."""
    session_timeout_ms = request.session_timeout_ms or member.session_timeout_ms
    topics = (
        request.subscribed_topics
        if request.subscribed_topics is not None
        else member.subscribed_topics
    )
    assignor = (
        request.server_assignor if request.server_assignor is not None else member.server_assignor
    )
    changed = topics != member.subscribed_topics or assignor != member.server_assignor
    refreshed = msgspec.structs.replace(
        member,
        left_temporarily=False,
        client_id=request.client_id or member.client_id,
        client_host=request.client_host or member.client_host,
        subscribed_topics=topics,
        server_assignor=assignor,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms or member.rebalance_timeout_ms,
        session_deadline_ms=now_ms + session_timeout_ms,
    )
    return refreshed, changed


def _put(group: Group, member: Member, *, bump: bool) -> Group:
    members = {**group.members, member.member_id: member}
    epoch = group.group_epoch + 1 if bump else group.group_epoch
    return msgspec.structs.replace(group, members=members, group_epoch=epoch)


def _without(group: Group, member_ids: Iterable[str]) -> Group:
    gone = set(member_ids)
    return msgspec.structs.replace(
        group,
        members={k: v for k, v in group.members.items() if k not in gone},
        target={k: v for k, v in group.target.items() if k not in gone},
        group_epoch=group.group_epoch + 1,
    )


def _remove(group: Group, member_ids: Iterable[str], config: GroupConfig) -> Group:
    group = _without(group, member_ids)
    group = _with_partition_counts(group, group.partition_counts)
    return _update_target(group, config)


def _with_partition_counts(group: Group, partition_counts: Mapping[str, int]) -> Group:
    """Keep the counts of the subscribed topics; a change grows the group epoch, unless this
    transition has grown it already (one transition, one epoch)."""
    subscribed = {t for m in group.members.values() for t in m.subscribed_topics}
    counts = {t: partition_counts[t] for t in sorted(subscribed) if t in partition_counts}
    if counts == group.partition_counts:
        return group
    pending = group.group_epoch > group.assignment_epoch
    epoch = group.group_epoch if pending else group.group_epoch + 1
    return msgspec.structs.replace(group, partition_counts=counts, group_epoch=epoch)


def _choose_assignor(group: Group, config: GroupConfig) -> str:
    """The assignor most members ask for (ties: by name), else the configured default."""
    wanted = Counter(
        m.server_assignor for m in group.members.values() if m.server_assignor is not None
    )
    if not wanted:
        return config.default_assignor
    return min(wanted, key=lambda name: (-wanted[name], name))


def _update_target(group: Group, config: GroupConfig) -> Group:
    if group.assignment_epoch == group.group_epoch:
        return group
    assignor = _choose_assignor(group, config)
    subscriptions = {
        m.member_id: MemberSubscription(topics=m.subscribed_topics, instance_id=m.instance_id)
        for m in group.members.values()
    }
    target = ASSIGNORS[assignor](subscriptions, group.partition_counts, group.target)
    return msgspec.structs.replace(
        group, target=target, assignor=assignor, assignment_epoch=group.group_epoch
    )


def _held_by_others(group: Group, member_id: str) -> frozenset[TopicPartition]:
    return frozenset(
        tp for m in group.members.values() if m.member_id != member_id for tp in m.held
    )


def _check_member(group: Group | None, member_id: str, member_epoch: int) -> ErrorCode:
    member = group.members.get(member_id) if group is not None else None
    if member is None or member.left_temporarily:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE
