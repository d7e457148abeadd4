"""Known-bug canaries for holes 2, 5 and 6 of the replication-safety issue (issue 17).

Each test switches one fix off as a whole (every layer of it, by its test-only
`unsafe_test_*` setting), runs seeds 0.. of the simulation until one fails, prints the
seed, and then replays that seed with the fix on: it must pass, so the violation is the
hole's and not the simulation's. The schedules stay random; where the plain seeds reach a
hole too rarely for the CI budget, the canary biases the fault *rates* only (the
parameters `params_for(seed)` drew, with more of some nemesis actions).

- Hole 2 (`BrokerConfig.unsafe_test_control_before_registration`): a broker that lost
  power and came back within its session timeout (the controller still sees the old
  incarnation's session) applies the LeaderAndIsr the controller re-sends to the old
  incarnation before it has registered, and serves replica fetches: it leads in the old
  epoch with the log the power loss shortened, and the followers truncate to it. Bias:
  restarts within 600 ms (the session timeout is 1.5 s), three more power-loss slots, a
  wipe slot (a power loss that shortens the log to nothing) and two more preferred
  elections (they move leadership to a replica whose old session still looks alive).
- Hole 5 (`ControllerConfig.unsafe_test_wiped_directory_is_clean`): a broker whose data
  directory was wiped registers as after a clean shutdown (its new directory id changes
  nothing), stays in the ISR and the ELR with an empty log, and may lead: the other
  replicas truncate to nothing. Bias: wipes on, any number per run, three wipe slots,
  faults every 150 ms on average, restarts within 600 ms.
- Hole 6 (`BrokerConfig.unsafe_test_latest_offset_before_epoch_start`, KIP-207): a new
  leader answers ListOffsets(LATEST) with its lagging high watermark, so the workload's
  offsets client sees the latest offset go backwards (`latest-offset-backwards`). Bias:
  two more preferred-election slots (each one a leader change).

The controller's part of hole 2 (stop dispatching to the old incarnation once the new one
registered) has no switch of its own: the dispatcher builds every attempt from the current
registration, so its requests name the new incarnation's epoch as soon as it exists; it
was so before the fix too, and the hole lives entirely in what the broker accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tests.sim.replication.simulator import SimParams, Simulation, Violation, params_for

#: Seeds each canary may use (the first catch is printed; README lists them).
CANARY_SEEDS = 40
LOSS = ("lost-write", "unseen", "vanished")


def _hole2_params(seed: int) -> SimParams:
    return msgspec.structs.replace(
        params_for(seed),
        fault_interval_ms=300,
        restart_max_ms=600,
        wipes=True,
        max_wipes=100,
        extra_actions=("wipe", "power-loss", "power-loss", "preferred", "preferred"),
    )


def _hole5_params(seed: int) -> SimParams:
    return msgspec.structs.replace(
        params_for(seed),
        fault_interval_ms=150,
        restart_max_ms=600,
        wipes=True,
        max_wipes=100,
        extra_actions=("wipe", "wipe"),
    )


def _hole6_params(seed: int) -> SimParams:
    return msgspec.structs.replace(params_for(seed), extra_actions=("preferred", "preferred"))


def _caught(
    params_of: Callable[[int], SimParams],
    unsafe: dict[str, Any],
    wanted: Callable[[str], bool],
) -> tuple[int, str]:
    """The first seed whose run with the fix off fails as `wanted` says (its report);
    that seed must then pass with the fix on."""
    for seed in range(CANARY_SEEDS):
        try:
            Simulation(seed, params=params_of(seed), **unsafe).run()
        except Violation as violation:
            text = str(violation)
            if wanted(text):
                Simulation(seed, params=params_of(seed)).run()  # the fix on: no violation
                return seed, text
    pytest.fail(f"the hole survived {CANARY_SEEDS} seeds: the simulation is blind to it")


def _anomalies(text: str) -> str:
    """The checker's `anomalies:` line of a violation report."""
    return next((line for line in text.splitlines() if line.startswith("anomalies:")), "")


def test_canary_control_requests_before_registration_are_caught(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed, text = _caught(
        _hole2_params,
        {"broker_settings": {"unsafe_test_control_before_registration": True}},
        lambda text: any(kind in _anomalies(text) for kind in LOSS),
    )
    assert f"MINIKAFKA_SIM_SEED={seed}" in text
    with capsys.disabled():
        print(f"\ncanary hole 2 (control requests before registration): caught at seed {seed}")


def test_canary_wiped_directory_as_clean_shutdown_is_caught(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed, text = _caught(
        _hole5_params,
        {"controller_settings": {"unsafe_test_wiped_directory_is_clean": True}},
        lambda text: any(kind in _anomalies(text) for kind in LOSS),
    )
    assert "wipe broker-" in text  # the schedule names the wipe
    with capsys.disabled():
        print(f"\ncanary hole 5 (wiped directory counts as clean): caught at seed {seed}")


def test_canary_latest_offset_going_backwards_is_caught(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed, _ = _caught(
        _hole6_params,
        {"broker_settings": {"unsafe_test_latest_offset_before_epoch_start": True}},
        lambda text: "latest-offset-backwards" in _anomalies(text),
    )
    with capsys.disabled():
        print(f"\ncanary hole 6 (KIP-207, latest offset goes backwards): caught at seed {seed}")
