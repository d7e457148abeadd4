"""The file-backed Raft storage: format, recovery, crashes that lose unsynced bytes, and
equivalence with the in-memory model."""

from __future__ import annotations

import logging
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.raft.actions import PERSISTENCE_ACTIONS, Action, LoadSnapshot
from controller.raft.core import RaftNode
from controller.raft.file_storage import (
    LOG_FILE,
    VOTE_FILE,
    FileRaftStorage,
    RaftStorageCorruptError,
    RaftStorageError,
    snapshot_file_name,
)
from controller.raft.messages import Entry, EntryKind, Snapshot, VoteState
from controller.raft.storage import InMemoryStorage, perform
from tests.unit.controller.raft.raft_harness import CLUSTER_ID, harness_config

CLUSTER = CLUSTER_ID


def _entries(epoch: int, count: int, tag: str = "e") -> list[Entry]:
    return [Entry(epoch, f"{tag}{index}".encode()) for index in range(count)]


def _open(path: Path, *, can_vote: bool = True) -> FileRaftStorage:
    FileRaftStorage.format(path, cluster_id=CLUSTER, directory_id="dir-a", can_vote=can_vote)
    return FileRaftStorage.open(path, cluster_id=CLUSTER)


# ---- file storage: identity ----------------------------------------------------------------


def test_format_then_open(tmp_path: Path) -> None:
    storage = _open(tmp_path, can_vote=False)
    state = storage.load()
    assert (state.cluster_id, state.directory_id) == (CLUSTER, "dir-a")
    assert state.vote == VoteState(can_vote=False)
    assert (state.snapshot, state.log_start_offset, state.entries) == (None, 0, ())
    storage.close()


def test_open_refuses_another_cluster(tmp_path: Path) -> None:
    _open(tmp_path).close()
    with pytest.raises(RaftStorageError, match="belongs to cluster 'test-cluster', not 'c2'"):
        FileRaftStorage.open(tmp_path, cluster_id="c2")


def test_open_refuses_an_unformatted_directory(tmp_path: Path) -> None:
    with pytest.raises(RaftStorageError, match="not formatted"):
        FileRaftStorage.open(tmp_path)


def test_format_refuses_a_formatted_directory(tmp_path: Path) -> None:
    _open(tmp_path).close()
    with pytest.raises(RaftStorageError, match="already formatted"):
        FileRaftStorage.format(tmp_path, cluster_id=CLUSTER, directory_id="x", can_vote=True)


def test_format_refuses_stray_raft_files(tmp_path: Path) -> None:
    (tmp_path / LOG_FILE).write_bytes(b"old")
    (tmp_path / "metadata.journal").write_bytes(b"the controller's, not ours")
    with pytest.raises(
        RaftStorageError, match=r"holds Raft files but no raft-meta.json: \['raft.log'\]"
    ):
        FileRaftStorage.format(tmp_path, cluster_id=CLUSTER, directory_id="x", can_vote=True)


def test_append_must_continue_the_log(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    with pytest.raises(RaftStorageError, match="append at 3 but the log ends at 0"):
        storage.append(3, _entries(1, 1))
    storage.close()
    with pytest.raises(RaftStorageError, match="closed"):
        storage.append(0, _entries(1, 1))


# ---- file storage: against the in-memory model ---------------------------------------------

_OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "truncate", "vote", "snapshot", "install", "sync"]),
        st.integers(0, 6),
    ),
    max_size=25,
)


def _play(operations: list[tuple[str, int]], *stores: object) -> None:
    """Apply one random history to every store (each a FileRaftStorage or InMemoryStorage)."""
    start, entries, epoch = 0, 0, 1
    for name, number in operations:
        end = start + entries
        if name == "append":
            epoch += number % 2
            batch = _entries(epoch, number + 1, f"a{end}-")
            for store in stores:
                store.append(end, batch)  # type: ignore[attr-defined]
            entries += len(batch)
        elif name == "truncate" and entries:
            cut = start + number % (entries + 1)
            for store in stores:
                store.truncate(cut)  # type: ignore[attr-defined]
            entries = cut - start
        elif name == "vote":
            vote = VoteState(epoch=epoch + number, voted_for=number % 3 or None)
            for store in stores:
                store.write_vote(vote)  # type: ignore[attr-defined]
        elif name == "snapshot" and entries:
            end_offset = start + 1 + number % entries
            snapshot = Snapshot(end_offset=end_offset, epoch=epoch, data=b"s%d" % end_offset)
            for store in stores:
                store.write_snapshot(snapshot)  # type: ignore[attr-defined]
            entries -= end_offset - start
            start = end_offset
        elif name == "install":
            epoch += 1
            snapshot = Snapshot(end_offset=end + number + 1, epoch=epoch, data=b"i")
            for store in stores:
                store.install_snapshot(snapshot)  # type: ignore[attr-defined]
            start, entries = snapshot.end_offset, 0
        elif name == "sync":
            for store in stores:
                store.sync()  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(_OPERATIONS)
def test_file_storage_matches_the_model_after_reopening(operations: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory)
        storage = _open(path)
        model = InMemoryStorage(cluster_id=CLUSTER, directory_id="dir-a")
        _play(operations, storage, model)
        storage.sync()
        model.sync()
        storage.close()
        reopened = FileRaftStorage.open(path)
        assert reopened.load() == model.load()
        reopened.close()


# ---- file storage: crashes -------------------------------------------------------------------


def test_a_crash_loses_only_unsynced_appends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = _open(tmp_path)
    storage.append(0, _entries(1, 4))
    storage.sync()
    synced_bytes = (tmp_path / LOG_FILE).stat().st_size
    storage.append(4, _entries(1, 3, "unsynced"))
    storage._file.flush()  # type: ignore[union-attr]  # the OS wrote part of it back
    # Power loss: what was not fsynced is lost, except a torn piece of the next frame.
    with open(tmp_path / LOG_FILE, "r+b") as file:
        file.truncate(synced_bytes + 7)
    storage.close()
    with caplog.at_level(logging.WARNING):
        recovered = FileRaftStorage.open(tmp_path)
    assert [e.payload for e in recovered.load().entries] == [b"e0", b"e1", b"e2", b"e3"]
    assert "torn final frame" in caplog.text
    assert (tmp_path / LOG_FILE).stat().st_size == synced_bytes
    recovered.append(4, _entries(2, 1, "after"))  # and the log goes on from there
    recovered.sync()
    assert FileRaftStorage.open(tmp_path).load().entries[-1] == Entry(2, b"after0")


def test_damage_before_valid_entries_refuses_to_start(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.append(0, _entries(1, 4))
    storage.sync()
    storage.close()
    data = bytearray((tmp_path / LOG_FILE).read_bytes())
    data[12] ^= 0xFF  # inside the first entry
    (tmp_path / LOG_FILE).write_bytes(bytes(data))
    with pytest.raises(RaftStorageCorruptError, match="valid entries follow"):
        FileRaftStorage.open(tmp_path)


def test_a_torn_vote_write_keeps_the_previous_vote(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.write_vote(VoteState(epoch=3, voted_for=2))
    storage.close()
    (tmp_path / (VOTE_FILE + ".tmp")).write_bytes(b"\x01\x02")  # crash mid-write
    reopened = FileRaftStorage.open(tmp_path)
    assert reopened.load().vote == VoteState(epoch=3, voted_for=2)
    assert not (tmp_path / (VOTE_FILE + ".tmp")).exists()


def test_a_damaged_vote_file_refuses_to_start(tmp_path: Path) -> None:
    _open(tmp_path).close()
    (tmp_path / VOTE_FILE).write_bytes(b"\x00" * 3)
    with pytest.raises(RaftStorageCorruptError, match="quorum-state is damaged"):
        FileRaftStorage.open(tmp_path)


def test_crash_after_the_snapshot_before_the_log_rewrite(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.append(0, _entries(1, 6))
    storage.sync()
    old_log = (tmp_path / LOG_FILE).read_bytes()
    storage.write_snapshot(Snapshot(end_offset=4, epoch=1, data=b"s"))
    storage.close()
    (tmp_path / LOG_FILE).write_bytes(old_log)  # the rewrite never happened
    state = FileRaftStorage.open(tmp_path).load()
    assert (state.log_start_offset, [e.payload for e in state.entries]) == (4, [b"e4", b"e5"])


def test_crash_during_an_install_empties_a_log_of_another_history(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.append(0, _entries(1, 3))
    storage.sync()
    old_log = (tmp_path / LOG_FILE).read_bytes()
    storage.install_snapshot(Snapshot(end_offset=2, epoch=5, data=b"from the leader"))
    storage.close()
    (tmp_path / LOG_FILE).write_bytes(old_log)  # the snapshot landed, the log did not
    state = FileRaftStorage.open(tmp_path).load()
    assert state.snapshot == Snapshot(end_offset=2, epoch=5, data=b"from the leader")
    assert (state.log_start_offset, state.entries) == (2, ())


def test_only_the_newest_snapshot_is_kept(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.append(0, _entries(1, 6))
    first = Snapshot(end_offset=2, epoch=1, data=b"a")
    storage.write_snapshot(first)
    storage.write_snapshot(Snapshot(end_offset=5, epoch=1, data=b"b"))
    assert not (tmp_path / snapshot_file_name(first)).exists()
    assert FileRaftStorage.open(tmp_path).load().snapshot == Snapshot(
        end_offset=5, epoch=1, data=b"b"
    )


def test_a_damaged_snapshot_refuses_to_start(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.append(0, _entries(1, 3))
    snapshot = Snapshot(end_offset=2, epoch=1, data=b"abc")
    storage.write_snapshot(snapshot)
    storage.close()
    path = tmp_path / snapshot_file_name(snapshot)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(RaftStorageCorruptError, match="is damaged"):
        FileRaftStorage.open(tmp_path)


def test_entry_kinds_survive(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    storage.append(0, [Entry(1, b"m", EntryKind.LEADER_CHANGE), Entry(1, b"d")])
    storage.sync()
    kinds = [e.kind for e in FileRaftStorage.open(tmp_path).load().entries]
    assert kinds == [EntryKind.LEADER_CHANGE, EntryKind.DATA]


def test_a_single_voter_on_disk_restarts_with_its_log(tmp_path: Path) -> None:
    """The core and the file storage together: elect, commit, restart from the files."""
    storage = _open(tmp_path)
    config = harness_config(1, (1,))

    def drive(core: RaftNode, actions: Sequence[Action], now: int) -> None:
        pending = list(actions)
        while pending:
            last = None
            for action in pending:
                if isinstance(action, PERSISTENCE_ACTIONS):
                    perform(storage, action)
                    last = action.seq
            pending = []
            if last is not None:
                storage.sync()
                pending = core.persisted(last, now)

    core = RaftNode(config, storage.load(), rng=random.Random(0))
    drive(core, core.start(0), 0)
    deadline = core.deadline_ms()
    assert deadline is not None
    drive(core, core.tick(deadline), deadline)
    assert core.is_ready_leader
    _, actions = core.propose([b"one", b"two"], deadline)
    drive(core, actions, deadline)
    drive(core, core.create_snapshot(2, b"state", deadline), deadline)
    _, actions = core.propose([b"three"], deadline)
    drive(core, actions, deadline)
    storage.close()

    storage = FileRaftStorage.open(tmp_path, cluster_id=CLUSTER)
    state = storage.load()
    assert state.vote.leader_id == 1
    assert state.snapshot is not None
    assert [e.payload for e in state.entries] == [b"two", b"three"]
    restarted = RaftNode(config, state, rng=random.Random(1))
    started = restarted.start(deadline + 1)
    assert isinstance(started[0], LoadSnapshot)
    assert restarted.role.value == "resigned"
    storage.close()


@settings(max_examples=60, deadline=None)
@given(
    operations=st.lists(
        st.tuples(
            st.sampled_from(["append", "append", "sync", "truncate", "vote"]), st.integers(0, 5)
        ),
        max_size=20,
    ),
    cut_fraction=st.floats(0, 1),
)
def test_a_crash_at_any_byte_recovers_the_synced_prefix(
    operations: list[tuple[str, int]], cut_fraction: float
) -> None:
    """Whatever the history, cutting the log anywhere after its last durable point (power
    loss with the page cache partly written back) recovers every synced entry and a prefix
    of the unsynced ones, never anything else."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory)
        storage = _open(path)
        log_path = path / LOG_FILE
        entries: list[Entry] = []
        synced = 0  # entries known durable
        synced_bytes = 0
        epoch = 1
        for name, number in operations:
            if name == "append":
                batch = _entries(epoch, number + 1, f"a{len(entries)}-")
                storage.append(len(entries), batch)
                entries += batch
            elif name == "truncate":
                cut = len(entries) - number % (len(entries) + 1)  # 0: at the end (a no-op)
                storage.truncate(cut)
                del entries[cut:]
                synced = len(entries)  # truncate syncs the log first, even a no-op one
            elif name in ("sync", "vote"):
                if name == "vote":
                    epoch += 1
                    storage.write_vote(VoteState(epoch=epoch))
                else:
                    storage.sync()
                synced = len(entries)
            if synced == len(entries):
                synced_bytes = log_path.stat().st_size
        storage._file.flush()  # type: ignore[union-attr]
        size = log_path.stat().st_size
        storage.close()
        with open(log_path, "r+b") as file:
            file.truncate(synced_bytes + int(cut_fraction * (size - synced_bytes)))
        recovered = list(FileRaftStorage.open(path).load().entries)
        assert synced <= len(recovered) <= len(entries)
        assert recovered == entries[: len(recovered)]
