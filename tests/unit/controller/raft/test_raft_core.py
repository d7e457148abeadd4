"""Scripted scenarios of the Raft core: each names one guarantee and drives it step by step."""

from __future__ import annotations

import random
from collections.abc import Sequence

import msgspec
import pytest

import controller.raft.core as core_module
from controller.raft.actions import (
    PERSISTENCE_ACTIONS,
    Action,
    ApplyEntries,
    InstallSnapshot,
    LeaderReady,
    LoadSnapshot,
    PersistVote,
    Refused,
    Role,
    Send,
    TruncateLog,
)
from controller.raft.core import NotLeaderError, RaftInvariantError, RaftNode
from controller.raft.messages import (
    BeginQuorumEpoch,
    EndQuorumEpoch,
    Entry,
    EntryKind,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Message,
    RaftError,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    VoteState,
    decode_leader_change,
)
from controller.raft.rules import leader_high_watermark
from controller.raft.storage import InMemoryStorage, perform
from tests.unit.controller.raft.raft_harness import CLUSTER_ID, Harness, harness_config


def _applied(harness: Harness, node_id: int) -> list[bytes]:
    return [
        entry.payload
        for action in harness.actions_of(node_id, ApplyEntries)
        for entry in action.entries
        if entry.kind is EntryKind.DATA
    ]


def test_single_voter_elects_itself_and_commits() -> None:
    harness = Harness((1,))
    leader = harness.elect()
    assert leader == 1
    offset = harness.propose(1, b"a", b"b")
    assert offset == 1  # offset 0 is the leader-change marker
    assert _applied(harness, 1) == [b"a", b"b"]
    assert harness.nodes[1].high_watermark == 3


def test_three_voters_elect_one_leader_and_replicate() -> None:
    harness = Harness()
    leader = harness.elect()
    harness.propose(leader, b"x")
    harness.advance(100)
    for node in harness.voters:
        assert _applied(harness, node) == [b"x"]
        assert harness.nodes[node].epoch == harness.nodes[leader].epoch
    marker = harness.nodes[leader].log.entry(0)
    assert decode_leader_change(marker).leader_id == leader


def test_leader_serves_only_after_its_marker_is_committed() -> None:
    harness = Harness(manual_sync=frozenset({1}))
    harness.campaign(1)  # pre-vote won; its candidacy (epoch 1) is not durable yet
    assert harness.nodes[1].role is Role.CANDIDATE
    assert harness.sent(1, VoteRequest) == [m for m in harness.sent(1, VoteRequest) if m.pre_vote]
    harness.sync(1)
    harness.deliver()
    core = harness.nodes[1]
    assert core.role is Role.LEADER
    assert not core.is_ready_leader  # its marker is not even durable on itself
    with pytest.raises(NotLeaderError):
        core.propose([b"too early"], harness.now)
    harness.sync(1)
    harness.deliver()
    harness.sync(1)
    assert core.is_ready_leader
    assert [a.epoch for a in harness.actions_of(1, LeaderReady)] == [1]
    assert core.high_watermark == 1  # exactly the marker
    assert sum(harness.nodes[n].log.end_offset >= 1 for n in harness.voters) >= 2


def test_vote_response_waits_until_the_vote_is_durable() -> None:
    """Durability before dependence: the granted vote is released by `persisted`."""
    core, _ = _lone_node()
    actions = core.receive(_vote_request(1, 2, 5), 10)
    persist = [a for a in actions if isinstance(a, PersistVote)]
    assert [(a.vote.epoch, a.vote.voted_for) for a in persist] == [(5, 1)]  # one write
    assert _responses(actions) == []
    released = core.persisted(persist[-1].seq, 11)
    assert [(r.epoch, r.granted) for r in _responses(released)] == [(5, True)]


def _vote_request(
    source: int, destination: int, epoch: int, *, end_offset: int = 50
) -> VoteRequest:
    return VoteRequest(
        cluster_id=CLUSTER_ID,
        source=source,
        destination=destination,
        correlation_id=7,
        epoch=epoch,
        last_epoch=epoch - 1,
        end_offset=end_offset,
        pre_vote=False,
    )


def _lone_node(node_id: int = 2, *, can_vote: bool = True) -> tuple[RaftNode, InMemoryStorage]:
    storage = InMemoryStorage(cluster_id=CLUSTER_ID, directory_id="d", can_vote=can_vote)
    core = RaftNode(harness_config(node_id, (1, 2, 3)), storage.load(), rng=random.Random(1))
    core.start(0)
    return core, storage


def _run(
    core: RaftNode, storage: InMemoryStorage, actions: Sequence[Action], now: int
) -> list[Action]:
    """Perform persistence, sync, and return everything including what `persisted` released."""
    out = list(actions)
    last = None
    for action in actions:
        if isinstance(action, PERSISTENCE_ACTIONS):
            perform(storage, action)
            last = action.seq
    if last is not None:
        storage.sync()
        out += core.persisted(last, now)
    return out


def _responses(actions: Sequence[Action]) -> list[VoteResponse]:
    return [
        a.message for a in actions if isinstance(a, Send) and isinstance(a.message, VoteResponse)
    ]


def test_never_votes_twice_in_an_epoch_even_across_a_crash() -> None:
    core, storage = _lone_node()
    granted = _responses(_run(core, storage, core.receive(_vote_request(1, 2, 5), 10), 10))
    assert [r.granted for r in granted] == [True]
    storage.crash()
    core = RaftNode(harness_config(2, (1, 2, 3)), storage.load(), rng=random.Random(2))
    core.start(20)
    again = _responses(_run(core, storage, core.receive(_vote_request(3, 2, 5), 30), 30))
    assert [r.granted for r in again] == [False]
    assert core.vote_state.voted_for == 1
    same = _responses(_run(core, storage, core.receive(_vote_request(1, 2, 5), 31), 31))
    assert [r.granted for r in same] == [True]  # the same candidate asking again


def test_a_vote_lost_before_it_was_durable_was_never_sent() -> None:
    core, storage = _lone_node()
    actions = core.receive(_vote_request(1, 2, 5), 10)
    assert _responses(actions) == []  # held until the vote is durable
    assert any(isinstance(a, PersistVote) for a in actions)
    storage.crash()  # the write never reached the disk, and nobody heard of the vote
    core = RaftNode(harness_config(2, (1, 2, 3)), storage.load(), rng=random.Random(2))
    core.start(20)
    assert core.vote_state.voted_for is None


def test_a_partitioned_node_does_not_disrupt_the_leader_when_it_returns() -> None:
    harness = Harness()
    leader = harness.elect()
    epoch = harness.nodes[leader].epoch
    outsider = next(n for n in harness.voters if n != leader)
    harness.isolate(outsider)
    harness.advance(2_000)  # many election timeouts: it keeps pre-voting, alone
    assert harness.nodes[outsider].epoch == epoch
    assert harness.nodes[outsider].role in (Role.PROSPECTIVE, Role.FOLLOWER, Role.UNATTACHED)
    harness.heal()
    harness.advance(1_000)
    assert harness.nodes[leader].is_ready_leader
    assert harness.nodes[leader].epoch == epoch
    assert harness.nodes[outsider].leader_id == leader


def test_a_leader_without_a_quorum_resigns() -> None:
    harness = Harness()
    leader = harness.elect()
    harness.isolate(leader)
    harness.advance(400)  # > check-quorum timeout (300 ms)
    assert harness.nodes[leader].role is not Role.LEADER
    assert harness.sent(leader, EndQuorumEpoch)
    harness.heal()
    new = harness.elect()
    assert harness.nodes[new].epoch > 0


def test_high_watermark_needs_a_majority() -> None:
    harness = Harness()
    leader = harness.elect()
    hw = harness.nodes[leader].high_watermark
    followers = [n for n in harness.voters if n != leader]
    harness.blocked = {(f, leader) for f in followers}  # their fetches do not arrive
    harness.propose(leader, b"only on the leader")
    harness.advance(60)
    assert harness.nodes[leader].high_watermark == hw
    harness.blocked = {(followers[0], leader)}  # one follower is enough for 2 of 3
    harness.advance(200)
    assert harness.nodes[leader].high_watermark == hw + 1


def test_a_follower_truncates_its_divergent_tail() -> None:
    harness = Harness()
    old = harness.elect()
    harness.isolate(old)
    harness.propose(old, b"lost 1", b"lost 2")  # only the isolated leader has these
    others = [n for n in harness.voters if n != old]
    harness.run_until(lambda: any(harness.nodes[n].is_ready_leader for n in others))
    new = next(n for n in others if harness.nodes[n].is_ready_leader)
    harness.propose(new, b"kept")
    harness.advance(50)
    harness.heal()
    harness.run_until(
        lambda: (
            harness.nodes[old].leader_id == new
            and harness.nodes[old].high_watermark == harness.nodes[new].high_watermark
        )
    )
    assert harness.actions_of(old, TruncateLog)
    payloads = [harness.nodes[old].log.entry(o) for o in range(harness.nodes[old].log.end_offset)]
    assert payloads == [
        harness.nodes[new].log.entry(o) for o in range(harness.nodes[new].log.end_offset)
    ]
    assert b"kept" in _applied(harness, old)
    assert b"lost 1" not in _applied(harness, old)


def test_a_lagging_follower_catches_up_from_a_snapshot() -> None:
    harness = Harness()
    leader = harness.elect()
    lagging = next(n for n in harness.voters if n != leader)
    harness.crash(lagging)
    for index in range(10):
        harness.propose(leader, b"r%d" % index)
        harness.advance(20)
    core = harness.nodes[leader]
    harness.handle(
        leader, core.create_snapshot(core.high_watermark, b"state-machine-bytes" * 3, harness.now)
    )
    assert core.log.start_offset == core.high_watermark
    harness.start(lagging)
    harness.run_until(lambda: harness.nodes[lagging].high_watermark >= core.high_watermark)
    installs = harness.actions_of(lagging, InstallSnapshot)
    loads = harness.actions_of(lagging, LoadSnapshot)
    assert len(installs) == 1
    assert loads[0].snapshot.data == b"state-machine-bytes" * 3
    assert len(harness.sent(lagging, FetchSnapshotRequest)) >= 57 // 8  # chunks of 8 bytes
    harness.propose(leader, b"after")
    harness.advance(100)
    assert _applied(harness, lagging)[-1] == b"after"
    assert harness.storages[lagging].load().snapshot is not None


def test_a_new_directory_votes_only_after_catching_up() -> None:
    harness = Harness(new_directories=frozenset({3}))
    harness.isolate(2)
    harness.advance(1_500)  # 1 and 3 are connected, but 3 may not vote: no leader
    assert all(not core.is_ready_leader for core in harness.nodes.values())
    assert harness.nodes[3].role is Role.UNATTACHED
    assert [m.granted for m in harness.sent(3, VoteResponse)] == [False] * len(
        harness.sent(3, VoteResponse)
    )
    harness.heal()
    leader = harness.elect()
    assert leader != 3
    harness.run_until(lambda: harness.nodes[3].vote_state.can_vote)
    assert harness.storages[3].load().vote.can_vote
    assert harness.nodes[3].log.end_offset >= harness.nodes[leader].high_watermark


def test_a_voter_wiped_in_the_middle_of_an_epoch_learns_the_leader_and_catches_up() -> None:
    """A wiped voter may not stand, so it never asks anyone: the leader must tell it. It
    had fetched in this epoch before the wipe, so the first BeginQuorumEpoch is long past;
    the leader repeats it to every voter that has not fetched within the fetch timeout."""
    harness = Harness()
    leader = harness.elect()
    harness.propose(leader, b"before")
    harness.advance(100)
    wiped = next(node for node in harness.voters if node != leader)
    harness.crash(wiped)
    harness.storages[wiped] = InMemoryStorage(
        cluster_id=CLUSTER_ID, directory_id="wiped", can_vote=False
    )
    harness.propose(leader, b"during")
    harness.advance(300)  # the leader answers the dead node's parked fetch into the void
    harness.start(wiped)
    assert harness.nodes[wiped].role is Role.UNATTACHED
    assert harness.nodes[wiped].deadline_ms() is None  # it waits to be told, forever
    harness.run_until(lambda: harness.nodes[wiped].vote_state.can_vote, max_ms=2_000)
    assert harness.nodes[wiped].leader_id == leader
    assert _applied(harness, wiped)[-2:] == [b"before", b"during"]


def test_messages_from_another_cluster_are_refused() -> None:
    core, _ = _lone_node()
    request = FetchRequest(
        cluster_id="other",
        source=1,
        destination=2,
        correlation_id=3,
        epoch=9,
        fetch_offset=0,
        last_fetched_epoch=0,
        high_watermark=None,
        directory_id="x",
    )
    actions = core.receive(request, 5)
    assert core.epoch == 0  # learnt nothing from it
    refused = [a for a in actions if isinstance(a, Refused)]
    assert "other" in refused[0].reason
    replies = [
        a.message for a in actions if isinstance(a, Send) and isinstance(a.message, FetchResponse)
    ]
    assert [r.error for r in replies] == [RaftError.INCONSISTENT_CLUSTER_ID]
    vote = msgspec.structs.replace(_vote_request(1, 2, 5), cluster_id="other")
    assert not _responses(core.receive(vote, 6))[0].granted
    assert core.vote_state.voted_for is None


def test_messages_from_a_non_voter_are_refused() -> None:
    core, _ = _lone_node()
    actions = core.receive(_vote_request(9, 2, 5), 5)
    assert [type(a) for a in actions] == [Refused]


def test_graceful_resign_hands_over_before_the_fetch_timeout() -> None:
    harness = Harness()
    leader = harness.elect()
    epoch = harness.nodes[leader].epoch
    harness.advance(50)
    resigned_at = harness.now
    harness.handle(leader, harness.nodes[leader].resign(harness.now))
    assert harness.nodes[leader].role is Role.RESIGNED
    harness.run_until(lambda: harness.ready_leader() not in (None, leader))
    assert harness.nodes[harness.ready_leader() or 0].epoch == epoch + 1
    assert harness.now - resigned_at < 200  # the fetch timeout


def test_propose_on_a_follower_names_the_leader() -> None:
    harness = Harness()
    leader = harness.elect()
    harness.advance(50)
    follower = next(n for n in harness.voters if n != leader)
    with pytest.raises(NotLeaderError) as raised:
        harness.nodes[follower].propose([b"x"], harness.now)
    assert raised.value.leader_id == leader


def test_a_restarted_leader_never_leads_its_epoch_again() -> None:
    harness = Harness()
    leader = harness.elect()
    epoch = harness.nodes[leader].epoch
    harness.crash(leader)
    harness.start(leader)
    assert harness.nodes[leader].role is Role.RESIGNED
    assert harness.nodes[leader].epoch == epoch


@pytest.mark.parametrize(
    ("end_offset", "problem"),
    [
        pytest.param(0, "not after the current one", id="not after the current snapshot"),
        pytest.param(99, "not yet applied", id="beyond the applied entries"),
    ],
)
def test_create_snapshot_refuses_bad_positions(end_offset: int, problem: str) -> None:
    harness = Harness((1,))
    harness.elect()
    with pytest.raises(ValueError, match=problem):
        harness.nodes[1].create_snapshot(end_offset, b"", harness.now)


def test_truncation_below_the_high_watermark_is_refused() -> None:
    harness = Harness()
    leader = harness.elect()
    harness.propose(leader, b"committed")
    harness.advance(100)
    follower = next(n for n in harness.voters if n != leader)
    core = harness.nodes[follower]
    assert core.high_watermark == 2
    harness.advance(1)
    fetches = [m for m in harness.inbox if isinstance(m, FetchRequest) and m.source == follower]
    outstanding = fetches[-1] if fetches else None
    if outstanding is None:  # parked at the leader: take the request it holds
        outstanding = [m for m in harness.sent(follower, FetchRequest)][-1]
    assert isinstance(outstanding, FetchRequest)
    forged = FetchResponse(
        cluster_id=CLUSTER_ID,
        source=leader,
        destination=follower,
        correlation_id=outstanding.correlation_id,
        epoch=core.epoch,
        leader_id=leader,
        error=RaftError.NONE,
        fetch_offset=core.log.end_offset,
        diverging=EpochEndOffset(epoch=core.epoch, end_offset=0),
    )
    with pytest.raises(RaftInvariantError, match="below the high watermark"):
        core.receive(forged, harness.now)


def test_persisted_outside_the_issued_range_is_an_error() -> None:
    core, _ = _lone_node()
    with pytest.raises(ValueError, match="outside the issued range"):
        core.persisted(5, 0)


def test_a_fetch_from_a_replaced_directory_is_refused() -> None:
    harness = Harness()
    leader = harness.elect()
    core = harness.nodes[leader]
    follower = next(n for n in harness.voters if n != leader)

    def fetch(directory: str) -> list[object]:
        return list(
            core.receive(
                FetchRequest(
                    cluster_id=CLUSTER_ID,
                    source=follower,
                    destination=leader,
                    correlation_id=1,
                    epoch=core.epoch,
                    fetch_offset=0,
                    last_fetched_epoch=0,
                    high_watermark=None,
                    directory_id=directory,
                ),
                harness.now,
            )
        )

    fetch("new-disk")  # the follower came back with a wiped directory
    late = fetch(f"dir-{follower}")  # a delayed fetch of its old directory
    assert [type(a) for a in late] == [Refused]


def test_config_problems_are_named() -> None:
    with pytest.raises(ValueError, match="not one of the voters"):
        harness_config(4, (1, 2, 3))
    with pytest.raises(ValueError, match="request_timeout_ms must exceed"):
        msgspec.structs.replace(harness_config(1, (1,)), request_timeout_ms=10)


def test_a_foreign_storage_is_refused() -> None:
    storage = InMemoryStorage(cluster_id="elsewhere", directory_id="d")
    with pytest.raises(ValueError, match="belongs to cluster 'elsewhere'"):
        RaftNode(harness_config(1, (1, 2, 3)), storage.load(), rng=random.Random(0))


def test_end_quorum_epoch_from_another_node_is_ignored() -> None:
    harness = Harness()
    leader = harness.elect()
    harness.advance(20)
    follower, other = (n for n in harness.voters if n != leader)
    before = harness.nodes[follower].role
    harness.handle(
        follower,
        harness.nodes[follower].receive(
            EndQuorumEpoch(
                cluster_id=CLUSTER_ID,
                source=other,
                destination=follower,
                epoch=harness.nodes[follower].epoch,
                preferred_successors=(follower,),
            ),
            harness.now,
        ),
    )
    assert harness.nodes[follower].role is before


def _applied_entries(harness: Harness) -> dict[int, dict[int, Entry]]:
    """Per node: offset -> entry it applied as committed (across its restarts)."""
    applied: dict[int, dict[int, Entry]] = {}
    for node in harness.voters:
        for action in harness.actions_of(node, ApplyEntries):
            for index, entry in enumerate(action.entries):
                applied.setdefault(node, {})[action.base_offset + index] = entry
    return applied


def _conflicts(harness: Harness) -> list[int]:
    """Offsets at which two nodes applied different entries (a committed entry changed)."""
    by_offset: dict[int, set[Entry]] = {}
    for entries in _applied_entries(harness).values():
        for offset, entry in entries.items():
            by_offset.setdefault(offset, set()).add(entry)
    return sorted(offset for offset, entries in by_offset.items() if len(entries) > 1)


@pytest.mark.parametrize("broken", [False, True], ids=["current-epoch rule", "broken rule"])
def test_figure_8_an_older_epoch_entry_is_not_committed_by_counting(
    broken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raft's Figure 8: an entry of an older epoch on a majority is not committed until an
    entry of the leader's own epoch is (here: its leader-change marker). With the rule
    broken (count old entries too) the entry is applied, then overwritten: the scenario
    must show that, so it is known to test the rule."""
    if broken:

        def counts_old_entries(
            *, voter_end_offsets: list[int], epoch_start_offset: int, current: int | None
        ) -> int | None:
            return leader_high_watermark(
                voter_end_offsets=voter_end_offsets, epoch_start_offset=-1, current=current
            )

        monkeypatch.setattr(core_module, "leader_high_watermark", counts_old_entries)
    harness = Harness(fetch_max_entries=1)
    harness.campaign(1)
    harness.propose(1, b"a")
    harness.advance(50)
    assert [harness.nodes[n].high_watermark for n in (1, 2, 3)] == [2, 2, 2]

    # Epoch 1: node 1, cut off, appends x at offset 2; nobody else has it.
    harness.isolate(1)
    harness.propose(1, b"x")
    # Epoch 2: node 3 wins with node 2's vote, but its marker (offset 2) reaches nobody.
    harness.drop = lambda message: message.source == 3 and not isinstance(message, VoteRequest)
    harness.tick(3, after_ms=300)
    assert (harness.nodes[3].role, harness.nodes[3].epoch) == (Role.LEADER, 2)
    # Epoch 3: node 1 returns and wins with node 2's vote (node 3 is gone); node 2 fetches
    # x (one entry per fetch) but never the epoch-3 marker.
    harness.heal()

    def drop_in_epoch_3(message: Message) -> bool:
        marker_3 = isinstance(message, FetchResponse) and any(
            entry.kind is EntryKind.LEADER_CHANGE and entry.epoch == 3 for entry in message.entries
        )
        return marker_3 or 3 in (message.source, message.destination)

    harness.drop = drop_in_epoch_3
    # Resign (check quorum) and learn epoch 2 (from node 2's answer to the BeginQuorumEpoch
    # it repeats to voters that stopped fetching), then win epoch 3.
    for _ in range(3):
        harness.tick(1, after_ms=300)
        if (harness.nodes[1].role, harness.nodes[1].epoch) == (Role.LEADER, 3):
            break
    assert (harness.nodes[1].role, harness.nodes[1].epoch) == (Role.LEADER, 3)
    assert harness.nodes[2].log.entry(2) == Entry(1, b"x")
    # Epoch 4: node 1 crashes; node 3 (last epoch 2 > node 2's 1) wins and overwrites x.
    harness.crash(1)
    harness.drop = lambda message: False
    harness.run_until(lambda: harness.nodes[3].is_ready_leader, max_ms=3_000)
    harness.run_until(lambda: harness.nodes[2].high_watermark >= 4)
    if broken:
        assert _applied_entries(harness)[1][2] == Entry(1, b"x")  # "committed" by node 1
        assert _conflicts(harness) == [2]  # ...and replaced on the others
    else:
        assert 2 not in _applied_entries(harness).get(1, {})  # node 1 never committed x
        assert _conflicts(harness) == []


def _pre_vote(source: int, epoch: int) -> VoteRequest:
    return VoteRequest(
        cluster_id=CLUSTER_ID,
        source=source,
        destination=2,
        correlation_id=9,
        epoch=epoch,
        last_epoch=1,
        end_offset=1,
        pre_vote=True,
    )


def test_a_follower_grants_the_pre_vote_of_its_own_leader_only() -> None:
    """A follower that just heard from its leader rejects other pre-votes (no disruption),
    but grants the leader's own: it restarted (Resigned) or resigned, and refusing it would
    only cost an election round (found by the simulation: seed 55's slow liveness)."""
    core, storage = _lone_node()
    _run(
        core,
        storage,
        core.receive(BeginQuorumEpoch(cluster_id=CLUSTER_ID, source=1, destination=2, epoch=1), 0),
        0,
    )
    assert (core.role, core.leader_id) == (Role.FOLLOWER, 1)
    other = _responses(core.receive(_pre_vote(3, 2), 10))
    own = _responses(core.receive(_pre_vote(1, 2), 10))
    assert [r.granted for r in other] == [False]
    assert [r.granted for r in own] == [True]
    assert (core.role, core.epoch) == (Role.FOLLOWER, 1)  # a pre-vote changes nothing


def _vote_response(source: int, *, granted: bool, epoch: int, correlation_id: int) -> VoteResponse:
    return VoteResponse(
        cluster_id=CLUSTER_ID,
        source=source,
        destination=2,
        correlation_id=correlation_id,
        epoch=epoch,
        leader_id=None,
        granted=granted,
        pre_vote=True,
    )


def test_a_lost_pre_vote_does_not_make_the_follower_protect_a_dead_leader() -> None:
    """Regression (simulation seed 1 at the time): a follower whose own pre-vote failed went
    back to following its silent leader with a fresh fetch deadline, and that deadline made
    it reject every other pre-vote as if the leader were alive: no election ever again."""
    core, storage = _lone_node()
    begin = BeginQuorumEpoch(cluster_id=CLUSTER_ID, source=1, destination=2, epoch=1)
    _run(core, storage, core.receive(begin, 0), 0)
    # The fetch timeout (200) and this node's jitter (< the election timeout, 100) passed:
    # leader 1 is silent.
    actions = core.tick(300)
    assert core.role is Role.PROSPECTIVE
    requests = [a.message for a in actions if isinstance(a, Send)]
    round_id = next(m.correlation_id for m in requests if isinstance(m, VoteRequest))
    core.receive(_vote_response(1, granted=False, epoch=1, correlation_id=round_id), 305)
    core.receive(_vote_response(3, granted=False, epoch=1, correlation_id=round_id), 305)
    assert (core.role, core.leader_id) == (Role.FOLLOWER, 1)  # lost: retry the last leader
    granted = _responses(core.receive(_pre_vote(3, 2), 350))
    assert [r.granted for r in granted] == [True]  # nothing heard from 1 for 350 ms


def test_a_divergent_tail_longer_than_the_leaders_snapshot_loads_the_snapshot() -> None:
    """Regression (simulation seed 93 at the time): the follower's uncommitted tail of an old
    epoch reached past the leader's snapshot; it raised instead of loading the snapshot."""
    storage = InMemoryStorage(cluster_id=CLUSTER_ID, directory_id="d")
    storage.append(0, [Entry(1, b"old-%d" % i) for i in range(8)])
    storage.write_vote(VoteState(epoch=2, leader_id=1))
    storage.sync()
    core = RaftNode(harness_config(2, (1, 2, 3)), storage.load(), rng=random.Random(3))
    fetch = next(
        a.message
        for a in core.start(0)
        if isinstance(a, Send) and isinstance(a.message, FetchRequest)
    )
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (8, 1)
    answer = FetchResponse(
        cluster_id=CLUSTER_ID,
        source=1,
        destination=2,
        correlation_id=fetch.correlation_id,
        epoch=2,
        leader_id=1,
        error=RaftError.NONE,
        fetch_offset=8,
        high_watermark=5,
        log_start_offset=4,
        snapshot_id=SnapshotId(end_offset=4, epoch=2),
    )
    actions = core.receive(answer, 5)
    chunks = [a.message for a in actions if isinstance(a, Send)]
    assert [type(m) for m in chunks] == [FetchSnapshotRequest]
    assert chunks[0].snapshot_id == SnapshotId(end_offset=4, epoch=2)  # type: ignore[union-attr]
