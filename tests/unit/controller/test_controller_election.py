"""Election table: every mode x ISR/alive combination, plus properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.election import ElectionMode, ElectionResult, elect_leader
from controller.model import NO_LEADER

ONLINE, PREFERRED, UNCLEAN = ElectionMode.ONLINE, ElectionMode.PREFERRED, ElectionMode.UNCLEAN
ASSIGNMENT = (1, 2, 3)

# (mode, isr, alive, current leader) -> (leader, unclean)
CASES = [
    # ONLINE: keep a valid leader, else first alive ISR member in assignment order.
    ("online keeps alive ISR leader", ONLINE, {1, 2, 3}, {1, 2, 3}, 2, 2, False),
    ("online replaces dead leader", ONLINE, {1, 2, 3}, {2, 3}, 1, 2, False),
    ("online picks in assignment order", ONLINE, {2, 3}, {2, 3}, NO_LEADER, 2, False),
    ("online replaces leader out of ISR", ONLINE, {2, 3}, {1, 2, 3}, 1, 2, False),
    ("online skips alive non-ISR replica", ONLINE, {1}, {2, 3}, 1, NO_LEADER, False),
    ("online no ISR member alive", ONLINE, {1, 2}, {3}, 1, NO_LEADER, False),
    ("online nobody alive", ONLINE, {1, 2, 3}, set(), 1, NO_LEADER, False),
    ("online leaderless gets leader back", ONLINE, {3}, {3}, NO_LEADER, 3, False),
    # PREFERRED: first replica when alive and in ISR, else as ONLINE.
    ("preferred moves back to first", PREFERRED, {1, 2, 3}, {1, 2, 3}, 2, 1, False),
    ("preferred already leads", PREFERRED, {1, 2, 3}, {1, 2, 3}, 1, 1, False),
    ("preferred not in ISR keeps leader", PREFERRED, {2, 3}, {1, 2, 3}, 2, 2, False),
    ("preferred dead keeps leader", PREFERRED, {1, 2, 3}, {2, 3}, 2, 2, False),
    ("preferred dead, leader dead", PREFERRED, {1, 2, 3}, {3}, 2, 3, False),
    ("preferred never unclean", PREFERRED, {1}, {2, 3}, NO_LEADER, NO_LEADER, False),
    # UNCLEAN: as ONLINE, then any alive replica, flagged.
    ("unclean prefers clean", UNCLEAN, {1, 2}, {2, 3}, 1, 2, False),
    ("unclean keeps valid leader", UNCLEAN, {1, 2, 3}, {1, 2, 3}, 3, 3, False),
    ("unclean out-of-sync replica", UNCLEAN, {1}, {2, 3}, 1, 2, True),
    ("unclean last alive replica", UNCLEAN, {1, 2}, {3}, NO_LEADER, 3, True),
    ("unclean nobody alive", UNCLEAN, {1, 2, 3}, set(), 1, NO_LEADER, False),
]


@pytest.mark.parametrize(
    ("mode", "isr", "alive", "current", "leader", "unclean"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_election_table(
    mode: ElectionMode, isr: set[int], alive: set[int], current: int, leader: int, unclean: bool
) -> None:
    result = elect_leader(
        assignment=ASSIGNMENT, isr=isr, alive=alive, current_leader=current, mode=mode
    )
    assert result == ElectionResult(leader=leader, unclean=unclean)


def _subsets(items: tuple[int, ...]) -> list[frozenset[int]]:
    return [
        frozenset(combo)
        for size in range(len(items) + 1)
        for combo in itertools.combinations(items, size)
    ]


@pytest.mark.parametrize("mode", list(ElectionMode), ids=lambda mode: mode.value)
def test_exhaustive_small_cluster(mode: ElectionMode) -> None:
    """Every ISR x alive x current-leader combination of a 3-replica partition."""
    for isr in _subsets(ASSIGNMENT):
        if not isr:
            continue
        for alive in _subsets((1, 2, 3, 4)):
            for current in (NO_LEADER, *ASSIGNMENT):
                result = elect_leader(
                    assignment=ASSIGNMENT, isr=isr, alive=alive, current_leader=current, mode=mode
                )
                eligible = isr & alive
                if eligible:
                    assert result.leader in eligible
                    assert not result.unclean
                    if mode is PREFERRED and 1 in eligible:
                        assert result.leader == 1
                    elif current in eligible:
                        assert result.leader == current
                elif mode is UNCLEAN and alive & set(ASSIGNMENT):
                    assert result.unclean
                    assert result.leader in alive
                    assert result.leader in ASSIGNMENT
                else:
                    assert result == ElectionResult(leader=NO_LEADER)


@given(
    replicas=st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True),
    data=st.data(),
)
def test_clean_result_is_alive_isr_member(replicas: list[int], data: st.DataObject) -> None:
    isr = data.draw(st.sets(st.sampled_from(replicas), min_size=1))
    alive = data.draw(st.sets(st.integers(0, 9)))
    mode = data.draw(st.sampled_from(list(ElectionMode)))
    current = data.draw(st.sampled_from([NO_LEADER, *replicas]))
    result = elect_leader(
        assignment=replicas, isr=isr, alive=alive, current_leader=current, mode=mode
    )
    if result.leader == NO_LEADER:
        assert not result.unclean
        assert not (isr & alive)
    elif result.unclean:
        assert mode is UNCLEAN
        assert result.leader in alive
        assert result.leader in replicas
        assert not (isr & alive)
    else:
        assert result.leader in isr
        assert result.leader in alive
