"""Deterministic simulation of the Raft core, in the spirit of Kafka's RaftEventSimulationTest.

One run = one seed. Everything random (cluster size, network quality, the fault schedule,
election jitter, message delays) comes from `random.Random(seed)`, and time is virtual, so a
seed replays exactly. A run has two phases:

1. Chaos (`chaos_ms`): a client proposes entries at whichever node believes it is the
   ready leader while the network drops, delays, duplicates and reorders messages, and a
   nemesis crashes nodes (losing unsynced writes: only what a completed persistence action
   made durable survives, sometimes plus a prefix of the rest), restarts them, wipes a data
   directory (the node restarts with a new, non-voting directory), partitions the cluster
   (also one-way) and heals it.
2. Liveness: a random majority of voters (enough of them allowed to vote) is restarted and
   connected by a lossless network, the rest stay down or cut off. Within `liveness_bound_ms`
   a leader must be elected and an entry proposed in this phase must be committed: applied
   on a majority of the voters (all of them in the connected group).

Checked after every event (`Violation` names the invariant):

- single leader: at most one node becomes leader in an epoch;
- committed data: every entry a node applies (or every snapshot it loads) equals the global
  record of what was committed at that offset (the first node to commit an offset defines
  it); so a committed entry is never lost or changed, and logs match up to the HW;
- the entry just below each node's HW is in its log and equals the global record;
- monotonic HW: a node's high watermark never goes back while it runs;
- liveness, as above.

`run_seed(seed)` returns the run's statistics or raises `Violation` whose message has the
seed, the parameters, the fault schedule and the last events, and says how to replay it
(`MINIKAFKA_RAFT_SEED=<seed>`).
"""

from __future__ import annotations

import heapq
import random
import struct
import zlib
from collections import deque

import msgspec

from controller.raft.actions import (
    PERSISTENCE_ACTIONS,
    Action,
    ApplyEntries,
    LoadSnapshot,
    Role,
    RoleChanged,
    Send,
)
from controller.raft.config import RaftConfig
from controller.raft.core import NotLeaderError, RaftInvariantError, RaftNode
from controller.raft.messages import Entry, Message, RaftError
from controller.raft.roles import IllegalTransition
from controller.raft.storage import InMemoryStorage, perform

CLUSTER_ID = "sim-cluster"
#: The client waits while this many entries are uncommitted at the leader (backpressure, as
#: the controller's bounded request queue).
CLIENT_IN_FLIGHT_MAX = 16
TRACE_EVENTS = 60

_DELIVER, _TICK, _SYNC, _PROPOSE, _FAULT, _RESTART, _HEAL, _LIVENESS = range(8)
_PERSISTENCE = frozenset(PERSISTENCE_ACTIONS)


class Violation(AssertionError):
    """An invariant failed; the message holds everything needed to understand and replay."""


class SimParams(msgspec.Struct, frozen=True, kw_only=True):
    voters: int
    chaos_ms: int
    liveness_bound_ms: int
    drop_rate: float
    duplicate_rate: float
    max_delay_ms: int
    sync_delay_max_ms: int
    fault_interval_ms: int
    propose_interval_ms: int
    snapshot_every: int
    keep_unsynced_rate: float
    wipes: bool
    fetch_max_entries: int


def params_for(seed: int) -> SimParams:
    """The run's parameters, drawn from the seed (so the seed alone replays the run)."""
    rng = random.Random(seed ^ 0x5EED)
    return SimParams(
        voters=rng.choice((3, 3, 5)),
        chaos_ms=rng.randrange(600, 1500),
        liveness_bound_ms=4000,
        drop_rate=rng.choice((0.0, 0.02, 0.05, 0.2)),
        duplicate_rate=rng.choice((0.0, 0.02, 0.1)),
        max_delay_ms=rng.choice((2, 10, 25)),
        sync_delay_max_ms=rng.choice((0, 2, 8)),
        fault_interval_ms=rng.choice((60, 120, 250)),
        propose_interval_ms=rng.choice((15, 40)),
        snapshot_every=rng.choice((4, 12, 40)),
        keep_unsynced_rate=rng.choice((0.0, 0.3)),
        wipes=rng.random() < 0.3,
        fetch_max_entries=rng.choice((1, 2, 16)),
    )


def sim_config(node_id: int, voters: tuple[int, ...], *, fetch_max_entries: int = 16) -> RaftConfig:
    return RaftConfig(
        node_id=node_id,
        voters=voters,
        cluster_id=CLUSTER_ID,
        election_timeout_ms=100,
        fetch_timeout_ms=200,
        check_quorum_timeout_ms=300,
        fetch_max_wait_ms=80,
        request_timeout_ms=150,
        retry_backoff_ms=20,
        begin_quorum_retry_ms=80,
        fetch_max_entries=fetch_max_entries,
        snapshot_chunk_bytes=48,
    )


class RunStats(msgspec.Struct, kw_only=True):
    seed: int
    events: int
    virtual_ms: int
    committed: int
    leaders: int
    crashes: int
    snapshots_installed: int
    liveness_ms: int


def _chain(previous: int, entry: Entry) -> int:
    """Running checksum of the committed log (deterministic, unlike hash())."""
    return zlib.crc32(
        entry.payload, zlib.crc32(struct.pack("<IB", entry.epoch, entry.kind), previous)
    )


class _Node:
    __slots__ = (
        "alive",
        "applied",
        "chain",
        "core",
        "directory",
        "hw",
        "incarnation",
        "issued_seq",
        "next_snapshot_at",
        "node_id",
        "storage",
        "sync_pending",
        "tick_at",
    )

    def __init__(self, node_id: int, storage: InMemoryStorage) -> None:
        self.node_id = node_id
        self.storage = storage
        self.directory = 0
        self.core: RaftNode | None = None
        self.alive = False
        self.incarnation = 0
        self.tick_at: int | None = None
        self.sync_pending = False
        self.issued_seq = 0
        self.hw = 0
        self.applied = 0  # state machine: next offset to apply
        self.chain = 0  # running checksum of the applied entries
        self.next_snapshot_at = 0


class Simulation:
    def __init__(
        self,
        seed: int,
        *,
        params: SimParams | None = None,
        node_class: type[RaftNode] = RaftNode,
    ) -> None:
        self.seed = seed
        self.node_class = node_class
        self.params = params or params_for(seed)
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[tuple[int, int, int, int, object]] = []
        self._order = 0
        self.voter_ids = tuple(range(1, self.params.voters + 1))
        self.majority = self.params.voters // 2 + 1
        self.nodes = {
            node_id: _Node(node_id, self._new_storage(node_id, 0, can_vote=True))
            for node_id in self.voter_ids
        }
        self.blocked: set[tuple[int, int]] = set()
        self.drop_rate = self.params.drop_rate
        self.duplicate_rate = self.params.duplicate_rate
        # Global records checked by the invariants.
        self.committed: list[Entry] = []
        self.chain_at: list[int] = [0]  # chain_at[o]: checksum of committed entries below o
        self.leader_of_epoch: dict[int, int] = {}
        # Bookkeeping for the report.
        self.events = 0
        self.crashes = 0
        self.installs = 0
        self.proposals = 0
        self.schedule: list[str] = []
        self.trace: deque[tuple[int, str, int, object]] = deque(maxlen=TRACE_EVENTS)
        # Liveness phase.
        self.liveness_started_ms: int | None = None
        self.liveness_group: tuple[int, ...] = ()
        self.liveness_probe: int | None = None  # first committed offset proposed in phase 2
        self.liveness_done_ms: int | None = None

    # ---- driving --------------------------------------------------------------------------

    def run(self) -> RunStats:
        try:
            self._run()
        except Violation:
            raise
        except (RaftInvariantError, IllegalTransition, AssertionError) as error:
            raise self._violation(f"{type(error).__name__}: {error}") from error
        return RunStats(
            seed=self.seed,
            events=self.events,
            virtual_ms=self.now,
            committed=len(self.committed),
            leaders=len(self.leader_of_epoch),
            crashes=self.crashes,
            snapshots_installed=self.installs,
            liveness_ms=(self.liveness_done_ms or 0) - (self.liveness_started_ms or 0),
        )

    def _run(self) -> None:
        for node in self.nodes.values():
            self._start(node)
        self._push(self.params.propose_interval_ms, _PROPOSE, 0, None)
        self._push(self.params.fault_interval_ms, _FAULT, 0, None)
        self._push(self.params.chaos_ms, _LIVENESS, 0, None)
        deadline = self.params.chaos_ms + self.params.liveness_bound_ms
        queue = self._queue
        while queue:
            time_ms, _, kind, target, payload = heapq.heappop(queue)
            if time_ms > deadline:
                break
            self.now = time_ms
            self.events += 1
            if kind == _DELIVER:
                self._deliver(target, payload)
            elif kind == _TICK:
                node = self.nodes[target]
                if node.alive and node.tick_at == time_ms and payload == node.incarnation:
                    node.tick_at = None
                    assert node.core is not None
                    self._perform(node, node.core.tick(time_ms))
            elif kind == _SYNC:
                self._sync(self.nodes[target], payload)
            elif kind == _PROPOSE:
                self._propose()
            elif kind == _FAULT:
                self._fault()
            elif kind == _RESTART:
                node = self.nodes[target]
                if not node.alive and payload == node.incarnation:
                    self._start(node)
            elif kind == _HEAL:
                if self.liveness_started_ms is None:
                    self.blocked.clear()
                    self.schedule.append(f"{time_ms:>6} heal network")
            else:
                self._begin_liveness()
            if self.liveness_done_ms is not None:
                return
        raise self._violation(
            f"liveness: no entry committed by group {list(self.liveness_group)} within "
            f"{self.params.liveness_bound_ms} ms of connecting it (probe offset "
            f"{self.liveness_probe}; roles {self._roles()})"
        )

    def _push(self, delay_ms: int, kind: int, target: int, payload: object) -> None:
        self._order += 1
        heapq.heappush(self._queue, (self.now + delay_ms, self._order, kind, target, payload))

    # ---- nodes ----------------------------------------------------------------------------

    def _new_storage(self, node_id: int, directory: int, *, can_vote: bool) -> InMemoryStorage:
        return InMemoryStorage(
            cluster_id=CLUSTER_ID, directory_id=f"dir-{node_id}-{directory}", can_vote=can_vote
        )

    def _start(self, node: _Node) -> None:
        node.incarnation += 1
        node.alive = True
        node.tick_at = None
        node.sync_pending = False
        node.issued_seq = 0
        state = node.storage.load()
        core = self.node_class(
            sim_config(
                node.node_id, self.voter_ids, fetch_max_entries=self.params.fetch_max_entries
            ),
            state,
            rng=random.Random(self.seed * 7919 + node.node_id * 104729 + node.incarnation),
        )
        node.core = core
        node.hw = core.high_watermark
        node.applied = state.log_start_offset
        node.chain = 0
        node.next_snapshot_at = node.applied + self.params.snapshot_every
        self._trace("start", node.node_id, f"incarnation {node.incarnation}")
        self._perform(node, core.start(self.now))

    def _crash(self, node: _Node, *, wipe: bool) -> None:
        storage = node.storage
        keep = 0
        if storage.unsynced_count and self.rng.random() < self.params.keep_unsynced_rate:
            keep = self.rng.randrange(storage.unsynced_count + 1)
        storage.crash(keep_unsynced=keep)
        node.alive = False
        node.core = None
        node.incarnation += 1
        self.crashes += 1
        if wipe:
            node.directory += 1
            node.storage = self._new_storage(node.node_id, node.directory, can_vote=False)
        what = "crash+wipe" if wipe else "crash"
        self.schedule.append(f"{self.now:>6} {what} node {node.node_id} (kept {keep} unsynced)")
        self._trace(what, node.node_id, None)

    def _perform(self, node: _Node, actions: list[Action]) -> None:
        """Carry out one core call's actions, then check the node's invariants."""
        core = node.core
        assert core is not None
        for action in actions:
            kind = type(action)
            if kind is Send:
                self._send(action.message)  # type: ignore[union-attr]
            elif kind in _PERSISTENCE:
                perform(node.storage, action)  # type: ignore[arg-type]
                node.issued_seq = action.seq  # type: ignore[union-attr]
                if not node.sync_pending:
                    node.sync_pending = True
                    delay = self.rng.randrange(self.params.sync_delay_max_ms + 1)
                    self._push(delay, _SYNC, node.node_id, node.incarnation)
            elif kind is ApplyEntries:
                self._apply(node, action)  # type: ignore[arg-type]
            elif kind is LoadSnapshot:
                self._load_snapshot(node, action)  # type: ignore[arg-type]
            elif kind is RoleChanged:
                assert isinstance(action, RoleChanged)
                self._trace("role", node.node_id, action)
                if action.role is Role.LEADER:
                    previous = self.leader_of_epoch.setdefault(action.epoch, node.node_id)
                    if previous != node.node_id:
                        raise self._violation(
                            f"single leader: nodes {previous} and {node.node_id} both lead "
                            f"epoch {action.epoch}"
                        )
            else:  # LeaderReady, Refused
                self._trace("note", node.node_id, action)
        # Invariants of this node after the step.
        hw = core.high_watermark
        if hw < node.hw:
            raise self._violation(f"monotonic HW: node {node.node_id} went from {node.hw} to {hw}")
        node.hw = hw
        log = core.log
        if hw > log.start_offset:
            if hw > len(self.committed):
                raise self._violation(
                    f"committed data: node {node.node_id} has HW {hw} beyond the "
                    f"{len(self.committed)} committed entries"
                )
            if log.entry(hw - 1) != self.committed[hw - 1]:
                raise self._violation(
                    f"logs match up to the HW: node {node.node_id} holds "
                    f"{log.entry(hw - 1)} at {hw - 1}, committed {self.committed[hw - 1]}"
                )
        deadline = core.deadline_ms()
        if deadline is not None:
            deadline = max(deadline, self.now + 1)
            if node.tick_at is None or node.tick_at <= self.now or deadline < node.tick_at:
                node.tick_at = deadline
                self._push(deadline - self.now, _TICK, node.node_id, node.incarnation)
        if node.applied >= node.next_snapshot_at and self.liveness_done_ms is None:
            node.next_snapshot_at = node.applied + self.params.snapshot_every
            data = struct.pack("<Q", node.chain) + bytes(self.rng.randrange(120))
            self._perform(node, core.create_snapshot(node.applied, data, self.now))

    def _sync(self, node: _Node, incarnation: object) -> None:
        if not node.alive or incarnation != node.incarnation:
            return
        node.sync_pending = False
        node.storage.sync()
        assert node.core is not None
        self._perform(node, node.core.persisted(node.issued_seq, self.now))

    # ---- state machine and the committed record -------------------------------------------

    def _apply(self, node: _Node, action: ApplyEntries) -> None:
        if action.base_offset != node.applied:
            raise self._violation(
                f"apply order: node {node.node_id} got entries at {action.base_offset}, "
                f"expected {node.applied}"
            )
        committed = self.committed
        chain = node.chain
        offset = action.base_offset
        for entry in action.entries:
            if offset < len(committed):
                if committed[offset] != entry:
                    raise self._violation(
                        f"committed data: node {node.node_id} applies {entry} at {offset}, "
                        f"but {committed[offset]} was committed there"
                    )
            else:
                committed.append(entry)
                self.chain_at.append(_chain(self.chain_at[-1], entry))
                if (
                    self.liveness_probe is None
                    and self.liveness_started_ms is not None
                    and entry.payload.startswith(b"L")
                ):
                    self.liveness_probe = offset
            chain = _chain(chain, entry)
            offset += 1
        node.chain = chain
        node.applied = offset
        self._check_liveness()

    def _load_snapshot(self, node: _Node, action: LoadSnapshot) -> None:
        snapshot = action.snapshot
        end = snapshot.end_offset
        if end > len(self.committed):
            raise self._violation(
                f"committed data: node {node.node_id} loads a snapshot at {end}, beyond the "
                f"{len(self.committed)} committed entries"
            )
        (chain,) = struct.unpack_from("<Q", snapshot.data)
        if chain != self.chain_at[end]:
            raise self._violation(
                f"committed data: node {node.node_id} loads a snapshot at {end} whose "
                f"content differs from the committed entries"
            )
        if snapshot.epoch != self.committed[end - 1].epoch:
            raise self._violation(f"snapshot epoch {snapshot.epoch} is not that of entry {end - 1}")
        node.chain = chain
        node.applied = end
        node.next_snapshot_at = end + self.params.snapshot_every
        self.installs += 1
        self._trace("load-snapshot", node.node_id, snapshot.snapshot_id)
        self._check_liveness()

    # ---- network --------------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        rng = self.rng
        if rng.random() < self.drop_rate:
            return
        max_delay = self.params.max_delay_ms
        self._push(1 + rng.randrange(max_delay), _DELIVER, message.destination, message)
        if rng.random() < self.duplicate_rate:
            self._push(1 + rng.randrange(max_delay * 2), _DELIVER, message.destination, message)

    def _deliver(self, destination: int, message: object) -> None:
        node = self.nodes[destination]
        assert isinstance(message, Message)
        if not node.alive or (message.source, destination) in self.blocked:
            return
        self._trace("deliver", destination, message)
        assert node.core is not None
        self._perform(node, node.core.receive(message, self.now))

    # ---- client ---------------------------------------------------------------------------

    def _propose(self) -> None:
        leaders = [
            node
            for node in self.nodes.values()
            if node.alive
            and node.core is not None
            and node.core.is_ready_leader
            and node.core.log.end_offset - node.core.high_watermark <= CLIENT_IN_FLIGHT_MAX
        ]
        if leaders:
            node = self.rng.choice(leaders)
            assert node.core is not None
            self.proposals += 1
            phase = b"L" if self.liveness_started_ms is not None else b"C"
            payloads = [
                phase + b"%d-%d" % (self.proposals, index)
                for index in range(self.rng.randrange(1, 4))
            ]
            try:
                _, actions = node.core.propose(payloads, self.now)
            except NotLeaderError:
                pass
            else:
                self._perform(node, actions)
        self._push(1 + self.rng.randrange(self.params.propose_interval_ms * 2), _PROPOSE, 0, None)

    # ---- nemesis --------------------------------------------------------------------------

    def _fault(self) -> None:
        if self.liveness_started_ms is not None:
            return
        rng = self.rng
        ids = self.voter_ids
        choice = rng.random()
        alive = [node for node in self.nodes.values() if node.alive]
        if choice < 0.25 and alive:
            leaders = [n for n in alive if n.core is not None and n.core.role is Role.LEADER]
            node = rng.choice(leaders or alive)
            wipe = self.params.wipes and rng.random() < 0.3 and self._may_wipe(node)
            self._crash(node, wipe=wipe)
            self._push(rng.randrange(20, 300), _RESTART, node.node_id, node.incarnation)
        elif choice < 0.45:
            side = set(rng.sample(ids, rng.randrange(1, len(ids) // 2 + 1)))
            self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
            self.schedule.append(f"{self.now:>6} partition {sorted(side)} | rest")
            self._push(rng.randrange(50, 600), _HEAL, 0, None)
        elif choice < 0.6:
            pairs = [(a, b) for a in ids for b in ids if a != b]
            cut = rng.sample(pairs, rng.randrange(1, len(ids) + 1))
            self.blocked |= set(cut)
            self.schedule.append(f"{self.now:>6} one-way cuts {sorted(cut)}")
            self._push(rng.randrange(50, 600), _HEAL, 0, None)
        elif choice < 0.7:
            self.blocked.clear()
            self.schedule.append(f"{self.now:>6} heal network")
        elif choice < 0.8 and alive:
            node = rng.choice(alive)
            self._perform_resign(node)
        self._push(rng.randrange(self.params.fault_interval_ms) + 1, _FAULT, 0, None)

    def _perform_resign(self, node: _Node) -> None:
        assert node.core is not None
        if node.core.role is Role.LEADER:
            self.schedule.append(f"{self.now:>6} graceful resign of node {node.node_id}")
            self._perform(node, node.core.resign(self.now))

    def _can_vote(self, node: _Node) -> bool:
        if node.alive and node.core is not None:
            return node.core.vote_state.can_vote
        return node.storage.load().vote.can_vote

    def _may_wipe(self, node: _Node) -> bool:
        """At most a minority of directories may be new at once (more is a lost quorum)."""
        others_new = sum(
            1 for other in self.nodes.values() if other is not node and not self._can_vote(other)
        )
        return others_new + 1 <= len(self.voter_ids) - self.majority

    def _begin_liveness(self) -> None:
        rng = self.rng
        self.liveness_started_ms = self.now
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        voting = [n for n in self.voter_ids if self._can_vote(self.nodes[n])]
        rng.shuffle(voting)
        group = set(voting[: self.majority])
        extra = rng.randrange(len(self.voter_ids) - self.majority + 1)
        rest = [n for n in self.voter_ids if n not in group]
        rng.shuffle(rest)
        group.update(rest[:extra])
        self.liveness_group = tuple(sorted(group))
        outside = [n for n in self.voter_ids if n not in group]
        self.blocked = {(a, b) for a in self.voter_ids for b in outside if a != b}
        self.blocked |= {(b, a) for a, b in self.blocked}
        for node_id in outside:
            node = self.nodes[node_id]
            if node.alive and rng.random() < 0.5:
                self._crash(node, wipe=False)
        for node_id in self.liveness_group:
            node = self.nodes[node_id]
            if not node.alive:
                self._start(node)
        self.schedule.append(
            f"{self.now:>6} liveness phase: connect {list(self.liveness_group)}, "
            f"cut off {outside}, lossless network"
        )

    def _check_liveness(self) -> None:
        probe = self.liveness_probe
        if probe is None or self.liveness_done_ms is not None:
            return
        applied = sum(1 for n in self.liveness_group if self.nodes[n].applied > probe)
        if applied >= self.majority:
            self.liveness_done_ms = self.now

    # ---- reporting ------------------------------------------------------------------------

    def _trace(self, what: str, node_id: int, detail: object) -> None:
        self.trace.append((self.now, what, node_id, detail))

    def _roles(self) -> str:
        return ", ".join(
            f"{n.node_id}:{n.core.role.value}@{n.core.epoch}"
            if n.core is not None
            else f"{n.node_id}:down"
            for n in self.nodes.values()
        )

    def _violation(self, what: str) -> Violation:
        lines = [
            f"Raft simulation seed {self.seed} failed at {self.now} ms: {what}",
            f"replay: MINIKAFKA_RAFT_SEED={self.seed} pytest tests/sim/raft -k replay -s",
            f"params: {self.params}",
            f"roles: {self._roles()}; committed entries: {len(self.committed)}",
            "fault schedule:",
            *(f"  {line}" for line in self.schedule),
            f"last {len(self.trace)} events:",
            *(f"  {t:>6} {what:<13} node {n}: {_short(d)}" for t, what, n, d in self.trace),
        ]
        return Violation("\n".join(lines))


def _short(detail: object) -> str:
    """One trace detail in a few words: messages as `Type src->dst field=value...` without
    the fields every message has, entries and chunks as counts."""
    if isinstance(detail, RoleChanged):
        leader = f" leader {detail.leader_id}" if detail.leader_id is not None else ""
        return f"{detail.role.value} in epoch {detail.epoch}{leader}"
    if isinstance(detail, Message):
        fields = msgspec.structs.asdict(detail)
        head = f"{type(detail).__name__} {fields.pop('source')}->{fields.pop('destination')}"
        fields.pop("cluster_id")
        fields.pop("correlation_id", None)
        if fields.get("error") == RaftError.NONE:
            fields.pop("error")
        parts = []
        for name, value in fields.items():
            if name in ("entries", "chunk"):
                value = len(value)
            if value is not None:
                parts.append(f"{name}={value}")
        return " ".join([head, *parts])
    text = repr(detail)
    return text if len(text) <= 160 else text[:157] + "..."


def run_seed(
    seed: int, *, params: SimParams | None = None, node_class: type[RaftNode] = RaftNode
) -> RunStats:
    return Simulation(seed, params=params, node_class=node_class).run()
