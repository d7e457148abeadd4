"""A controller's data directory: the format decision (table), journal conversion and its
crash recovery, the cluster-id check."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.journal import JOURNAL_FILE, SNAPSHOT_FILE, Journal
from controller.metadata_dir import (
    CONVERTING_DIR,
    Decision,
    MetadataDirError,
    PeerAnswer,
    convert_journal,
    finish_or_clean_conversion,
    format_decision,
    format_directory,
    is_formatted,
    open_storage,
)
from controller.metadata_log import decode_snapshot
from controller.model import TopicRecord
from controller.records import ClusterIdRecord, ControllerEpochRecord, TopicUpsertRecord

CLUSTER = "c1"


def peer(
    node_id: int,
    *,
    cluster_id: str = CLUSTER,
    formatted: bool = True,
    epoch: int = 0,
    end: int = 0,
    can_vote: bool = True,
) -> PeerAnswer:
    return PeerAnswer(
        node_id=node_id,
        cluster_id=cluster_id,
        formatted=formatted,
        epoch=epoch,
        log_end_offset=end,
        can_vote=can_vote,
    )


NEW, JOIN, WAIT, REFUSE = (
    Decision.NEW_CLUSTER,
    Decision.JOIN_EXISTING,
    Decision.WAIT,
    Decision.REFUSE,
)

# (voters, answers of the other voters) -> decision
CASES = [
    ("lone voter needs nobody", 1, [], NEW),
    ("three voters, nobody answers", 3, [], WAIT),
    ("three voters, one fresh peer: a majority", 3, [peer(2, formatted=False)], NEW),
    ("three voters, both peers fresh", 3, [peer(2, formatted=False), peer(3)], NEW),
    ("five voters, one fresh peer is not a majority", 5, [peer(2)], WAIT),
    ("five voters, two fresh peers", 5, [peer(2), peer(3, formatted=False)], NEW),
    ("a peer has an epoch: wiped directory", 3, [peer(2, epoch=4)], JOIN),
    ("a peer has a log", 3, [peer(2, end=10)], JOIN),
    ("a peer is itself catching up", 3, [peer(2, can_vote=False)], JOIN),
    ("data wins over a fresh majority", 5, [peer(2), peer(3), peer(4, epoch=1)], JOIN),
    ("another cluster", 3, [peer(2, cluster_id="other")], REFUSE),
    ("another cluster, even unformatted", 3, [peer(2, cluster_id="x", formatted=False)], REFUSE),
    ("another cluster beats data", 3, [peer(2, epoch=3), peer(3, cluster_id="x")], REFUSE),
    ("a peer without cluster id: no vote", 3, [peer(2, cluster_id="", formatted=False)], WAIT),
    ("an unformatted peer has no data", 3, [peer(2, formatted=False, epoch=0)], NEW),
]


@pytest.mark.parametrize(
    ("voters", "answers", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_format_decision(voters: int, answers: list[PeerAnswer], expected: Decision) -> None:
    decision = format_decision(cluster_id=CLUSTER, voter_count=voters, answers=answers)
    assert decision.decision is expected
    assert decision.reason


def _journal(data_dir: Path, *, epoch: int = 3) -> None:
    journal, _ = Journal.open(data_dir)
    journal.append(
        [
            ClusterIdRecord(cluster_id="legacy"),
            ControllerEpochRecord(controller_id=0, controller_epoch=epoch),
            TopicUpsertRecord(topic=TopicRecord(name="t", num_partitions=2)),
        ]
    )
    journal.close()


def test_a_journal_becomes_the_first_snapshot(tmp_path: Path) -> None:
    _journal(tmp_path, epoch=3)
    assert convert_journal(tmp_path, configured_cluster_id=None) == "legacy"
    storage = open_storage(tmp_path, cluster_id="legacy")
    state = storage.load()
    storage.close()
    assert state.snapshot is not None
    assert (state.snapshot.end_offset, state.snapshot.epoch) == (3, 3)
    assert state.vote.epoch == 3  # the next election issues epoch 4
    assert state.entries == ()
    restored = decode_snapshot(state.snapshot.data)
    assert restored.cluster_id == "legacy"
    assert restored.controller_epoch == 3
    assert set(restored.topics) == {"t"}
    assert restored.metadata_offset == 3
    assert not (tmp_path / JOURNAL_FILE).exists()
    assert (tmp_path / (JOURNAL_FILE + ".migrated")).exists()


def test_a_journal_of_another_cluster_is_refused(tmp_path: Path) -> None:
    _journal(tmp_path)
    with pytest.raises(MetadataDirError, match="belongs to cluster 'legacy', not 'mine'"):
        convert_journal(tmp_path, configured_cluster_id="mine")
    assert (tmp_path / JOURNAL_FILE).exists()  # untouched


def test_an_unfinished_conversion_is_removed_and_the_journal_kept(tmp_path: Path) -> None:
    _journal(tmp_path)
    (tmp_path / CONVERTING_DIR).mkdir()
    (tmp_path / CONVERTING_DIR / "raft.log").write_bytes(b"half")
    finish_or_clean_conversion(tmp_path)
    assert not (tmp_path / CONVERTING_DIR).exists()
    assert (tmp_path / JOURNAL_FILE).exists()
    assert not is_formatted(tmp_path)


def test_a_finished_conversion_only_lacked_the_renames(tmp_path: Path) -> None:
    _journal(tmp_path)
    convert_journal(tmp_path, configured_cluster_id=None)
    # A crash before the renames: the journal files are back.
    (tmp_path / (JOURNAL_FILE + ".migrated")).rename(tmp_path / JOURNAL_FILE)
    (tmp_path / SNAPSHOT_FILE).write_bytes(b"")
    finish_or_clean_conversion(tmp_path)
    assert not (tmp_path / JOURNAL_FILE).exists()
    assert not (tmp_path / SNAPSHOT_FILE).exists()
    assert is_formatted(tmp_path)


def test_a_formatted_directory_of_another_cluster_is_refused(tmp_path: Path) -> None:
    format_directory(tmp_path, cluster_id="one", can_vote=True)
    with pytest.raises(MetadataDirError, match="belongs to cluster 'one', not 'two'"):
        open_storage(tmp_path, cluster_id="two")
    open_storage(tmp_path, cluster_id=None).close()
