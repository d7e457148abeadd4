"""The simulation's replica invariant (`invariants.CommittedPrefix`) and the release rule
of the `stale-answer` fault (`stale_answers.looks_fresh`), as tables; and the invariant
in a run: it sees an unsafe high watermark on its own."""

from __future__ import annotations

import pytest

from tests.sim.replication.invariants import Breach, CommittedPrefix
from tests.sim.replication.simulator import Simulation, Violation, params_for
from tests.sim.replication.stale_answers import Watch, looks_fresh

KEY = ("t", 0)
OTHER = ("t", 1)

#: Each row: (name, steps, breaches expected). A step is ("observe", broker, key, log end,
#: HW), ("data-lost", broker), ("fetched", broker, key) (the broker's own fetcher applied an
#: answer of the partition) or ("unclean", key).
CASES = [
    ("growing log", [("observe", 1, KEY, 5, 3), ("observe", 1, KEY, 8, 8)], []),
    ("truncation above the HW", [("observe", 1, KEY, 9, 4), ("observe", 1, KEY, 4, 4)], []),
    (
        "truncation below the learned HW",
        [("observe", 1, KEY, 9, 6), ("observe", 1, KEY, 5, 5)],
        [Breach(broker_id=1, key=KEY, log_end_offset=5, learned_high_watermark=6)],
    ),
    (
        "reported once per truncation",
        [("observe", 1, KEY, 9, 6), ("observe", 1, KEY, 5, 5), ("observe", 1, KEY, 5, 5)],
        [Breach(broker_id=1, key=KEY, log_end_offset=5, learned_high_watermark=6)],
    ),
    (
        "a HW above the log end is learned as the log end",
        [("observe", 1, KEY, 4, 9), ("observe", 1, KEY, 4, 4)],
        [],
    ),
    (
        "replicas and partitions apart",
        [("observe", 1, KEY, 9, 9), ("observe", 2, KEY, 3, 3), ("observe", 1, OTHER, 2, 2)],
        [],
    ),
    (
        "a power loss or wipe: learned again",
        [("observe", 1, KEY, 9, 9), ("data-lost", 1), ("observe", 1, KEY, 0, 0)],
        [],
    ),
    (
        # seed 169: an unsynced truncation undone by the power loss brought old-epoch
        # records back under the synced HW checkpoint; the first fetch truncated them
        "after a data loss, nothing is learned before an answer of its own fetcher",
        [("data-lost", 1), ("observe", 1, KEY, 26, 26), ("observe", 1, KEY, 24, 24)],
        [],
    ),
    (
        "after a data loss and an answer of its own fetcher, checked again",
        [
            ("data-lost", 1),
            ("fetched", 1, KEY),
            ("observe", 1, KEY, 26, 26),
            ("observe", 1, KEY, 24, 24),
        ],
        [Breach(broker_id=1, key=KEY, log_end_offset=24, learned_high_watermark=26)],
    ),
    (
        "an answer of another partition checks only that one again",
        [
            ("data-lost", 1),
            ("fetched", 1, OTHER),
            ("observe", 1, KEY, 26, 26),
            ("observe", 1, KEY, 24, 24),
        ],
        [],
    ),
    (
        "a data loss elsewhere changes nothing",
        [("observe", 1, KEY, 9, 9), ("data-lost", 2), ("observe", 1, KEY, 7, 7)],
        [Breach(broker_id=1, key=KEY, log_end_offset=7, learned_high_watermark=9)],
    ),
    (
        "after an unclean election of the partition",
        [("observe", 1, KEY, 9, 9), ("unclean", KEY), ("observe", 1, KEY, 2, 2)],
        [],
    ),
    (
        "an unclean election of another partition",
        [("observe", 1, KEY, 9, 9), ("unclean", OTHER), ("observe", 1, KEY, 2, 2)],
        [Breach(broker_id=1, key=KEY, log_end_offset=2, learned_high_watermark=9)],
    ),
]


@pytest.mark.parametrize(("steps", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_committed_prefix(steps: list[tuple[object, ...]], expected: list[Breach]) -> None:
    invariant = CommittedPrefix()
    breaches = []
    for step in steps:
        match step:
            case ("observe", int(broker), (str(topic), int(partition)), int(end), int(hw)):
                breach = invariant.observe(
                    broker, (topic, partition), log_end_offset=end, high_watermark=hw
                )
                if breach is not None:
                    breaches.append(breach)
            case ("data-lost", int(broker)):
                invariant.data_lost(broker)
            case ("fetched", int(broker), (str(topic), int(partition))):
                invariant.fetched(broker, [(topic, partition)])
            case ("unclean", (str(topic), int(partition))):
                invariant.unclean_election((topic, partition))
            case _:
                raise AssertionError(step)
    assert breaches == expected


#: (name, fetch offset, log ends seen in turn, whether the last one releases the answer)
FRESH = [
    ("unmoved: still the same position", 5, [5, 5], False),
    ("moved away", 5, [5, 2], False),
    ("truncated and back", 5, [5, 2, 4, 5], True),
    ("ahead and back", 5, [7, 5], True),
    ("passed over", 5, [2, 8], False),
]


@pytest.mark.parametrize(
    ("fetch_offset", "log_ends", "released"), [f[1:] for f in FRESH], ids=[f[0] for f in FRESH]
)
def test_a_held_answer_arrives_when_it_looks_fresh(
    fetch_offset: int, log_ends: list[int], released: bool
) -> None:
    watch = Watch(fetch_offset=fetch_offset)
    fresh = False
    for log_end in log_ends:
        assert not fresh, "released before the last step"
        watch, fresh = looks_fresh(watch, log_end)
    assert fresh is released


def test_the_invariant_alone_sees_an_unsafe_high_watermark() -> None:
    """With the HW following the leader's log end (the `unsafe_test_hw_is_leo` canary)
    seed 1 loses acknowledged writes; the invariant sees a replica truncate below the HW
    it had learned before the history is judged (3.6 s into the run)."""
    with pytest.raises(Violation) as caught:
        Simulation(1, broker_settings={"unsafe_test_hw_is_leo": True}).run()
    text = str(caught.value)
    assert text.startswith("replica invariant broken:"), text
    assert "below the high watermark" in text
    assert params_for(1).unclean_elections is False
