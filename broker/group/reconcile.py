"""PURE reconciliation of one member towards its target (Kafka's CurrentAssignmentBuilder).

Called by `membership` on every accepted heartbeat, after the target is up to date. Rules:

1. UNREVOKED_PARTITIONS: the member must stop owning `revoking`. It has done so once its
   heartbeat reports owned partitions that include none of them; until then nothing else
   changes (its epoch stays, it gets nothing new). Then it continues as below.
2. A member holding something outside its target keeps the intersection, moves the rest to
   `revoking`, enters UNREVOKED_PARTITIONS with a revocation deadline (its rebalance
   timeout, Kafka's `max.poll.interval.ms`) and keeps its epoch: **revoke before assign**.
3. Otherwise it takes every target partition that no other member holds, its epoch becomes
   the assignment epoch, and it is UNRELEASED_PARTITIONS while some target partition is
   still held by another member (it gets them on a later heartbeat), STABLE when not.

So a partition is given to a member only when no other member holds it: held sets never
overlap.
"""

from __future__ import annotations

from collections.abc import Set

import msgspec

from broker.group.model import Member, MemberState, TopicPartition


def reconcile(
    member: Member,
    *,
    owned: Set[TopicPartition] | None,
    assignment_epoch: int,
    target: frozenset[TopicPartition],
    held_by_others: Set[TopicPartition],
    now_ms: int,
) -> Member:
    """The member after one heartbeat reporting `owned` (None: not reported)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or not member.revoking.isdisjoint(owned):
            return member
        member = msgspec.structs.replace(member, revoking=frozenset(), revocation_deadline_ms=-1)
    elif member.state is MemberState.STABLE and member.member_epoch == assignment_epoch:
        return member
    keep = member.assigned & target
    revoke = member.assigned - target
    if revoke:
        return msgspec.structs.replace(
            member,
            assigned=keep,
            revoking=revoke,
            state=MemberState.UNREVOKED_PARTITIONS,
            revocation_deadline_ms=now_ms + member.rebalance_timeout_ms,
        )
    wanted = target - keep
    free = frozenset(tp for tp in wanted if tp not in held_by_others)
    state = MemberState.STABLE if free == wanted else MemberState.UNRELEASED_PARTITIONS
    previous = (
        member.previous_member_epoch
        if member.member_epoch == assignment_epoch
        else member.member_epoch
    )
    return msgspec.structs.replace(
        member,
        assigned=keep | free,
        state=state,
        member_epoch=assignment_epoch,
        previous_member_epoch=previous,
    )
