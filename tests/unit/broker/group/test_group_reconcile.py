"""One member's reconciliation towards its target: revoke before assign, never take what
another member holds, the epoch moves only once nothing is left to revoke."""

from __future__ import annotations

import pytest

from broker.group.model import Member, MemberState, TopicPartition
from broker.group.reconcile import reconcile

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
NOW_MS = 1_000
REBALANCE_TIMEOUT_MS = 300


def parts(text: str) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(item[0], int(item[1:])) for item in text.split())


def member(state: MemberState, epoch: int, assigned: str, revoking: str = "") -> Member:
    return Member(
        member_id="m",
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        state=state,
        assigned=parts(assigned),
        revoking=parts(revoking),
        rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        revocation_deadline_ms=NOW_MS if revoking else -1,
    )


# (member before, owned reported or None, assignment epoch, target, held by others)
#   -> (assigned, revoking, state, member epoch)
CASES = [
    (
        "new member takes its free target",
        member(STABLE, 0, ""),
        "",
        1,
        "t0 t1",
        "",
        ("t0 t1", "", STABLE, 1),
    ),
    (
        "stable at the epoch: nothing to do",
        member(STABLE, 3, "t0"),
        "t0",
        3,
        "t0",
        "",
        ("t0", "", STABLE, 3),
    ),
    (
        "grows into a new free partition",
        member(STABLE, 2, "t0"),
        "t0",
        3,
        "t0 t1",
        "",
        ("t0 t1", "", STABLE, 3),
    ),
    (
        "must revoke before anything new; epoch stays",
        member(STABLE, 2, "t0 t1"),
        "t0 t1",
        3,
        "t0 t2",
        "",
        ("t0", "t1", UNREVOKED, 2),
    ),
    (
        "waits while the revoked partition is still owned",
        member(UNREVOKED, 2, "t0", "t1"),
        "t0 t1",
        3,
        "t0 t2",
        "",
        ("t0", "t1", UNREVOKED, 2),
    ),
    (
        "waits when owned is not reported",
        member(UNREVOKED, 2, "t0", "t1"),
        None,
        3,
        "t0 t2",
        "",
        ("t0", "t1", UNREVOKED, 2),
    ),
    (
        "revocation acknowledged: takes the free target, epoch moves",
        member(UNREVOKED, 2, "t0", "t1"),
        "t0",
        3,
        "t0 t2",
        "",
        ("t0 t2", "", STABLE, 3),
    ),
    (
        "target held by another member: unreleased, epoch moves",
        member(STABLE, 2, "t0"),
        "t0",
        3,
        "t0 t1",
        "t1",
        ("t0", "", UNRELEASED, 3),
    ),
    (
        "unreleased partition released by the other member",
        member(UNRELEASED, 3, "t0"),
        "t0",
        3,
        "t0 t1",
        "",
        ("t0 t1", "", STABLE, 3),
    ),
    (
        "still unreleased",
        member(UNRELEASED, 3, "t0"),
        "t0",
        3,
        "t0 t1",
        "t1",
        ("t0", "", UNRELEASED, 3),
    ),
    (
        "acknowledged but target moved again: revokes more",
        member(UNREVOKED, 2, "t0 t2", "t1"),
        "t0 t2",
        4,
        "t0",
        "",
        ("t0", "t2", UNREVOKED, 2),
    ),
    (
        "empty target: revokes all",
        member(STABLE, 2, "t0 t1"),
        "t0 t1",
        3,
        "",
        "",
        ("", "t0 t1", UNREVOKED, 2),
    ),
]


@pytest.mark.parametrize(
    ("before", "owned", "assignment_epoch", "target", "others", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in CASES],
)
def test_reconcile_table(
    before: Member,
    owned: str | None,
    assignment_epoch: int,
    target: str,
    others: str,
    expected: tuple[str, str, MemberState, int],
) -> None:
    after = reconcile(
        before,
        owned=None if owned is None else parts(owned),
        assignment_epoch=assignment_epoch,
        target=parts(target),
        held_by_others=parts(others),
        now_ms=NOW_MS,
    )
    assigned, revoking, state, epoch = expected
    assert (after.assigned, after.revoking, after.state, after.member_epoch) == (
        parts(assigned),
        parts(revoking),
        state,
        epoch,
    )
    # Nothing another member holds is ever taken.
    assert (after.held - before.held).isdisjoint(parts(others))


def test_revocation_sets_the_deadline_and_acknowledgement_clears_it() -> None:
    revoking = reconcile(
        member(STABLE, 2, "t0 t1"),
        owned=parts("t0 t1"),
        assignment_epoch=3,
        target=parts("t0"),
        held_by_others=frozenset(),
        now_ms=NOW_MS,
    )
    assert revoking.revocation_deadline_ms == NOW_MS + REBALANCE_TIMEOUT_MS
    done = reconcile(
        revoking,
        owned=parts("t0"),
        assignment_epoch=3,
        target=parts("t0"),
        held_by_others=frozenset(),
        now_ms=NOW_MS + 10,
    )
    assert (done.revocation_deadline_ms, done.member_epoch, done.previous_member_epoch) == (
        -1,
        3,
        2,
    )
