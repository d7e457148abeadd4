"""The role transition list: every listed transition passes, everything else raises."""

from __future__ import annotations

import itertools

import pytest

from controller.raft.actions import Role
from controller.raft.roles import (
    TRANSITIONS,
    Candidate,
    EpochChange,
    Follower,
    IllegalTransition,
    Leader,
    Prospective,
    Resigned,
    RoleState,
    Unattached,
    check_transition,
    role_of,
)


def _state(role: Role, epoch: int) -> RoleState:
    if role is Role.UNATTACHED:
        return Unattached(epoch=epoch, election_deadline_ms=100)
    if role is Role.PROSPECTIVE:
        return Prospective(
            epoch=epoch,
            round_id=1,
            last_leader_id=None,
            granted=frozenset({1}),
            rejected=frozenset(),
            deadline_ms=100,
        )
    if role is Role.CANDIDATE:
        return Candidate(
            epoch=epoch, round_id=1, granted=frozenset({1}), rejected=frozenset(), deadline_ms=100
        )
    if role is Role.LEADER:
        return Leader(epoch=epoch, epoch_start_offset=0, ready=False)
    if role is Role.FOLLOWER:
        return Follower(epoch=epoch, leader_id=2, fetch_deadline_ms=100)
    return Resigned(epoch=epoch, deadline_ms=100)


# Rows in the words of the transition list (roles.py docstring).
NAMED_CASES = [
    ("election timeout starts a pre-vote", Role.UNATTACHED, 3, Role.PROSPECTIVE, 3, True),
    ("pre-vote majority bumps the epoch", Role.PROSPECTIVE, 3, Role.CANDIDATE, 4, True),
    ("pre-vote cannot skip an epoch", Role.PROSPECTIVE, 3, Role.CANDIDATE, 5, False),
    ("vote majority makes a leader", Role.CANDIDATE, 4, Role.LEADER, 4, True),
    ("no leader in another epoch", Role.CANDIDATE, 4, Role.LEADER, 5, False),
    ("unattached cannot lead directly", Role.UNATTACHED, 3, Role.LEADER, 3, False),
    ("follower cannot stand without pre-vote", Role.FOLLOWER, 3, Role.CANDIDATE, 4, False),
    ("fetch timeout: pre-vote", Role.FOLLOWER, 3, Role.PROSPECTIVE, 3, True),
    ("two leaders in one epoch impossible", Role.FOLLOWER, 3, Role.FOLLOWER, 3, False),
    ("a new leader of a larger epoch", Role.FOLLOWER, 3, Role.FOLLOWER, 4, True),
    ("leader steps down on a larger epoch", Role.LEADER, 4, Role.UNATTACHED, 5, True),
    ("leader cannot become unattached in its epoch", Role.LEADER, 4, Role.UNATTACHED, 4, False),
    ("graceful resign", Role.LEADER, 4, Role.RESIGNED, 4, True),
    ("resigned never leads again", Role.RESIGNED, 4, Role.LEADER, 4, False),
    ("resigned stands again via pre-vote", Role.RESIGNED, 4, Role.PROSPECTIVE, 4, True),
    ("candidate times out into pre-vote", Role.CANDIDATE, 4, Role.PROSPECTIVE, 4, True),
    ("candidate learns the winner of its epoch", Role.CANDIDATE, 4, Role.FOLLOWER, 4, True),
    ("granting a vote in the same epoch", Role.UNATTACHED, 4, Role.UNATTACHED, 4, True),
    ("epochs never go back", Role.UNATTACHED, 4, Role.UNATTACHED, 3, False),
    ("lost pre-vote retries the last leader", Role.PROSPECTIVE, 3, Role.FOLLOWER, 3, True),
]


@pytest.mark.parametrize(
    ("old_role", "old_epoch", "new_role", "new_epoch", "allowed"),
    [pytest.param(*case[1:], id=case[0]) for case in NAMED_CASES],
)
def test_named_transitions(
    old_role: Role, old_epoch: int, new_role: Role, new_epoch: int, allowed: bool
) -> None:
    old, new = _state(old_role, old_epoch), _state(new_role, new_epoch)
    if allowed:
        check_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)


@pytest.mark.parametrize(
    ("old_role", "new_role"),
    list(itertools.product(Role, Role)),
    ids=lambda role: role.value,
)
def test_every_pair_follows_the_table(old_role: Role, new_role: Role) -> None:
    """Exhaustive: for epochs 5 -> 4..7, a transition passes iff the table allows it."""
    allowed = TRANSITIONS.get((old_role, new_role))
    for new_epoch in (4, 5, 6, 7):
        old, new = _state(old_role, 5), _state(new_role, new_epoch)
        if allowed is not None and allowed.allows(5, new_epoch):
            check_transition(old, new)
        else:
            with pytest.raises(IllegalTransition):
                check_transition(old, new)


@pytest.mark.parametrize(
    ("change", "old", "new", "allowed"),
    [
        pytest.param(EpochChange.LARGER, 3, 4, True, id="larger: up"),
        pytest.param(EpochChange.LARGER, 3, 3, False, id="larger: same"),
        pytest.param(EpochChange.SAME, 3, 3, True, id="same: same"),
        pytest.param(EpochChange.SAME, 3, 4, False, id="same: up"),
        pytest.param(EpochChange.SAME_OR_LARGER, 3, 9, True, id="same-or-larger: up"),
        pytest.param(EpochChange.SAME_OR_LARGER, 3, 2, False, id="same-or-larger: down"),
        pytest.param(EpochChange.NEXT, 3, 4, True, id="next: +1"),
        pytest.param(EpochChange.NEXT, 3, 5, False, id="next: +2"),
    ],
)
def test_epoch_change_relations(change: EpochChange, old: int, new: int, allowed: bool) -> None:
    assert change.allows(old, new) is allowed


def test_only_candidates_become_leaders() -> None:
    assert [old for (old, new) in TRANSITIONS if new is Role.LEADER] == [Role.CANDIDATE]
    assert [old for (old, new) in TRANSITIONS if new is Role.CANDIDATE] == [Role.PROSPECTIVE]


def test_role_of_names_every_state() -> None:
    assert {role_of(_state(role, 1)) for role in Role} == set(Role)
