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
  opt-in (`MINIKAFKA_SIM_HOLE4_SEEDS=N`): see `test_canary_hole4_stale_fetch_answers`
  for why; `test_hole4_schedule` drives the exact losing schedule deterministically.

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


#: The hole-4 canary's bias: faults twice as often, two partitions per topic on three
#: brokers (a leader then often keeps one partition while the other fails over, so its
#: follower's fetcher outlives the fail-over and a stale answer reaches a partition that
#: still follows), preferred elections (the fail-over of one partition) and link stalls
#: (`hold`: a broker->broker link delivers nothing for 200-1000 ms, then everything, so a
#: fetch answer arrives after a leadership change) made frequent. The schedule stays random.
HOLE4_BIAS: dict[str, Any] = {
    "fault_interval_ms": 150,
    "partitions": 2,
    "brokers": 3,
    "extra_actions": ("hold",) * 6 + ("preferred",) * 3,
    "hold_max_ms": 1000,
}


def test_canary_hole4_stale_fetch_answers(capsys: pytest.CaptureFixture[str]) -> None:
    """Hole 4 with its whole fix reverted (the fetcher applies an answer to the partition
    it asked for while that still follows, whatever its leader, epoch and fetch offset are
    now; the follower log appends an older epoch's batch and its epoch cache drops the
    newer entries). Opt-in (`MINIKAFKA_SIM_HOLE4_SEEDS=N` runs N seeds): NOT caught, and
    out of reach of a random schedule within a CI budget (~160 seeds a minute).

    The losing schedule (`test_hole4_schedule`, deterministic, loses with the switch on
    only) chains six steps: (1) A leads partitions 0 and 1, F follows both through one
    fetcher and is ahead of B on partition 0 (B at x, F at z > x); (2) F's fetch from A
    at z is answered with A's uncommitted records z.. and the answer is delayed; (3)
    partition 0 moves to B (A keeps 1, so that fetcher lives on), F truncates to x and
    re-fetches B's newer-epoch batches up to exactly z; (4) the delayed answer lands then
    and is appended, F's epoch cache drops B's epoch; (5) F's next fetch from B is told
    to diverge at B's end of the old epoch: F truncates below the HW; (6) B fails and F
    is elected before F's following fetch (one or two round trips, a few ms) repairs it.

    Measured with an instrumented fetcher and log, 200 seeds each (stale answers applied
    / with records / to a follower whose log end had moved from the fetch offset / an
    older-epoch batch appended after newer ones, step 4): the faults twice as often on 3
    brokers x 2 partitions without holds, seeds 0..199: 9 / 0 / 0 / 0; with 3 hold slots
    of 200-3000 ms, seeds 0..199: 12 / 1 / 0 / 0; with `HOLE4_BIAS`, seeds 200..399:
    20 / 7 / 6 / 0 (174 seeds a minute). Closest miss, seed 253: old leader 1's answer
    for offset 30 (epoch 1) reached the follower of leader 3 (epoch 2) when its log end
    had passed 30 to 33 with epoch-2 batches: three offsets late, refused by the offset
    check. Elsewhere (seeds 285, 326) stale records landed at an unmoved log end before
    any newer-epoch batch, which the next fetch's divergence check repairs harmlessly.
    Step 3 needs the delayed answer to land within one produce interval (~10-40 ms) of
    the hold's end, and step 6 a crash of B (a ninth of the faults, every 75-225 ms)
    within a few ms of the truncation, with F rather than A elected (~0.5%): a loss is
    some 1e4 times rarer than a stale answer with records, i.e. a million seeds or more,
    not a CI budget."""
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


def test_a_run_with_link_holds_replays_exactly() -> None:
    """The `hold` fault (off by default) is drawn from the run's generator and timed on
    virtual time: a biased run replays exactly, holds included."""
    params = msgspec.structs.replace(params_for(38), **HOLE4_BIAS)
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
