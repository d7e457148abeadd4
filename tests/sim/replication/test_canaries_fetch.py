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
- Hole 4: `unsafe_test_apply_stale_fetch_answers`. NOT caught yet, so opt-in
  (`MINIKAFKA_SIM_HOLE4_SEEDS=N`): see `test_canary_hole4_stale_fetch_answers`.

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
#: still follows). The schedule stays random.
HOLE4_BIAS: dict[str, Any] = {"fault_interval_ms": 150, "partitions": 2, "brokers": 3}


def test_canary_hole4_stale_fetch_answers(capsys: pytest.CaptureFixture[str]) -> None:
    """Hole 4 with its whole fix reverted (the fetcher applies an answer to the partition
    it asked for while that still follows, whatever its leader, epoch and fetch offset are
    now; the follower log appends an older epoch's batch and its epoch cache drops the
    newer entries). Opt-in: NOT caught yet. With `HOLE4_BIAS`, seeds 0..499 applied a
    stale answer (another leader epoch, same fetch offset) 10 times and none lost a write;
    a slow-link fault added to the nemesis (tried, not kept) only doubled the rate (8 in
    seeds 0..199), none lost one either.
    The loss needs a stale batch to land exactly at the follower's log end after it
    fetched newer-epoch batches ending there, then a truncation below the HW and the
    leader's failure before the follower's next fetch repairs it (the fault suite's R43
    came to the same conclusion). `MINIKAFKA_SIM_HOLE4_SEEDS=N` runs N seeds."""
    seeds = int(os.environ.get("MINIKAFKA_SIM_HOLE4_SEEDS", 0))
    if not seeds:
        pytest.skip("hole 4 is not caught yet: set MINIKAFKA_SIM_HOLE4_SEEDS=<n> to search")
    found = first_violation(range(seeds), bias=HOLE4_BIAS, **HOLE4_REVERTED)
    if found is None:
        pytest.fail(f"hole 4 with its fix reverted survived {seeds} seeds")
    seed, violation = found
    assert f"MINIKAFKA_SIM_SEED={seed}" in str(violation)
    with capsys.disabled():
        print(f"\ncanary hole 4 (stale fetch answers): caught at seed {seed}")


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
