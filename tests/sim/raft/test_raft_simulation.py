"""The Raft simulation (see `simulator`): many seeds, exact replay, and proof it can fail.

- `test_seeded_runs`: `SEED_COUNT` seeds in the normal test run; `make sim-raft SEEDS=N`
  (env `MINIKAFKA_RAFT_SEEDS`, first seed `MINIKAFKA_RAFT_FIRST_SEED`) runs more.
- `test_replay_one_seed`: `MINIKAFKA_RAFT_SEED=<n>` replays one run, printing its schedule.
- The `broken` tests run the same simulation with one rule deliberately broken and
  require the checker to catch it within a bounded number of seeds.
"""

from __future__ import annotations

import os
import time

import msgspec
import pytest

import controller.raft.core as core_module
from controller.raft.actions import Action, Role
from controller.raft.core import RaftNode
from controller.raft.messages import Message, VoteRequest
from controller.raft.rules import VoteDecision, pre_vote_decision, vote_decision
from tests.sim.raft.simulator import RunStats, Simulation, Violation, run_seed

#: Seeds per normal test run. Measured on the shared 2-core box: 19-23 s at load 2 (110-130
#: runs/s, ~40-46k events/s, also with a long simulation running beside it), ~71 runs/s at
#: load 4 (35 s): inside the 60 s budget with margin. `make sim-raft SEEDS=N` runs more.
SEED_COUNT = 2500

#: A deliberately broken rule must be caught within this many seeds (each found in < 40).
BROKEN_RULE_SEEDS = 300


def _seed_range() -> range:
    count = int(os.environ.get("MINIKAFKA_RAFT_SEEDS", SEED_COUNT))
    first = int(os.environ.get("MINIKAFKA_RAFT_FIRST_SEED", 0))
    return range(first, first + count)


def test_seeded_runs(capsys: pytest.CaptureFixture[str]) -> None:
    seeds = _seed_range()
    started = time.perf_counter()
    stats: list[RunStats] = [run_seed(seed) for seed in seeds]
    elapsed = time.perf_counter() - started
    events = sum(run.events for run in stats)
    with capsys.disabled():
        print(
            f"\nRaft simulation: seeds {seeds.start}..{seeds.stop - 1}: {len(stats)} runs, "
            f"{events} events in {elapsed:.1f} s ({len(stats) / elapsed:.0f} runs/s, "
            f"{events / elapsed:.0f} events/s); committed {sum(r.committed for r in stats)}, "
            f"elections won {sum(r.leaders for r in stats)}, crashes "
            f"{sum(r.crashes for r in stats)}, snapshot installs "
            f"{sum(r.snapshots_installed for r in stats)}, slowest liveness "
            f"{max(r.liveness_ms for r in stats)} ms"
        )
    # The runs must have exercised what they check, not passed vacuously.
    if len(stats) >= 200:
        assert sum(1 for run in stats if run.snapshots_installed) > len(stats) // 10
        assert sum(1 for run in stats if run.leaders >= 3) > len(stats) // 4
        assert sum(1 for run in stats if run.crashes) > len(stats) // 2
        assert min(run.committed for run in stats) >= 1


def test_replay_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    seed = os.environ.get("MINIKAFKA_RAFT_SEED")
    if seed is None:
        pytest.skip("set MINIKAFKA_RAFT_SEED=<n> to replay one seed")
    simulation = Simulation(int(seed))
    try:
        stats = simulation.run()
    finally:
        with capsys.disabled():
            print(f"\nparams: {simulation.params}")
            print("\n".join(simulation.schedule))
    with capsys.disabled():
        print(stats)


def test_a_seed_replays_exactly() -> None:
    first, second = Simulation(11), Simulation(11)
    assert first.run() == second.run()
    assert first.schedule == second.schedule
    assert list(first.trace) == list(second.trace)
    assert first.committed == second.committed


def _first_violation(node_class: type[RaftNode] = RaftNode) -> Violation:
    for seed in range(BROKEN_RULE_SEEDS):
        try:
            run_seed(seed, node_class=node_class)
        except Violation as violation:
            return violation
    pytest.fail(f"the broken rule survived {BROKEN_RULE_SEEDS} seeds: the checker is blind")


def test_broken_high_watermark_counted_from_a_minority_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def minority_high_watermark(
        *, voter_end_offsets: list[int], epoch_start_offset: int, current: int | None
    ) -> int | None:
        reached = max(voter_end_offsets)  # the leader alone "commits"
        if reached <= epoch_start_offset or (current is not None and reached <= current):
            return current
        return reached

    monkeypatch.setattr(core_module, "leader_high_watermark", minority_high_watermark)
    violation = _first_violation()
    assert "committed data" in str(violation) or "logs match" in str(violation)
    assert "MINIKAFKA_RAFT_SEED=" in str(violation)
    assert "fault schedule:" in str(violation)


class _VotesTwice(RaftNode):
    """Broken on purpose: forgets whom it voted for in the current epoch before deciding."""

    def receive(self, message: Message, now_ms: int) -> list[Action]:
        if (
            isinstance(message, VoteRequest)
            and not message.pre_vote
            and self.role is Role.UNATTACHED
        ):
            self._vote = msgspec.structs.replace(self._vote, voted_for=None)
        return super().receive(message, now_ms)


def test_broken_vote_twice_in_an_epoch_is_caught() -> None:
    violation = _first_violation(_VotesTwice)
    assert "single leader" in str(violation)


def test_broken_vote_for_a_stale_log_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def any_log_vote(**inputs: object) -> VoteDecision:
        return vote_decision(**{**inputs, "candidate_last_epoch": 1 << 30})  # type: ignore[arg-type]

    def any_log_pre_vote(**inputs: object) -> VoteDecision:
        return pre_vote_decision(**{**inputs, "candidate_last_epoch": 1 << 30})  # type: ignore[arg-type]

    monkeypatch.setattr(core_module, "vote_decision", any_log_vote)
    monkeypatch.setattr(core_module, "pre_vote_decision", any_log_pre_vote)
    violation = _first_violation()
    text = str(violation)
    assert "committed data" in text or "below the high watermark" in text or "logs match" in text
