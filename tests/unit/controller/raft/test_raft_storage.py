"""The in-memory Raft storage: its crash semantics (the model the simulation relies on)."""

from __future__ import annotations

import pytest

from controller.raft.messages import Entry, Snapshot, VoteState
from controller.raft.storage import InMemoryStorage, PersistentState

CLUSTER = "c1"


def _entries(epoch: int, count: int, tag: str = "e") -> list[Entry]:
    return [Entry(epoch, f"{tag}{index}".encode()) for index in range(count)]


def test_in_memory_crash_keeps_only_synced_operations() -> None:
    storage = InMemoryStorage(cluster_id=CLUSTER, directory_id="d")
    storage.append(0, _entries(1, 3))
    storage.sync()
    storage.append(3, _entries(1, 2, "late"))
    storage.write_vote(VoteState(epoch=1, voted_for=2))
    storage.crash()
    state = storage.load()
    assert [e.payload for e in state.entries] == [b"e0", b"e1", b"e2"]
    assert state.vote == VoteState()


def test_in_memory_crash_may_keep_a_prefix_of_unsynced_operations() -> None:
    storage = InMemoryStorage(cluster_id=CLUSTER, directory_id="d")
    storage.append(0, _entries(1, 2))
    storage.write_vote(VoteState(epoch=1, voted_for=2))
    storage.append(2, _entries(1, 1, "x"))
    storage.crash(keep_unsynced=2)
    state = storage.load()
    assert len(state.entries) == 2
    assert state.vote.voted_for == 2


def test_in_memory_snapshot_and_install() -> None:
    storage = InMemoryStorage(cluster_id=CLUSTER, directory_id="d")
    storage.append(0, _entries(1, 5))
    storage.write_snapshot(Snapshot(end_offset=3, epoch=1, data=b"s"))
    storage.sync()
    state = storage.load()
    assert (state.log_start_offset, len(state.entries)) == (3, 2)
    storage.install_snapshot(Snapshot(end_offset=10, epoch=2, data=b"t"))
    storage.sync()
    state = storage.load()
    assert (state.log_start_offset, state.entries) == (10, ())


def test_persistent_state_checks_the_log_start() -> None:
    with pytest.raises(ValueError, match="log starts at 4 but the snapshot ends at 0"):
        PersistentState(
            cluster_id=CLUSTER,
            directory_id="d",
            vote=VoteState(),
            snapshot=None,
            log_start_offset=4,
            entries=(),
        )
