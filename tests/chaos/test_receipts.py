"""Loss receipts against the history checker (issue 15 item 4).

R12R: an unclean election loses acknowledged writes (as R12: unclean election enabled,
the ISR dies, the out-of-sync replica leads); the old ISR members truncate to the new
leader's log, each writing a loss receipt first. The acknowledged writes the checker
reports lost must be exactly the acknowledged records the receipts hold, each at its
acknowledged offset. The cross-check itself is tested on hand-made histories first,
including the cases it must reject.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.checker import (
    MAX_EXAMPLES,
    UNCLEAN_EXPECTED,
    DiscardedValue,
    check,
    check_receipts,
)
from tests.chaos.harness import Run, seeds
from tests.chaos.history import History, Op
from tests.chaos.receipts import verify_receipts
from tests.chaos.test_isr import TOPIC, lagging_then_isr_down, more_acks, setup

pytestmark = pytest.mark.chaos

K = "t/0"


# ---- the cross-check on hand-made histories ----------------------------------------------


def send(history: History, process: int, value: int, offset: int | None, outcome: str) -> None:
    op = history.invoke(process, "send", [["send", K, value]], acks="all")
    done: Any = [["send", K, [offset, value]]] if outcome == "ok" else [["send", K, value]]
    history.complete(op, outcome, done)


def final_poll(history: History, pairs: list[tuple[int, int]]) -> None:
    history.meta(final_poll_targets={K: pairs[-1][0] if pairs else -1})
    op = history.invoke(999, "poll", None)
    history.complete(op, "ok", [["poll", {K: [list(p) for p in pairs]}]], final=True)


def unclean_history() -> list[Op]:
    """100, 101, 102 acknowledged at 0-2; 103 sent with an unknown outcome; an unclean
    leader that had only offset 0 takes 200 at offset 1. The final polls read 100, 200."""
    history = History()
    for offset, value in enumerate((100, 101, 102)):
        send(history, 1, value, offset, "ok")
    send(history, 1, 103, None, "info")
    send(history, 1001, 200, 1, "ok")
    final_poll(history, [(0, 100), (1, 200)])
    return history.ops


def held(*rows: tuple[int, int]) -> list[DiscardedValue]:
    return [DiscardedValue(key=K, offset=o, value=v, broker=1) for o, v in rows]


@pytest.mark.parametrize(
    ("discarded", "valid", "missing", "refetched", "unacknowledged"),
    [
        pytest.param(held((1, 101), (2, 102)), True, [], 0, 0, id="receipts hold the lost writes"),
        pytest.param(
            held((1, 101), (2, 102), (3, 103)), True, [], 0, 1, id="and an uncommitted tail"
        ),
        pytest.param(
            [*held((1, 101), (2, 102)), DiscardedValue(key=K, offset=1, value=101, broker=2)],
            True,
            [],
            0,
            0,
            id="two replicas discarded the same records",
        ),
        pytest.param(
            held((0, 100), (1, 101), (2, 102)),
            True,
            [],
            1,
            0,
            id="a copy of a record that stayed (refetched)",
        ),
        pytest.param(held((1, 101)), False, [[K, 2, 102]], 0, 0, id="a lost write without receipt"),
        pytest.param(
            held((1, 101), (3, 102)), False, [[K, 2, 102]], 0, 0, id="receipt at the wrong offset"
        ),
        pytest.param([], False, [[K, 1, 101], [K, 2, 102]], 0, 0, id="no receipts at all"),
    ],
)
def test_cross_check_on_an_unclean_history(
    discarded: list[DiscardedValue],
    valid: bool,
    missing: list[list[Any]],
    refetched: int,
    unacknowledged: int,
) -> None:
    ops = unclean_history()
    assert {"unseen"} <= set(check(ops, expected=UNCLEAN_EXPECTED).expected_types)
    result = check_receipts(ops, discarded)
    assert result.valid is valid, result.to_text()
    assert result.lost == [[K, 1, 101], [K, 2, 102]]
    assert result.missing == missing
    assert result.unexplained == []
    assert (result.refetched, result.unacknowledged) == (refetched, unacknowledged)


def test_a_receipt_of_a_write_the_checker_does_not_call_lost_is_rejected() -> None:
    """The receipt says the acknowledged record at offset 0 was discarded; the final polls
    read its value at offset 4, so the checker does not report it lost: they disagree."""
    history = History()
    send(history, 1, 100, 0, "ok")
    final_poll(history, [(4, 100)])
    result = check_receipts(history.ops, held((0, 100)))
    assert not result.valid
    assert result.unexplained == [[K, 0, 100]]
    assert result.lost == []


def test_receipts_without_batches_make_the_check_inconclusive() -> None:
    result = check_receipts(
        unclean_history(), held((1, 101), (2, 102)), unverifiable=["broker 1 ...: batches evicted"]
    )
    assert not result.valid
    assert "unverifiable: broker 1" in result.to_text()


def test_the_cross_check_reads_every_lost_write_not_the_report_examples() -> None:
    """More lost writes than the checker's report shows: one missing receipt among them
    is still found."""
    history = History()
    lost = MAX_EXAMPLES + 8
    for offset in range(lost + 1):
        send(history, 1, 1000 + offset, offset, "ok")
    final_poll(history, [(0, 1000)])
    receipts = held(*[(o, 1000 + o) for o in range(1, lost)])  # offset `lost` missing
    result = check_receipts(history.ops, receipts)
    assert len(result.lost) == lost
    assert result.missing == [[K, lost, 1000 + lost]]


# ---- the scenario ---------------------------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r12r_loss_receipts_list_exactly_the_acknowledged_writes_lost(run: Run, seed: int) -> None:
    setup(run, configs={"unclean_leader_election_enable": "true"})
    cluster = run.cluster
    assert cluster is not None
    run.workload(run.topic_partitions(TOPIC, 1), producers=2).start().wait_acked(20)
    leader, in_sync, lagging = lagging_then_isr_down(run)
    try:
        cluster.wait_leader(TOPIC, 0, timeout_s=10)
    except TimeoutError:
        cluster.elect(TOPIC, 0, "unclean")
    assert cluster.wait_leader(TOPIC, 0, timeout_s=20) == lagging
    run.heal()  # the old ISR returns and truncates to the unclean leader's log
    cluster.wait_isr(TOPIC, 0, sorted(cluster.brokers), timeout_s=30)
    more_acks(run, 10)
    result = run.converge_and_check(TOPIC, 1, expected=UNCLEAN_EXPECTED)
    assert {"lost-write", "unseen"} & set(result.expected_types), result.to_text()
    receipts = verify_receipts(run)
    assert receipts.lost, "the unclean election lost no acknowledged write: nothing was checked"
    print(
        f"R12R: {len(receipts.lost)} acknowledged writes lost, all in the receipts of brokers "
        f"{leader} and {in_sync}; {receipts.unacknowledged} unacknowledged records in receipts"
    )
