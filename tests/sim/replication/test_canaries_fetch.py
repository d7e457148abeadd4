"""Known-bug canaries for holes 1 and 4 of the replication-safety issue (issue 17).

Each canary runs the ordinary simulation (`simulator.Simulation`, random seeds, the
default fault rates) with the WHOLE fix of one hole switched off by its test-only
`unsafe_test_...` switch, and requires the history checker to catch it within a few
seeds. The same seeds pass with the fix on: they are among the 100 seeds
`test_replication_simulation.test_seeded_runs` runs on every test run.

- Hole 1 (KIP-903): `unsafe_test_isr_without_broker_epoch` on the brokers and the
  controller. A broker comes back with a shorter log (at seed 36 a wiped one); the leader
  still holds its previous incarnation's fetch progress (kept across the ISR change, no
  broker epoch), a fetch by another follower proposes it for the ISR, the controller
  checks only that it is unfenced, and a later election makes the short replica the only
  ISR member and leader: the others truncate to it (seed 36: from 14 records to 0) and
  acknowledged writes vanish.
- Hole 4: `unsafe_test_apply_stale_fetch_answers`. NOT caught from random seeds, so
  opt-in (`MINIKAFKA_SIM_HOLE4_SEEDS=N`), even with the replica invariant and the
  `stale-answer` fault: see `test_canary_hole4_stale_fetch_answers` for the measured
  reasons; `test_hole4_schedule` drives the exact losing schedule deterministically.

A canary found at seed N prints it; `MINIKAFKA_SIM_SEED=N` replays that seed (with the
switch passed the same way) because a seed runs the same alone and after other seeds
(`test_a_seed_runs_the_same_alone_and_after_other_seeds`).
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest

from tests.sim.replication.simulator import Simulation, Violation, params_for

#: Hole 1 is caught at seed 340 of the default seeds (341 runs, ~90 s on an idle core;
#: seed 36 before the hole-5 fix's wiped-directory check was simulated exactly and the
#: power-lost broker's heartbeat stream went quiet as it should: the wiped-broker path is
#: now closed by the directory identity too, leaving the rarer power-loss path). Biasing
#: the fault rates towards power losses, crashes, wipes or fast restarts found nothing in
#: 120-150 seeds each.
HOLE1_CANARY_SEEDS = 350

HOLE1_REVERTED: dict[str, Any] = {
    "broker_settings": {"unsafe_test_isr_without_broker_epoch": True},
    "controller_settings": {"unsafe_test_isr_without_broker_epoch": True},
}


HOLE4_REVERTED: dict[str, Any] = {
    "broker_settings": {"unsafe_test_apply_stale_fetch_answers": True},
}


def first_violation(
    seeds: range, *, bias: dict[str, Any] | None = None, **options: Any
) -> tuple[int, Violation] | None:
    """The first seed whose run the checker refuses; `bias` overrides fault rates of each
    seed's drawn parameters (the schedule itself stays random)."""
    for seed in seeds:
        params = msgspec.structs.replace(params_for(seed), **(bias or {}))
        try:
            Simulation(seed, params=params, **options).run()
        except Violation as violation:
            return seed, violation
    return None


def test_canary_hole1_readded_on_a_previous_incarnations_progress_is_caught(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = first_violation(range(HOLE1_CANARY_SEEDS), **HOLE1_REVERTED)
    if found is None:
        pytest.fail(
            f"hole 1 with its fix reverted survived {HOLE1_CANARY_SEEDS} seeds: "
            "the simulation is blind to it"
        )
    seed, violation = found
    text = str(violation)
    assert "unseen" in text or "vanished" in text or "lost" in text, text
    assert f"MINIKAFKA_SIM_SEED={seed}" in text
    with capsys.disabled():
        print(f"\ncanary hole 1 (KIP-903 reverted): caught at seed {seed}")


#: The hole-4 canary's bias: faults twice as often on three brokers, four partitions per
#: topic (a leader then keeps some partitions while one fails over, so its followers'
#: fetchers outlive the fail-over and an old answer reaches a partition that still
#: follows), fast restarts and frequent preferred elections (a partition back to its
#: restarted preferred leader: the fail-over of one partition), and `stale-answer`: a
#: leader's next fetch answer with records to each follower is held until it looks fresh
#: (the follower's log end back at its fetch offset after it moved) or up to 200..1500
#: ms (below the lag that drops a follower from the ISR). The schedule stays random.
HOLE4_BIAS: dict[str, Any] = {
    "fault_interval_ms": 150,
    "partitions": 4,
    "brokers": 3,
    "restart_max_ms": 600,
    "hold_max_ms": 1500,
    "extra_actions": ("stale-answer",) * 4 + ("preferred",) * 6,
}


def test_canary_hole4_stale_fetch_answers(capsys: pytest.CaptureFixture[str]) -> None:
    """Hole 4 with its whole fix reverted (the fetcher applies an answer to the partition
    it asked for while that still follows, whatever its leader, epoch and fetch offset are
    now; the follower log appends an older epoch's batch and its epoch cache drops the
    newer entries). Opt-in (`MINIKAFKA_SIM_HOLE4_SEEDS=N` runs N seeds): NOT caught
    within a CI budget (~160 seeds a minute). A catching seed, replayed with the fix on,
    must pass.

    The losing schedule (`test_hole4_schedule`, deterministic, loses with the switch on
    only) chains six steps: (1) A leads partitions 0 and 1, F follows both through one
    fetcher and is ahead of B on partition 0 (B at x, F at z > x); (2) F's fetch from A
    at z is answered with A's uncommitted records z.. and the answer is delayed; (3)
    partition 0 moves to B (A keeps 1, so that fetcher lives on), F truncates to x and
    re-fetches B's newer-epoch batches up to exactly z; (4) the delayed answer lands then
    and is appended, F's epoch cache drops B's epoch; (5) F's next fetch from B is told
    to diverge at B's end of the old epoch: F truncates below the HW; (6) B fails and F
    is elected before F's following fetch (one or two round trips, a few ms) repairs it.

    Two general tools now shorten the chain. The replica invariant
    (`invariants.CommittedPrefix`, checked after every applied fetch answer of every run:
    no replica truncates below the HW it learned) fails the run at step 5, so step 6 is
    no longer needed. The `stale-answer` fault delivers a held answer exactly when the
    follower's log end is back at its fetch offset (step 4 given step 3).

    Still out of reach, measured with an instrumented trap (held answers / held while
    the partition changed leader / log end moved / moved BELOW the fetch offset, step 3
    / released fresh): the trap on one leader->follower link, 4 partitions, preferred x6,
    stale-answer x6, seeds 0..59: 178 / 10 / 5 / 0 / 0; on every link of one leader
    (as now; holds up to 3 s), seeds 0..39: 152 / 4 / 1 / 0 / 0; `HOLE4_BIAS` plus 4
    pause slots (a paused new leader lags), seeds 0..29 with the fix off: no answer
    released fresh, no violation. Step 3 needs the follower AHEAD of the
    new leader when its partition moves; a held answer stops the follower where it is
    while the new leader keeps fetching from the old one and passes it within a round
    trip, so the partition must move within one round trip of the hold (or the new
    leader be held too, then it leaves the ISR and cannot be elected). A preferred
    election that moves one partition while its old leader keeps another comes about 1.5
    times a seed with this bias (30 in 20 seeds, 316 elections)."""
    seeds = int(os.environ.get("MINIKAFKA_SIM_HOLE4_SEEDS", 0))
    if not seeds:
        pytest.skip("hole 4 is not caught from random seeds: MINIKAFKA_SIM_HOLE4_SEEDS=<n>")
    found = first_violation(range(seeds), bias=HOLE4_BIAS, **HOLE4_REVERTED)
    if found is None:
        pytest.fail(f"hole 4 with its fix reverted survived {seeds} seeds")
    seed, violation = found
    assert f"MINIKAFKA_SIM_SEED={seed}" in str(violation)
    with capsys.disabled():
        print(f"\ncanary hole 4 (stale fetch answers): caught at seed {seed}")
    params = msgspec.structs.replace(params_for(seed), **HOLE4_BIAS)
    Simulation(seed, params=params).run()  # the fix on: the same seed passes


def test_a_run_with_held_answers_replays_exactly() -> None:
    """The `stale-answer` fault (off by default) is drawn from the run's generator, and
    its release is decided by the simulated logs on virtual time: a biased run replays
    exactly, held answers included."""
    params = msgspec.structs.replace(params_for(38), **HOLE4_BIAS)
    first = Simulation(38, params=params)
    first.run()
    again = Simulation(38, params=params)
    again.run()
    assert any("stale-answer: holding" in line for line in first.schedule)
    assert again.schedule == first.schedule
    assert again.ops == first.ops


def test_a_run_with_link_holds_replays_exactly() -> None:
    """The `hold` fault (off by default, a stalled link that flushes later) likewise."""
    params = msgspec.structs.replace(
        params_for(38), partitions=2, brokers=3, extra_actions=("hold",) * 6, hold_max_ms=1000
    )
    first = Simulation(38, params=params)
    first.run()
    again = Simulation(38, params=params)
    again.run()
    assert any(" hold " in line for line in first.schedule)
    assert again.schedule == first.schedule
    assert again.ops == first.ops


def test_a_seed_runs_the_same_alone_and_after_other_seeds() -> None:
    """What a run does must depend on its seed only, not on the runs before it in the
    process (a canary's seed must replay alone). Seed 1 ran differently after seed 0
    while `asyncio.TaskGroup` and the simulated processes cancelled their tasks in
    memory-address order (sets of tasks)."""
    first = Simulation(1)
    first.run()
    Simulation(0).run()
    again = Simulation(1)
    again.run()
    assert again.schedule == first.schedule
    assert again.ops == first.ops
