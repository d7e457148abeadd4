"""The quorum roles as named states, and the only transitions allowed between them.

Modelled on Kafka's `QuorumState` (with KIP-996's Prospective state). Each role is a frozen
struct carrying its epoch and its own timers; `check_transition` raises
`IllegalTransition` for anything not listed below, so a bug shows up at the transition
instead of as a silent second leader. Epoch relation in brackets: `>` a larger epoch,
`>=` equal or larger, `=` the same, `+1` the next.

    Unattached  -> Unattached  [>=] a larger epoch is learnt; or a vote is granted [=]
                -> Prospective [=]  election timeout (voters allowed to vote only)
                -> Follower    [>=] a leader of an equal or larger epoch is discovered
    Prospective -> Unattached  [>=] a larger epoch is learnt; or the pre-vote is lost or
                                    times out without a known leader; or a vote is granted
                -> Candidate   [+1] a majority granted the pre-vote
                -> Follower    [>=] a leader is discovered; or the pre-vote is lost or
                                    times out and the last known leader is retried
    Candidate   -> Unattached  [>]  a larger epoch is learnt
                -> Prospective [=]  election timeout (pre-vote again before a new epoch)
                -> Leader      [=]  a majority granted the vote
                -> Follower    [>=] a leader of an equal or larger epoch is discovered
    Leader      -> Unattached  [>]  a larger epoch is learnt
                -> Follower    [>]  a leader of a larger epoch is discovered
                -> Resigned    [=]  graceful resign, or check-quorum: a majority of voters
                                    has not fetched within the check-quorum timeout
    Follower    -> Unattached  [>=] a larger epoch is learnt; or EndQuorumEpoch from its
                                    leader; or the fetch timeout of a node that may not vote
                -> Prospective [=]  fetch timeout: nothing heard from the leader
                -> Follower    [>]  a leader of a larger epoch is discovered
    Resigned    -> Unattached  [>=] a larger epoch is learnt; or the election timeout of a
                                    node that may not vote
                -> Prospective [=]  election timeout
                -> Follower    [>]  a leader of a larger epoch is discovered

A node starts (after a restart too) as Resigned if it led its persisted epoch (it must
never lead that epoch again: its unflushed entries may be lost), Follower if it knew the
leader, else Unattached (keeping its vote).
"""

from __future__ import annotations

import enum

import msgspec

from controller.raft.actions import Role


class IllegalTransition(Exception):
    """A role change the transition list does not allow: a bug in the core."""


class Unattached(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    election_deadline_ms: int | None  # None: never stands (may not vote)


class Prospective(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    round_id: int  # correlation id of this pre-vote round's requests
    last_leader_id: int | None  # retried when the pre-vote is lost
    granted: frozenset[int]
    rejected: frozenset[int]
    deadline_ms: int


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    round_id: int
    granted: frozenset[int]
    rejected: frozenset[int]
    deadline_ms: int


class Leader(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    epoch_start_offset: int  # offset of its leader-change marker
    ready: bool  # the marker is committed


class Follower(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    leader_id: int
    fetch_deadline_ms: int  # Prospective (or Unattached) when nothing was heard by then


class Resigned(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    deadline_ms: int


RoleState = Unattached | Prospective | Candidate | Leader | Follower | Resigned

ROLE_OF: dict[type[RoleState], Role] = {
    Unattached: Role.UNATTACHED,
    Prospective: Role.PROSPECTIVE,
    Candidate: Role.CANDIDATE,
    Leader: Role.LEADER,
    Follower: Role.FOLLOWER,
    Resigned: Role.RESIGNED,
}


class EpochChange(enum.Enum):
    LARGER = ">"
    SAME = "="
    SAME_OR_LARGER = ">="
    NEXT = "+1"

    def allows(self, old_epoch: int, new_epoch: int) -> bool:
        if self is EpochChange.LARGER:
            return new_epoch > old_epoch
        if self is EpochChange.SAME:
            return new_epoch == old_epoch
        if self is EpochChange.SAME_OR_LARGER:
            return new_epoch >= old_epoch
        return new_epoch == old_epoch + 1


_U, _P, _C, _L, _F, _R = (
    Role.UNATTACHED,
    Role.PROSPECTIVE,
    Role.CANDIDATE,
    Role.LEADER,
    Role.FOLLOWER,
    Role.RESIGNED,
)

#: The transition list above as data: (from, to) -> allowed epoch change.
TRANSITIONS: dict[tuple[Role, Role], EpochChange] = {
    (_U, _U): EpochChange.SAME_OR_LARGER,
    (_U, _P): EpochChange.SAME,
    (_U, _F): EpochChange.SAME_OR_LARGER,
    (_P, _U): EpochChange.SAME_OR_LARGER,
    (_P, _C): EpochChange.NEXT,
    (_P, _F): EpochChange.SAME_OR_LARGER,
    (_C, _U): EpochChange.LARGER,
    (_C, _P): EpochChange.SAME,
    (_C, _L): EpochChange.SAME,
    (_C, _F): EpochChange.SAME_OR_LARGER,
    (_L, _U): EpochChange.LARGER,
    (_L, _F): EpochChange.LARGER,
    (_L, _R): EpochChange.SAME,
    (_F, _U): EpochChange.SAME_OR_LARGER,
    (_F, _P): EpochChange.SAME,
    (_F, _F): EpochChange.LARGER,
    (_R, _U): EpochChange.SAME_OR_LARGER,
    (_R, _P): EpochChange.SAME,
    (_R, _F): EpochChange.LARGER,
}


def role_of(state: RoleState) -> Role:
    return ROLE_OF[type(state)]


def check_transition(old: RoleState, new: RoleState) -> None:
    """Raise `IllegalTransition` unless `old` -> `new` is in the transition list."""
    old_role, new_role = role_of(old), role_of(new)
    allowed = TRANSITIONS.get((old_role, new_role))
    if allowed is None:
        raise IllegalTransition(f"{old_role.value} -> {new_role.value} is not a transition")
    if not allowed.allows(old.epoch, new.epoch):
        raise IllegalTransition(
            f"{old_role.value} (epoch {old.epoch}) -> {new_role.value} (epoch {new.epoch}): "
            f"the epoch must change by {allowed.value}"
        )
