"""The simulation's nemesis: crashes, power losses, wipes, pauses, link cuts (one-way
too), link stalls (`hold`), fetch answers held until they look fresh (`stale-answer`)
and a partition's future leader slowed while the other follower's answers are held
(`slow-rival`), these three only when a canary adds them to `SimParams.extra_actions`
(the default seeds never draw them), and elections, drawn
from the run's generator and written to its fault schedule. It tells the simulation's
replica invariant (`invariants.CommittedPrefix`) about power losses, wipes and unclean
elections."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from controller.model import NO_LEADER
from controller.state_machine import ElectionType
from minikafka.errors import ErrorCode
from tests.sim.replication.cluster import SimBroker
from tests.sim.replication.stale_answers import FreshLookingAnswer

if TYPE_CHECKING:
    from tests.sim.replication.simulator import Simulation

#: The longest delay of the answers a `slow-rival` slows: below half the replica lag time
#: (2000 ms in the simulation), so the slowed follower stays in the ISR. Not a `SimParams`
#: field: a new field would change every run's recorded parameters (and `run_digest`).
SLOW_MAX_MS = 800


class Nemesis:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.faults = 0
        self.crashes = 0
        self._side_tasks: set[asyncio.Future[None]] = set()

    def _down(self) -> list[SimBroker]:
        return [b for b in self.sim.brokers if not b.alive]

    async def run(self) -> None:
        params = self.sim.params
        max_down = 1 if params.brokers == 3 else 2
        wipes = 0
        actions = ["crash", "power-loss", "cut", "cut-one-way", "pause", "preferred"]
        if params.unclean_elections:
            actions.append("unclean")
        if params.wipes:
            actions.append("wipe")
        actions += params.extra_actions
        while True:
            low = params.fault_interval_ms // 2
            await asyncio.sleep(self.sim.rng.randint(low, params.fault_interval_ms * 3 // 2) / 1000)
            action = self.sim.rng.choice(actions)
            self.faults += 1
            up = [b for b in self.sim.brokers if b.alive and not b.paused]
            if action in ("crash", "power-loss", "wipe"):
                if action == "wipe" and wipes >= params.max_wipes:
                    continue
                if len(self._down()) >= max_down or not up:
                    continue
                victim = self.sim.rng.choice(up)
                if action == "wipe":
                    wipes += 1
                await self._crash(victim, power_loss=action != "crash", wipe=action == "wipe")
                restart_ms = self.sim.rng.randint(50, params.restart_max_ms)
                self._side(self._restart_later(victim, restart_ms))
            elif action in ("cut", "cut-one-way"):
                names = [self.sim.controller.name] + [b.name for b in self.sim.brokers]
                source, target = self.sim.rng.sample(names, 2)
                self.sim.network.set_cut(source, target, True)
                if action == "cut":
                    self.sim.network.set_cut(target, source, True)
                arrow = "->" if action == "cut-one-way" else "<->"
                self.sim.note(f"cut {source} {arrow} {target}")
                self._side(
                    self._heal_later(
                        source, target, self.sim.rng.randint(100, 2000), action == "cut"
                    )
                )
            elif action == "hold":
                # Only among brokers: the fetch answers of a stalled leader->follower link.
                source, target = self.sim.rng.sample([b.name for b in self.sim.brokers], 2)
                hold_ms = self.sim.rng.randint(200, params.hold_max_ms)
                now_s = asyncio.get_running_loop().time()
                self.sim.network.hold(source, target, now_s + hold_ms / 1000)
                self.sim.note(f"hold {source} -> {target} for {hold_ms} ms")
            elif action == "stale-answer":
                # A leader's next fetch answer with records to each other broker arrives
                # when it looks fresh (`stale_answers`), or after at most 200..hold_max_ms:
                # all its followers stall where they are, as behind a congested switch.
                leaders = self._leaders()
                if not leaders:
                    continue
                leader = self.sim.rng.choice(leaders)
                bound_ms = self.sim.rng.randint(200, params.hold_max_ms)
                for follower in self.sim.brokers:
                    if follower is not leader:
                        trap = FreshLookingAnswer(follower, bound_ms / 1000, self.sim.note)
                        self.sim.network.trap_answer(leader.name, follower.name, trap)
                self.sim.note(f"stale-answer from {leader.name} ({bound_ms} ms)")
            elif action == "slow-rival":
                self._slow_rival()
            elif action == "pause":
                if not up:
                    continue
                victim = self.sim.rng.choice(up)
                victim.pause()
                self.sim.note(f"pause {victim.name}")
                self._side(self._resume_later(victim, self.sim.rng.randint(50, 1500)))
            elif action == "preferred":
                self.sim.note("preferred election")
                await self.sim.engine.elect_leaders(
                    election_type=ElectionType.PREFERRED, partitions=None
                )
            elif action == "unclean":
                self.sim.note("unclean election")
                before = {
                    key: part.leader for key, part in self.sim.engine.state.partitions.items()
                }
                outcomes = await self.sim.engine.elect_leaders(
                    election_type=ElectionType.UNCLEAN, partitions=None
                )
                for outcome in outcomes:
                    key = (outcome.topic, outcome.partition)
                    if (
                        outcome.error is ErrorCode.NONE
                        and outcome.leader != NO_LEADER
                        and before.get(key) == NO_LEADER
                    ):
                        self.sim.unclean_elected = True
                        self.sim.committed_prefix.unclean_election(key)
                        self.sim.note(f"  unclean: {key} led by broker {outcome.leader}")

    def _slow_rival(self) -> None:
        """The setting of hole 4's middle step, on links only: a partition led by broker A
        that its preferred replica B takes back at the next preferred election (B alive,
        A keeps another partition the third replica F follows, so F's fetcher from A
        outlives the move). For 1..3 s, A's answers to B arrive 200..`SLOW_MAX_MS` ms late
        (B trails, still in the ISR), and A's answers to F carrying records of those
        partitions are held until they look fresh (`stale_answers`), each for at most
        100 ms..that delay (so F stays ahead of B) and 1.5 s more once the partition has
        moved (F first truncates to B's log and re-fetches); the trap is re-armed after
        each answer while the slowing lasts."""
        sim = self.sim
        rng = sim.rng
        parts = sim.engine.state.partitions
        rivals: list[tuple[int, int, int]] = []
        for key in sorted(parts):
            registration = parts[key]
            leader, preferred = registration.leader, registration.replicas[0]
            if leader in (NO_LEADER, preferred) or not sim.broker(preferred).alive:
                continue
            others = [r for r in registration.replicas if r not in (leader, preferred)]
            if not others:
                continue
            third = others[0]
            keeps = any(
                other != key and part.leader == leader and third in part.replicas
                for other, part in parts.items()
            )
            if keeps and (leader, preferred, third) not in rivals:
                rivals.append((leader, preferred, third))
        if not rivals:
            return
        a_id, b_id, f_id = rng.choice(rivals)
        keys = frozenset(
            key
            for key, part in parts.items()
            if part.leader == a_id and part.replicas[0] == b_id and f_id in part.replicas
        )
        a, b, f = sim.broker(a_id), sim.broker(b_id), sim.broker(f_id)
        delay_ms = rng.randint(200, SLOW_MAX_MS)
        bound_ms = rng.randint(100, delay_ms)
        for_ms = rng.randint(1000, 3000)
        now_s = asyncio.get_running_loop().time()
        network = sim.network
        network.slow_answers(a.name, b.name, delay_ms / 1000, now_s + for_ms / 1000)
        slowed = network.link(a.name, b.name)

        def rearm(trap: FreshLookingAnswer) -> None:
            # `Network.quiet` ends the slowing, so no trap is re-armed after the chaos.
            if slowed.answer_delay_until_s > asyncio.get_running_loop().time():
                network.trap_answer(a.name, f.name, trap)

        trap = FreshLookingAnswer(
            f, bound_ms / 1000, sim.note, keys=keys, after_move_s=1.5, released=rearm
        )
        network.trap_answer(a.name, f.name, trap)
        sim.note(
            f"slow-rival {sorted(keys)}: {a.name}'s answers to {b.name} {delay_ms} ms late for "
            f"{for_ms} ms, to {f.name} held up to {bound_ms} ms"
        )

    def _leaders(self) -> list[SimBroker]:
        """The brokers leading a partition, as the controller has them, in id order."""
        led = {
            registration.leader
            for registration in self.sim.engine.state.partitions.values()
            if registration.leader != NO_LEADER
        }
        return [self.sim.broker(broker_id) for broker_id in sorted(led)]

    def _side(self, work: Coroutine[Any, Any, None]) -> None:
        """A delayed nemesis step (restart, heal, resume), kept until it ran."""
        task = asyncio.ensure_future(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _crash(self, broker: SimBroker, *, power_loss: bool, wipe: bool) -> None:
        self.crashes += 1
        kind = "wipe" if wipe else "power loss" if power_loss else "crash"
        self.sim.note(f"{kind} {broker.name}")
        self.sim.history.nemesis(kind, broker=broker.broker_id)
        await broker.crash(wipe=wipe, lose_unsynced=power_loss)
        if power_loss:
            broker.new_boot()
            self.sim.committed_prefix.data_lost(broker.broker_id)

    async def _restart_later(self, broker: SimBroker, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        if not broker.alive:
            self.sim.note(f"restart {broker.name}")
            self.sim.start_broker(broker)

    async def _heal_later(self, source: str, target: str, delay_ms: int, both: bool) -> None:
        await asyncio.sleep(delay_ms / 1000)
        self.sim.network.set_cut(source, target, False)
        if both:
            self.sim.network.set_cut(target, source, False)
        self.sim.note(f"heal {source} {target}")

    async def _resume_later(self, broker: SimBroker, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        broker.resume()
        self.sim.note(f"resume {broker.name}")
