"""The Raft node: a deterministic state machine from events to actions (no I/O, no clock).

Events (each returns the list of actions to perform, in order; see `actions`):

- `start(now_ms)` once, after construction from the recovered `PersistentState`;
- `tick(now_ms)` whenever `deadline_ms()` has passed (or more often; it is idempotent);
- `receive(message, now_ms)` for every message from another node;
- `persisted(seq, now_ms)` when every persistence action up to `seq` is durable;
- `propose(payloads, now_ms)` on the ready leader: append state-machine records;
- `create_snapshot(end_offset, data, now_ms)` when the state machine has a snapshot of
  everything below `end_offset` (at most what was applied);
- `resign(now_ms)` on a graceful shutdown of the leader.

Rules live in `rules` (pure functions), role transitions in `roles`, the in-memory log in
`log`. What this class adds is the bookkeeping around them:

- Durability before dependence: every message is held back while a vote-state write it
  may depend on is in flight (a granted vote, a request in a new epoch); a follower fetches
  only when nothing is waiting to be persisted (its fetch offset is durable); the leader
  counts only its durable end towards the high watermark.
- Requests carry correlation ids; a node acts only on the answer to its latest request.
- The high watermark of a node never decreases while it runs (`RaftInvariantError` if a
  leader ever asks it to truncate below it); it restarts at the snapshot's end offset and
  is learnt again from the leader.
- A new leader serves (`LeaderReady`) only after its leader-change marker is committed,
  and after every earlier entry has been handed out with `ApplyEntries`.
"""

from __future__ import annotations

import random
from collections import deque
from typing import TypeVar

import msgspec

from controller.raft.actions import (
    Action,
    AppendEntries,
    ApplyEntries,
    InstallSnapshot,
    LeaderReady,
    LoadSnapshot,
    PersistVote,
    Refused,
    Role,
    RoleChanged,
    Send,
    TruncateLog,
    WriteSnapshot,
)
from controller.raft.config import RaftConfig
from controller.raft.log import RaftLog
from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    EndQuorumEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    RaftError,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    VoteState,
    leader_change_entry,
)
from controller.raft.roles import (
    Candidate,
    Follower,
    Leader,
    Prospective,
    Resigned,
    RoleState,
    Unattached,
    check_transition,
    role_of,
)
from controller.raft.rules import (
    ElectionOutcome,
    FetchPosition,
    PositionKind,
    check_quorum_deadline,
    election_outcome,
    follower_high_watermark,
    leader_high_watermark,
    pre_vote_decision,
    preferred_successors,
    truncation_point,
    validate_fetch_position,
    vote_decision,
)
from controller.raft.storage import PersistentState

#: Directory ids a leader remembers per voter as replaced (their delayed fetches are refused).
RETIRED_DIRECTORIES_MAX = 8


class RaftInvariantError(Exception):
    """The protocol's safety was violated (a bug, or storage that lost acknowledged data).
    The node must stop rather than go on with a log it cannot trust."""


class NotLeaderError(Exception):
    """`propose` on a node that is not the ready leader; names the leader if known."""

    def __init__(self, message: str, *, leader_id: int | None, epoch: int) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.epoch = epoch


class ReplicaStatus(msgspec.Struct, frozen=True, kw_only=True):
    node_id: int
    end_offset: int
    last_fetch_ms: int | None
    #: The last fetch that reached the leader's log end (Kafka's lastCaughtUpTimestamp).
    last_caught_up_ms: int | None = None


class QuorumStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What `metadata-quorum describe` and the metrics need from one node."""

    node_id: int
    role: Role
    epoch: int
    leader_id: int | None
    voted_for: int | None
    can_vote: bool
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    replicas: tuple[ReplicaStatus, ...]  # the leader's view of the voters; empty elsewhere


class _Replica:
    """The leader's view of one other voter in the current epoch."""

    __slots__ = ("directory_id", "end_offset", "last_caught_up_ms", "last_fetch_ms", "retired")

    def __init__(self) -> None:
        self.end_offset = 0
        self.last_fetch_ms: int | None = None
        self.last_caught_up_ms: int | None = None
        self.directory_id: str | None = None
        self.retired: deque[str] = deque(maxlen=RETIRED_DIRECTORIES_MAX)


class _Outstanding(msgspec.Struct, frozen=True):
    """The follower's latest request to its leader."""

    correlation_id: int
    fetch_offset: int
    sent_ms: int
    snapshot: bool


class _Download:
    __slots__ = ("chunks", "position", "snapshot_id")

    def __init__(self, snapshot_id: SnapshotId) -> None:
        self.snapshot_id = snapshot_id
        self.position = 0
        self.chunks: list[bytes] = []


class RaftNode:
    """One voter of the quorum. Not thread-safe: the shell calls it from one task."""

    def __init__(self, config: RaftConfig, state: PersistentState, *, rng: random.Random) -> None:
        if state.cluster_id != config.cluster_id:
            raise ValueError(
                f"storage belongs to cluster {state.cluster_id!r}, not {config.cluster_id!r}"
            )
        self._config = config
        self._id = config.node_id
        self._voters = config.voters
        self._others = tuple(voter for voter in config.voters if voter != config.node_id)
        self._directory_id = state.directory_id
        self._rng = rng
        snapshot = state.snapshot
        self._log = RaftLog(
            start_offset=state.log_start_offset,
            start_epoch=snapshot.epoch if snapshot is not None else 0,
            entries=state.entries,
        )
        self._snapshot = snapshot
        self._vote = state.vote
        # Persistence bookkeeping: actions get seq numbers; `persisted` reports durability.
        self._next_seq = 1
        self._durable_seq = 0
        self._vote_seq = 0  # seq of the latest vote-state write
        self._durable_end = self._log.end_offset  # durable prefix equal to the in-memory log
        self._pending_ends: deque[tuple[int, int]] = deque()
        self._held: deque[tuple[int, Message]] = deque()
        self._hw = self._log.start_offset
        self._applied = self._log.start_offset
        # Request correlation: unique across restarts (the rng is the caller's).
        self._next_correlation_id = rng.randrange(1 << 40) << 20
        # Follower state.
        self._fetch_jitter_ms = 0
        self._outstanding: _Outstanding | None = None
        self._download: _Download | None = None
        self._fetch_not_before_ms = 0
        # Last time the current leader answered us (None: not heard in this epoch/run). A
        # follower that only *waits* for its leader must not reject pre-votes.
        self._leader_contact_ms: int | None = None
        # Leader state.
        self._replicas: dict[int, _Replica] = {}
        self._parked: dict[int, tuple[FetchRequest, int]] = {}
        self._quorum_deadline_ms = 0
        self._begin_deadline_ms = 0
        self._role: RoleState = Unattached(epoch=self._vote.epoch, election_deadline_ms=None)
        self._out: list[Action] = []
        self._started = False

    # ---- queries ------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._id

    @property
    def role(self) -> Role:
        return role_of(self._role)

    @property
    def epoch(self) -> int:
        return self._vote.epoch

    @property
    def leader_id(self) -> int | None:
        if isinstance(self._role, Leader):
            return self._id
        if isinstance(self._role, Follower):
            return self._role.leader_id
        return None

    @property
    def is_ready_leader(self) -> bool:
        return isinstance(self._role, Leader) and self._role.ready

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log(self) -> RaftLog:
        """Read-only use: the shell and the tests may look, never change."""
        return self._log

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    @property
    def vote_state(self) -> VoteState:
        return self._vote

    def status(self) -> QuorumStatus:
        replicas: tuple[ReplicaStatus, ...] = ()
        if isinstance(self._role, Leader):
            replicas = tuple(
                ReplicaStatus(node_id=self._id, end_offset=self._durable_end, last_fetch_ms=None)
                if voter == self._id
                else ReplicaStatus(
                    node_id=voter,
                    end_offset=self._replicas[voter].end_offset,
                    last_fetch_ms=self._replicas[voter].last_fetch_ms,
                    last_caught_up_ms=self._replicas[voter].last_caught_up_ms,
                )
                for voter in self._voters
            )
        return QuorumStatus(
            node_id=self._id,
            role=self.role,
            epoch=self.epoch,
            leader_id=self.leader_id,
            voted_for=self._vote.voted_for,
            can_vote=self._vote.can_vote,
            high_watermark=self._hw,
            log_start_offset=self._log.start_offset,
            log_end_offset=self._log.end_offset,
            replicas=replicas,
        )

    def deadline_ms(self) -> int | None:
        """The earliest time at which `tick` has something to do (None: only on an event)."""
        role = self._role
        deadlines: list[int] = []
        if isinstance(role, Unattached):
            if role.election_deadline_ms is not None:
                deadlines.append(role.election_deadline_ms)
        elif isinstance(role, Prospective | Candidate | Resigned):
            deadlines.append(role.deadline_ms)
        elif isinstance(role, Follower):
            deadlines.append(role.fetch_deadline_ms)
            if self._outstanding is not None:
                deadlines.append(self._outstanding.sent_ms + self._config.request_timeout_ms)
            elif self._fetch_not_before_ms and not self._persistence_pending():
                deadlines.append(self._fetch_not_before_ms)
        else:
            deadlines.append(self._quorum_deadline_ms)
            fetch_timeout = self._config.fetch_timeout_ms
            stale_at = [
                0 if replica.last_fetch_ms is None else replica.last_fetch_ms + fetch_timeout
                for replica in self._replicas.values()
            ]
            if stale_at:
                deadlines.append(max(self._begin_deadline_ms, min(stale_at)))
            deadlines.extend(deadline for _, deadline in self._parked.values())
        return min(deadlines) if deadlines else None

    # ---- events -------------------------------------------------------------------------

    def start(self, now_ms: int) -> list[Action]:
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True
        self._out = []
        if self._snapshot is not None:
            self._out.append(LoadSnapshot(snapshot=self._snapshot))
        vote = self._vote
        if vote.epoch < self._log.last_epoch:
            # Cannot happen with a storage that keeps its write order; recover anyway.
            vote = VoteState(epoch=self._log.last_epoch, can_vote=vote.can_vote)
            self._set_vote(vote)
        if vote.leader_id == self._id:
            # It led this epoch: never again (its unflushed entries may be lost).
            deadline_ms = self._random_deadline(now_ms)
            initial: RoleState = Resigned(epoch=vote.epoch, deadline_ms=deadline_ms)
        elif vote.leader_id is not None and vote.leader_id in self._voters:
            self._fetch_jitter_ms = self._jitter()
            initial = Follower(
                epoch=vote.epoch,
                leader_id=vote.leader_id,
                fetch_deadline_ms=self._fetch_deadline(now_ms),
            )
        else:
            initial = Unattached(
                epoch=vote.epoch, election_deadline_ms=self._stand_deadline(now_ms)
            )
        self._role = initial
        self._out.append(
            RoleChanged(role=role_of(initial), epoch=initial.epoch, leader_id=self.leader_id)
        )
        if isinstance(initial, Follower):
            self._maybe_fetch(now_ms)
        return self._take()

    def tick(self, now_ms: int) -> list[Action]:
        self._begin()
        role = self._role
        if isinstance(role, Unattached):
            deadline = role.election_deadline_ms
            if deadline is not None and now_ms >= deadline:
                self._become_prospective(now_ms)
        elif isinstance(role, Prospective):
            if now_ms >= role.deadline_ms:
                self._lose_pre_vote(now_ms)
        elif isinstance(role, Candidate):
            if now_ms >= role.deadline_ms:
                self._become_prospective(now_ms)
        elif isinstance(role, Follower):
            if now_ms >= role.fetch_deadline_ms:
                if self._can_stand():
                    self._become_prospective(now_ms)
                else:
                    # A node that may not vote keeps following; a new leader finds it.
                    self._role = msgspec.structs.replace(
                        role, fetch_deadline_ms=self._fetch_deadline(now_ms)
                    )
                    self._maybe_fetch(now_ms)
            else:
                self._maybe_fetch(now_ms)
        elif isinstance(role, Resigned):
            if now_ms >= role.deadline_ms:
                if self._can_stand():
                    self._become_prospective(now_ms)
                else:
                    self._become_unattached(role.epoch, now_ms)
        else:
            self._leader_tick(role, now_ms)
        return self._take()

    def persisted(self, seq: int, now_ms: int) -> list[Action]:
        self._begin()
        if not self._durable_seq <= seq < self._next_seq:
            raise ValueError(
                f"persisted({seq}) outside the issued range ({self._durable_seq}, "
                f"{self._next_seq - 1}]"
            )
        self._durable_seq = seq
        pending = self._pending_ends
        while pending and pending[0][0] <= seq:
            self._durable_end = pending.popleft()[1]
        held = self._held
        while held and held[0][0] <= seq:
            self._out.append(Send(held.popleft()[1]))
        role = self._role
        if isinstance(role, Leader):
            self._update_leader_hw(role, now_ms)
        elif isinstance(role, Follower):
            self._maybe_fetch(now_ms)
        return self._take()

    def propose(self, payloads: list[bytes], now_ms: int) -> tuple[int, list[Action]]:
        """Append records as the ready leader; returns the offset of the first one."""
        role = self._role
        if not isinstance(role, Leader) or not role.ready:
            raise NotLeaderError(
                f"node {self._id} is not the ready leader ({self.role.value}, epoch {self.epoch})",
                leader_id=self.leader_id if not isinstance(role, Leader) else None,
                epoch=self.epoch,
            )
        self._begin()
        base_offset = self._log.end_offset
        if payloads:
            self._append(tuple(Entry(role.epoch, payload) for payload in payloads))
            self._answer_parked(now_ms)
        return base_offset, self._take()

    def create_snapshot(self, end_offset: int, data: bytes, now_ms: int) -> list[Action]:
        """Take the state machine's snapshot of every entry below `end_offset` and drop those
        entries from the log."""
        current = self._snapshot.end_offset if self._snapshot is not None else 0
        if end_offset <= current:
            raise ValueError(f"snapshot at {end_offset} is not after the current one ({current})")
        if end_offset > self._applied:
            raise ValueError(
                f"snapshot at {end_offset} covers entries not yet applied (applied up to "
                f"{self._applied})"
            )
        self._begin()
        snapshot = Snapshot(
            end_offset=end_offset, epoch=self._log.epoch_at(end_offset - 1), data=data
        )
        self._log.drop_prefix(snapshot)
        self._snapshot = snapshot
        seq = self._issue_seq()
        self._out.append(WriteSnapshot(seq=seq, snapshot=snapshot))
        self._pending_ends.append((seq, self._log.end_offset))
        return self._take()

    def resign(self, now_ms: int) -> list[Action]:
        """Graceful resign of the leader (before a shutdown); a no-op elsewhere."""
        self._begin()
        if isinstance(self._role, Leader):
            self._resign(self._role, now_ms)
        return self._take()

    def receive(self, message: Message, now_ms: int) -> list[Action]:
        self._begin()
        if message.cluster_id != self._config.cluster_id:
            self._refuse_foreign(message)
            return self._take()
        if message.destination != self._id or message.source not in self._others:
            self._out.append(
                Refused(
                    source=message.source,
                    reason=f"message for node {message.destination} from node "
                    f"{message.source}, not a peer of voter {self._id}",
                )
            )
            return self._take()
        if message.epoch > self._vote.epoch and not (
            isinstance(message, VoteRequest) and message.pre_vote
        ):
            self._observe_epoch(message.epoch, _leader_hint(message), now_ms)
        if isinstance(message, FetchRequest):
            self._on_fetch(message, now_ms)
        elif isinstance(message, FetchResponse):
            self._on_fetch_response(message, now_ms)
        elif isinstance(message, VoteRequest):
            self._on_vote_request(message, now_ms)
        elif isinstance(message, VoteResponse):
            self._on_vote_response(message, now_ms)
        elif isinstance(message, BeginQuorumEpoch):
            self._on_begin_epoch(message, now_ms)
        elif isinstance(message, BeginQuorumEpochResponse):
            pass  # any news was its epoch, observed above
        elif isinstance(message, EndQuorumEpoch):
            self._on_end_epoch(message, now_ms)
        elif isinstance(message, FetchSnapshotRequest):
            self._on_fetch_snapshot(message, now_ms)
        else:
            self._on_fetch_snapshot_response(message, now_ms)
        return self._take()

    # ---- elections ----------------------------------------------------------------------

    def _can_stand(self) -> bool:
        return self._vote.can_vote

    def _observe_epoch(self, epoch: int, leader_id: int | None, now_ms: int) -> None:
        if leader_id is not None and leader_id != self._id and leader_id in self._voters:
            self._become_follower(epoch, leader_id, now_ms)
        else:
            self._become_unattached(epoch, now_ms)

    def _on_vote_request(self, request: VoteRequest, now_ms: int) -> None:
        log = self._log
        if request.pre_vote:
            decision = pre_vote_decision(
                request_epoch=request.epoch,
                candidate_last_epoch=request.last_epoch,
                candidate_end_offset=request.end_offset,
                current_epoch=self._vote.epoch,
                # A pre-vote from the leader we follow: it restarted or resigned, and
                # protecting it from itself would only cost an election round.
                leader_recently_seen=self._leader_recently_seen(now_ms)
                and request.source != self.leader_id,
                can_vote=self._vote.can_vote,
                last_epoch=log.last_epoch,
                end_offset=log.end_offset,
            )
        else:
            decision = vote_decision(
                candidate_id=request.source,
                request_epoch=request.epoch,
                candidate_last_epoch=request.last_epoch,
                candidate_end_offset=request.end_offset,
                current_epoch=self._vote.epoch,
                voted_for=self._vote.voted_for,
                leader_id=self._vote.leader_id,
                can_vote=self._vote.can_vote,
                last_epoch=log.last_epoch,
                end_offset=log.end_offset,
            )
            if decision.granted and self._vote.voted_for != request.source:
                epoch = self._vote.epoch
                self._set_vote(msgspec.structs.replace(self._vote, voted_for=request.source))
                self._transition(
                    Unattached(epoch=epoch, election_deadline_ms=self._random_deadline(now_ms))
                )
        self._send(
            VoteResponse(
                cluster_id=self._config.cluster_id,
                source=self._id,
                destination=request.source,
                correlation_id=request.correlation_id,
                epoch=self._vote.epoch,
                leader_id=self.leader_id,
                granted=decision.granted,
                pre_vote=request.pre_vote,
            )
        )

    def _on_vote_response(self, response: VoteResponse, now_ms: int) -> None:
        role = self._role
        if response.pre_vote:
            if not isinstance(role, Prospective) or response.correlation_id != role.round_id:
                return
            role = _count_vote(role, response)
            self._role = role
            outcome = election_outcome(
                voter_count=len(self._voters),
                granted=len(role.granted),
                rejected=len(role.rejected),
            )
            if outcome is ElectionOutcome.WON:
                self._become_candidate(now_ms)
            elif outcome is ElectionOutcome.LOST:
                self._lose_pre_vote(now_ms)
            return
        if (
            not isinstance(role, Candidate)
            or response.correlation_id != role.round_id
            or response.epoch != role.epoch
        ):
            return
        role = _count_vote(role, response)
        self._role = role
        outcome = election_outcome(
            voter_count=len(self._voters), granted=len(role.granted), rejected=len(role.rejected)
        )
        if outcome is ElectionOutcome.WON:
            self._become_leader(role, now_ms)

    def _become_prospective(self, now_ms: int) -> None:
        epoch = self._vote.epoch
        last_leader = self._vote.leader_id if self._vote.leader_id != self._id else None
        round_id = self._new_correlation_id()
        role = Prospective(
            epoch=epoch,
            round_id=round_id,
            last_leader_id=last_leader,
            granted=frozenset((self._id,)),
            rejected=frozenset(),
            deadline_ms=self._random_deadline(now_ms),
        )
        self._transition(role)
        log = self._log
        for voter in self._others:
            self._send(
                VoteRequest(
                    cluster_id=self._config.cluster_id,
                    source=self._id,
                    destination=voter,
                    correlation_id=round_id,
                    epoch=epoch + 1,
                    last_epoch=log.last_epoch,
                    end_offset=log.end_offset,
                    pre_vote=True,
                )
            )
        if election_outcome(voter_count=len(self._voters), granted=1, rejected=0) is (
            ElectionOutcome.WON
        ):
            self._become_candidate(now_ms)

    def _lose_pre_vote(self, now_ms: int) -> None:
        role = self._role
        assert isinstance(role, Prospective)
        if role.last_leader_id is not None:
            self._become_follower(role.epoch, role.last_leader_id, now_ms)
        else:
            self._become_unattached(role.epoch, now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        epoch = self._vote.epoch + 1
        self._set_vote(VoteState(epoch=epoch, voted_for=self._id, can_vote=self._vote.can_vote))
        round_id = self._new_correlation_id()
        role = Candidate(
            epoch=epoch,
            round_id=round_id,
            granted=frozenset((self._id,)),
            rejected=frozenset(),
            deadline_ms=self._random_deadline(now_ms),
        )
        self._transition(role)
        log = self._log
        for voter in self._others:
            self._send(
                VoteRequest(
                    cluster_id=self._config.cluster_id,
                    source=self._id,
                    destination=voter,
                    correlation_id=round_id,
                    epoch=epoch,
                    last_epoch=log.last_epoch,
                    end_offset=log.end_offset,
                    pre_vote=False,
                )
            )
        if election_outcome(voter_count=len(self._voters), granted=1, rejected=0) is (
            ElectionOutcome.WON
        ):
            self._become_leader(role, now_ms)

    def _become_leader(self, candidate: Candidate, now_ms: int) -> None:
        epoch = candidate.epoch
        self._set_vote(
            VoteState(
                epoch=epoch, voted_for=self._id, leader_id=self._id, can_vote=self._vote.can_vote
            )
        )
        role = Leader(epoch=epoch, epoch_start_offset=self._log.end_offset, ready=False)
        self._transition(role)
        self._replicas = {voter: _Replica() for voter in self._others}
        self._parked = {}
        self._quorum_deadline_ms = now_ms + self._config.check_quorum_timeout_ms
        self._begin_deadline_ms = now_ms + self._config.begin_quorum_retry_ms
        self._append((leader_change_entry(epoch, self._id, self._voters),))
        for voter in self._others:
            self._send_begin_epoch(voter)
        self._update_leader_hw(role, now_ms)

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        if (epoch, leader_id) != (self._vote.epoch, self._vote.leader_id):
            self._leader_contact_ms = None
        self._fetch_jitter_ms = self._jitter()
        voted_for = self._vote.voted_for if epoch == self._vote.epoch else None
        self._set_vote(
            VoteState(
                epoch=epoch, voted_for=voted_for, leader_id=leader_id, can_vote=self._vote.can_vote
            )
        )
        self._transition(
            Follower(
                epoch=epoch,
                leader_id=leader_id,
                fetch_deadline_ms=self._fetch_deadline(now_ms),
            )
        )
        self._fetch_not_before_ms = 0
        self._maybe_fetch(now_ms)

    def _become_unattached(
        self, epoch: int, now_ms: int, *, deadline_ms: int | None = None
    ) -> None:
        if epoch > self._vote.epoch:
            self._set_vote(VoteState(epoch=epoch, can_vote=self._vote.can_vote))
        if deadline_ms is None:
            deadline_ms = self._stand_deadline(now_ms)
        self._transition(Unattached(epoch=epoch, election_deadline_ms=deadline_ms))

    def _resign(self, role: Leader, now_ms: int) -> None:
        ends = {voter: replica.end_offset for voter, replica in self._replicas.items()}
        successors = preferred_successors(ends, leader_id=self._id)
        self._transition(Resigned(epoch=role.epoch, deadline_ms=self._random_deadline(now_ms)))
        for voter in self._others:
            self._send(
                EndQuorumEpoch(
                    cluster_id=self._config.cluster_id,
                    source=self._id,
                    destination=voter,
                    epoch=role.epoch,
                    preferred_successors=successors,
                )
            )

    def _on_begin_epoch(self, message: BeginQuorumEpoch, now_ms: int) -> None:
        role = self._role
        if message.epoch < role.epoch:
            self._send(
                BeginQuorumEpochResponse(
                    cluster_id=self._config.cluster_id,
                    source=self._id,
                    destination=message.source,
                    epoch=role.epoch,
                    leader_id=self.leader_id,
                )
            )
            return
        known = self._vote.leader_id
        if known is not None and known != message.source:
            raise RaftInvariantError(
                f"node {self._id}: two leaders in epoch {role.epoch}: {known} and {message.source}"
            )
        if not isinstance(role, Follower):
            self._become_follower(message.epoch, message.source, now_ms)
        self._leader_contact_ms = now_ms

    def _on_end_epoch(self, message: EndQuorumEpoch, now_ms: int) -> None:
        role = self._role
        if not (
            isinstance(role, Follower)
            and role.epoch == message.epoch
            and role.leader_id == message.source
        ):
            return
        if self._id in message.preferred_successors:
            position = message.preferred_successors.index(self._id)
        else:
            position = len(message.preferred_successors)
        deadline = None
        if self._can_stand():
            deadline = now_ms + position * self._config.election_timeout_ms // 2
        self._become_unattached(role.epoch, now_ms, deadline_ms=deadline)

    def _leader_recently_seen(self, now_ms: int) -> bool:
        """Leader, or a follower whose leader answered within the fetch timeout."""
        role = self._role
        if isinstance(role, Leader):
            return True
        contact = self._leader_contact_ms
        return (
            isinstance(role, Follower)
            and contact is not None
            and now_ms - contact < self._config.fetch_timeout_ms
        )

    # ---- leader: replication ------------------------------------------------------------

    def _on_fetch(self, request: FetchRequest, now_ms: int) -> None:
        role = self._role
        if not isinstance(role, Leader):
            self._answer_fetch_error(request, RaftError.NOT_LEADER_OR_FOLLOWER)
            return
        if request.epoch < role.epoch:
            self._answer_fetch_error(request, RaftError.FENCED_LEADER_EPOCH)
            return
        replica = self._replicas[request.source]
        if request.directory_id != replica.directory_id:
            if request.directory_id in replica.retired:
                self._out.append(
                    Refused(
                        source=request.source,
                        reason=f"fetch from replaced directory {request.directory_id}",
                    )
                )
                return
            if replica.directory_id is not None:
                replica.retired.append(replica.directory_id)
            replica.directory_id = request.directory_id
            replica.end_offset = 0
        log = self._log
        position = validate_fetch_position(
            epochs=log.epochs,
            log_start_offset=log.start_offset,
            log_end_offset=log.end_offset,
            fetch_offset=request.fetch_offset,
            last_fetched_epoch=request.last_fetched_epoch,
        )
        replica.last_fetch_ms = now_ms
        self._parked.pop(request.source, None)
        if position.kind is PositionKind.SNAPSHOT:
            assert self._snapshot is not None
            self._send(self._fetch_response(request, role, snapshot_id=self._snapshot.snapshot_id))
            return
        if position.kind is PositionKind.DIVERGING:
            self._send(self._fetch_response(request, role, diverging=position))
            return
        replica.end_offset = request.fetch_offset
        if request.fetch_offset >= log.end_offset:
            replica.last_caught_up_ms = now_ms
        self._update_leader_hw(role, now_ms)
        role = self._role
        assert isinstance(role, Leader)
        advertised = self._hw if role.ready else None
        if request.fetch_offset < log.end_offset or (
            advertised is not None
            and (request.high_watermark is None or request.high_watermark < advertised)
        ):
            self._send(self._fetch_response(request, role))
        else:
            self._parked[request.source] = (request, now_ms + self._config.fetch_max_wait_ms)

    def _fetch_response(
        self,
        request: FetchRequest,
        role: Leader,
        *,
        snapshot_id: SnapshotId | None = None,
        diverging: FetchPosition | None = None,
    ) -> FetchResponse:
        log = self._log
        entries: tuple[Entry, ...] = ()
        diverging_epoch = None
        if diverging is not None:
            diverging_epoch = diverging.diverging
        elif snapshot_id is None:
            entries = log.read(
                request.fetch_offset,
                max_entries=self._config.fetch_max_entries,
                max_bytes=self._config.fetch_max_bytes,
            )
        return FetchResponse(
            cluster_id=self._config.cluster_id,
            source=self._id,
            destination=request.source,
            correlation_id=request.correlation_id,
            epoch=role.epoch,
            leader_id=self._id,
            error=RaftError.NONE,
            fetch_offset=request.fetch_offset,
            entries=entries,
            high_watermark=self._hw if role.ready else None,
            log_start_offset=log.start_offset,
            diverging=diverging_epoch,
            snapshot_id=snapshot_id,
        )

    def _answer_fetch_error(self, request: FetchRequest, error: RaftError) -> None:
        self._send(
            FetchResponse(
                cluster_id=self._config.cluster_id,
                source=self._id,
                destination=request.source,
                correlation_id=request.correlation_id,
                epoch=self._vote.epoch,
                leader_id=self.leader_id,
                error=error,
                fetch_offset=request.fetch_offset,
            )
        )

    def _answer_parked(self, now_ms: int) -> None:
        role = self._role
        if not isinstance(role, Leader) or not self._parked:
            return
        parked, self._parked = self._parked, {}
        for request, _ in parked.values():
            self._send(self._fetch_response(request, role))

    def _update_leader_hw(self, role: Leader, now_ms: int) -> None:
        ends = [
            self._durable_end if voter == self._id else self._replicas[voter].end_offset
            for voter in self._voters
        ]
        new_hw = leader_high_watermark(
            voter_end_offsets=ends, epoch_start_offset=role.epoch_start_offset, current=self._hw
        )
        if new_hw is None or new_hw <= self._hw:
            return
        self._hw = new_hw
        self._apply_committed()
        if not role.ready:
            role = msgspec.structs.replace(role, ready=True)
            self._role = role
            self._out.append(LeaderReady(epoch=role.epoch, high_watermark=new_hw))
        self._answer_parked(now_ms)

    def _leader_tick(self, role: Leader, now_ms: int) -> None:
        if self._parked:
            expired = [voter for voter, (_, due) in self._parked.items() if now_ms >= due]
            for voter in expired:
                request, _ = self._parked.pop(voter)
                self._send(self._fetch_response(request, role))
        if now_ms >= self._begin_deadline_ms:
            self._begin_deadline_ms = now_ms + self._config.begin_quorum_retry_ms
            for voter, replica in self._replicas.items():
                # Not fetched in this epoch, or not for a fetch timeout: it may not know who
                # leads (a restarted or wiped voter that may not stand waits to be told).
                if (
                    replica.last_fetch_ms is None
                    or now_ms - replica.last_fetch_ms >= self._config.fetch_timeout_ms
                ):
                    self._send_begin_epoch(voter)
        if now_ms >= self._quorum_deadline_ms:
            deadline = check_quorum_deadline(
                follower_fetch_ms=[replica.last_fetch_ms for replica in self._replicas.values()],
                voter_count=len(self._voters),
                now_ms=now_ms,
                timeout_ms=self._config.check_quorum_timeout_ms,
            )
            if deadline is None:
                self._resign(role, now_ms)
            else:
                self._quorum_deadline_ms = deadline

    def _send_begin_epoch(self, voter: int) -> None:
        self._send(
            BeginQuorumEpoch(
                cluster_id=self._config.cluster_id,
                source=self._id,
                destination=voter,
                epoch=self._vote.epoch,
            )
        )

    def _on_fetch_snapshot(self, request: FetchSnapshotRequest, now_ms: int) -> None:
        role = self._role
        error = RaftError.NONE
        chunk = b""
        size_bytes = 0
        snapshot = self._snapshot
        if not isinstance(role, Leader):
            error = RaftError.NOT_LEADER_OR_FOLLOWER
        elif request.epoch < role.epoch:
            error = RaftError.FENCED_LEADER_EPOCH
        elif snapshot is None or snapshot.snapshot_id != request.snapshot_id:
            error = RaftError.SNAPSHOT_NOT_FOUND
        elif not 0 <= request.position <= len(snapshot.data):
            error = RaftError.POSITION_OUT_OF_RANGE
        else:
            self._replicas[request.source].last_fetch_ms = now_ms
            end = request.position + self._config.snapshot_chunk_bytes
            chunk = snapshot.data[request.position : end]
            size_bytes = len(snapshot.data)
        self._send(
            FetchSnapshotResponse(
                cluster_id=self._config.cluster_id,
                source=self._id,
                destination=request.source,
                correlation_id=request.correlation_id,
                epoch=self._vote.epoch,
                leader_id=self.leader_id,
                error=error,
                snapshot_id=request.snapshot_id,
                position=request.position,
                chunk=chunk,
                size_bytes=size_bytes,
            )
        )

    # ---- follower: replication ----------------------------------------------------------

    def _maybe_fetch(self, now_ms: int) -> None:
        role = self._role
        if not isinstance(role, Follower) or self._persistence_pending():
            return
        outstanding = self._outstanding
        if outstanding is not None:
            if now_ms - outstanding.sent_ms < self._config.request_timeout_ms:
                return
            self._outstanding = None  # lost: ask again
        if now_ms < self._fetch_not_before_ms:
            return
        correlation_id = self._new_correlation_id()
        download = self._download
        if download is not None:
            self._outstanding = _Outstanding(correlation_id, -1, now_ms, True)
            self._send(
                FetchSnapshotRequest(
                    cluster_id=self._config.cluster_id,
                    source=self._id,
                    destination=role.leader_id,
                    correlation_id=correlation_id,
                    epoch=role.epoch,
                    snapshot_id=download.snapshot_id,
                    position=download.position,
                )
            )
            return
        log = self._log
        self._outstanding = _Outstanding(correlation_id, log.end_offset, now_ms, False)
        self._send(
            FetchRequest(
                cluster_id=self._config.cluster_id,
                source=self._id,
                destination=role.leader_id,
                correlation_id=correlation_id,
                epoch=role.epoch,
                fetch_offset=log.end_offset,
                last_fetched_epoch=log.last_epoch,
                high_watermark=self._hw,
                directory_id=self._directory_id,
            )
        )

    def _accept_response(
        self, response: FetchResponse | FetchSnapshotResponse, *, snapshot: bool
    ) -> Follower | None:
        """The follower role if `response` answers its latest request, else None."""
        role = self._role
        outstanding = self._outstanding
        if (
            not isinstance(role, Follower)
            or response.source != role.leader_id
            or outstanding is None
            or outstanding.correlation_id != response.correlation_id
            or outstanding.snapshot != snapshot
            or response.epoch != role.epoch
        ):
            return None
        self._outstanding = None
        return role

    def _on_fetch_response(self, response: FetchResponse, now_ms: int) -> None:
        role = self._accept_response(response, snapshot=False)
        if role is None:
            return
        if response.error is not RaftError.NONE:
            self._fetch_not_before_ms = now_ms + self._config.retry_backoff_ms
            return
        log = self._log
        if response.fetch_offset != log.end_offset:
            raise RaftInvariantError(
                f"node {self._id}: log end moved from {response.fetch_offset} to "
                f"{log.end_offset} during a fetch"
            )
        self._role = msgspec.structs.replace(role, fetch_deadline_ms=self._fetch_deadline(now_ms))
        self._leader_contact_ms = now_ms
        if response.diverging is not None:
            point = truncation_point(
                epochs=log.epochs, log_end_offset=log.end_offset, diverging=response.diverging
            )
            if point.offset < self._hw:
                raise RaftInvariantError(
                    f"node {self._id}: leader {response.source} (epoch {response.epoch}) asks "
                    f"to truncate to {point.offset}, below the high watermark {self._hw}"
                )
            self._truncate(point.offset)
        elif response.snapshot_id is not None:
            # Our log (its uncommitted tail may even reach past the snapshot) cannot be
            # checked against the leader's: replace it by the snapshot. Committed entries
            # are never replaced: a snapshot is always beyond our high watermark.
            if response.snapshot_id.end_offset <= self._hw:
                raise RaftInvariantError(
                    f"node {self._id}: told to load snapshot {response.snapshot_id}, not beyond "
                    f"the high watermark {self._hw}"
                )
            self._download = _Download(response.snapshot_id)
        else:
            if response.entries:
                self._append(response.entries)
            self._hw_from_leader(response.high_watermark)
        self._maybe_fetch(now_ms)

    def _hw_from_leader(self, leader_hw: int | None) -> None:
        new_hw = follower_high_watermark(
            leader_high_watermark=leader_hw, log_end_offset=self._log.end_offset, current=self._hw
        )
        if new_hw > self._hw:
            self._hw = new_hw
            self._apply_committed()
        if not self._vote.can_vote and leader_hw is not None and self._log.end_offset >= leader_hw:
            # Caught up from the leader: this directory may vote from now on (persisted after
            # the entries it just appended).
            self._set_vote(msgspec.structs.replace(self._vote, can_vote=True))

    def _on_fetch_snapshot_response(self, response: FetchSnapshotResponse, now_ms: int) -> None:
        role = self._accept_response(response, snapshot=True)
        download = self._download
        if role is None or download is None:
            return
        if response.error is not RaftError.NONE or response.snapshot_id != download.snapshot_id:
            # Replaced by a newer snapshot, or the leader moved: fetch again to find out.
            self._download = None
            self._fetch_not_before_ms = now_ms + self._config.retry_backoff_ms
            return
        self._role = msgspec.structs.replace(role, fetch_deadline_ms=self._fetch_deadline(now_ms))
        self._leader_contact_ms = now_ms
        if response.position != download.position:
            self._maybe_fetch(now_ms)
            return
        download.chunks.append(response.chunk)
        download.position += len(response.chunk)
        if download.position >= response.size_bytes:
            self._download = None
            self._install(
                Snapshot(
                    end_offset=download.snapshot_id.end_offset,
                    epoch=download.snapshot_id.epoch,
                    data=b"".join(download.chunks),
                )
            )
        elif not response.chunk:
            raise RaftInvariantError(f"node {self._id}: empty snapshot chunk before the end")
        self._maybe_fetch(now_ms)

    def _install(self, snapshot: Snapshot) -> None:
        if snapshot.end_offset <= self._hw:
            return
        self._log.reset(snapshot)
        self._snapshot = snapshot
        seq = self._issue_seq()
        self._out.append(InstallSnapshot(seq=seq, snapshot=snapshot))
        self._clamp_durable_end(snapshot.end_offset)
        self._pending_ends.append((seq, snapshot.end_offset))
        self._hw = snapshot.end_offset
        self._applied = snapshot.end_offset
        self._out.append(LoadSnapshot(snapshot=snapshot))

    # ---- log and persistence ------------------------------------------------------------

    def _append(self, entries: tuple[Entry, ...]) -> None:
        log = self._log
        base_offset = log.end_offset
        log.append(entries)
        seq = self._issue_seq()
        self._out.append(AppendEntries(seq=seq, base_offset=base_offset, entries=entries))
        self._pending_ends.append((seq, log.end_offset))

    def _truncate(self, end_offset: int) -> None:
        if end_offset == self._log.end_offset:
            return
        self._log.truncate(end_offset)
        seq = self._issue_seq()
        self._out.append(TruncateLog(seq=seq, end_offset=end_offset))
        self._clamp_durable_end(end_offset)
        self._pending_ends.append((seq, end_offset))

    def _clamp_durable_end(self, end_offset: int) -> None:
        self._durable_end = min(self._durable_end, end_offset)
        self._pending_ends = deque((seq, min(end, end_offset)) for seq, end in self._pending_ends)

    def _apply_committed(self) -> None:
        if self._hw > self._applied:
            entries = self._log.entries_between(self._applied, self._hw)
            self._out.append(ApplyEntries(base_offset=self._applied, entries=entries))
            self._applied = self._hw

    def _set_vote(self, vote: VoteState) -> None:
        if vote == self._vote:
            return
        self._vote = vote
        out = self._out
        for index in range(len(out) - 1, -1, -1):
            action = out[index]
            if isinstance(action, PersistVote) and action.seq == self._next_seq - 1:
                # This step already wrote a vote state and nothing was persisted after it:
                # write only the newer one (one fsync). It dominates the older one: in the
                # same epoch the vote never changes, and a node in a later epoch never votes
                # in an earlier one, so what the held messages depend on stays true.
                out[index] = PersistVote(seq=action.seq, vote=vote)
                return
        seq = self._issue_seq()
        self._vote_seq = seq
        out.append(PersistVote(seq=seq, vote=vote))

    def _issue_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _persistence_pending(self) -> bool:
        return self._durable_seq < self._next_seq - 1

    def _send(self, message: Message) -> None:
        if self._vote_seq > self._durable_seq:
            self._held.append((self._vote_seq, message))
        else:
            self._out.append(Send(message))

    # ---- helpers ------------------------------------------------------------------------

    def _transition(self, new: RoleState) -> None:
        old = self._role
        check_transition(old, new)
        old_leader = self.leader_id
        self._role = new
        if isinstance(old, Leader):
            parked, self._parked = self._parked, {}
            self._replicas = {}
            for request, _ in parked.values():
                self._answer_fetch_error(request, RaftError.NOT_LEADER_OR_FOLLOWER)
        elif isinstance(old, Follower):
            self._outstanding = None
            self._download = None
        if type(old) is not type(new) or old.epoch != new.epoch or old_leader != self.leader_id:
            self._out.append(
                RoleChanged(role=role_of(new), epoch=new.epoch, leader_id=self.leader_id)
            )

    def _refuse_foreign(self, message: Message) -> None:
        self._out.append(
            Refused(
                source=message.source,
                reason=f"cluster id {message.cluster_id!r} is not {self._config.cluster_id!r}",
            )
        )
        if isinstance(message, FetchRequest):
            self._out.append(
                Send(
                    FetchResponse(
                        cluster_id=self._config.cluster_id,
                        source=self._id,
                        destination=message.source,
                        correlation_id=message.correlation_id,
                        epoch=self._vote.epoch,
                        leader_id=None,
                        error=RaftError.INCONSISTENT_CLUSTER_ID,
                        fetch_offset=message.fetch_offset,
                    )
                )
            )
        elif isinstance(message, VoteRequest):
            self._out.append(
                Send(
                    VoteResponse(
                        cluster_id=self._config.cluster_id,
                        source=self._id,
                        destination=message.source,
                        correlation_id=message.correlation_id,
                        epoch=self._vote.epoch,
                        leader_id=None,
                        granted=False,
                        pre_vote=message.pre_vote,
                        error=RaftError.INCONSISTENT_CLUSTER_ID,
                    )
                )
            )

    def _random_deadline(self, now_ms: int) -> int:
        if not self._others:
            return now_ms  # a lone voter has nobody to split a vote with: stand at once
        return now_ms + self._config.election_timeout_ms + self._jitter()

    def _jitter(self) -> int:
        """A random share of the election timeout (0 for a lone voter)."""
        return self._rng.randrange(self._config.election_timeout_ms) if self._others else 0

    def _fetch_deadline(self, now_ms: int) -> int:
        """When a follower that hears nothing more from its leader stands: the fetch timeout
        plus this node's jitter for the current leadership, so that the followers of a dead
        leader do not all stand at once (and split the vote)."""
        return now_ms + self._config.fetch_timeout_ms + self._fetch_jitter_ms

    def _stand_deadline(self, now_ms: int) -> int | None:
        return self._random_deadline(now_ms) if self._can_stand() else None

    def _new_correlation_id(self) -> int:
        self._next_correlation_id += 1
        return self._next_correlation_id

    def _begin(self) -> None:
        if not self._started:
            raise RuntimeError("start() first")
        self._out = []

    def _take(self) -> list[Action]:
        out, self._out = self._out, []
        return out


def _leader_hint(message: Message) -> int | None:
    """Who leads the message's epoch, when the message says so."""
    if isinstance(message, BeginQuorumEpoch):
        return message.source
    if isinstance(
        message,
        VoteResponse | FetchResponse | FetchSnapshotResponse | BeginQuorumEpochResponse,
    ):
        return message.leader_id
    return None


_E = TypeVar("_E", Prospective, Candidate)


def _count_vote(role: _E, response: VoteResponse) -> _E:
    if response.granted:
        return msgspec.structs.replace(role, granted=role.granted | {response.source})
    return msgspec.structs.replace(role, rejected=role.rejected | {response.source})
