"""R21: a mixed, seeded random nemesis soak (long mode only: `MINIKAFKA_CHAOS_LONG=1`).

The schedule is drawn from the seed up front and recorded in the history: every 2-10 s
one fault (kill -9, SIGSTOP, graceful bounce, network isolation of one broker, a
preferred election, a controller kill) that is healed before the next, so at every
instant at least one in-sync replica holds its log (fault model F1). At the end
everything is healed and the full checker must be valid.
"""

from __future__ import annotations

import random
import time

import pytest

from tests.chaos.harness import LONG, Run, seeds
from tests.support.chaos_cluster import broker_name

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(not LONG, reason="the soak runs only with MINIKAFKA_CHAOS_LONG=1"),
]

TOPIC = "soak"
PARTITIONS = 4
SOAK_S = 120.0
FAULTS = ("kill", "pause", "bounce", "isolate", "elect", "kill-controller")


def draw_schedule(rng: random.Random, brokers: list[int]) -> list[dict[str, object]]:
    schedule: list[dict[str, object]] = []
    at = 0.0
    while at < SOAK_S:
        gap = rng.uniform(2.0, 10.0)
        schedule.append(
            {
                "at_s": round(at, 2),
                "fault": rng.choice(FAULTS),
                "broker": rng.choice(brokers),
                "hold_s": round(rng.uniform(0.5, min(gap, 4.0)), 2),
                "partition": rng.randrange(PARTITIONS),
            }
        )
        at += gap
    return schedule


def apply(run: Run, step: dict[str, object]) -> None:
    cluster = run.cluster
    assert cluster is not None
    broker = int(step["broker"])  # type: ignore[call-overload]
    hold_s = float(step["hold_s"])  # type: ignore[arg-type]
    fault = step["fault"]
    if fault == "kill":
        cluster.kill(broker)
        time.sleep(hold_s)  # the fault lasts hold_s
        cluster.start_broker(broker)
    elif fault == "pause":
        cluster.pause(broker)
        time.sleep(hold_s)
        cluster.resume(broker)
    elif fault == "bounce":
        cluster.terminate(broker)
        cluster.start_broker(broker)
    elif fault == "isolate":
        cluster.record("isolate", broker=broker)
        cluster.net.isolate(broker_name(broker))
        time.sleep(hold_s)
        cluster.record("heal-network")
        cluster.net.heal()
    elif fault == "elect":
        cluster.elect(TOPIC, int(step["partition"]), "preferred")  # type: ignore[call-overload]
    elif fault == "kill-controller":
        cluster.kill_controller()
        time.sleep(hold_s)
        cluster.start_controller()
    # Heal before the next fault: every replica back in the ISR (F1 holds throughout).
    cluster.wait_full_isr(TOPIC, PARTITIONS, timeout_s=60)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds(long=(1, 2, 3)))
def test_r21_mixed_random_nemesis_soak(run: Run, seed: int) -> None:
    cluster = run.start_cluster()
    partitions = run.topic(TOPIC, partitions=PARTITIONS)
    schedule = draw_schedule(run.rng, sorted(cluster.brokers))
    run.history.meta(schedule=schedule)
    print("R21 schedule:", schedule)
    workload = run.workload(partitions, producers=4, consumers=2).start()
    workload.wait_acked(50)
    started = time.monotonic()
    for step in schedule:
        delay = started + float(step["at_s"]) - time.monotonic()  # type: ignore[arg-type]
        if delay > 0:
            time.sleep(delay)  # the schedule's pace, not a wait for a condition
        apply(run, step)
    workload.wait_acked(workload.acked + 20, timeout_s=60)
    run.converge_and_check(TOPIC, PARTITIONS)
