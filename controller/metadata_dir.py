"""A controller's data directory: formatting it, converting a single-controller journal,
and deciding whether a new directory may vote.

The metadata log lives in `<data dir>/raft` (`raft.file_storage`), formatted once with the
cluster id and a new directory id. What a new directory may do depends on the cluster
(issue 18, item 4), decided by `format_decision` from what the other voters answer
(`DescribeQuorum`):

- a peer of another cluster answers: REFUSE (a node never joins another cluster's quorum);
- a peer already holds metadata (an epoch, a log, or itself a catching-up directory): the
  cluster exists and this directory is new or was wiped: JOIN, formatted with
  `can_vote=False`: it neither votes nor stands until it has caught up from the leader
  (a wiped voter could otherwise elect a leader that lacks committed metadata);
- enough voters answer (with this one, a majority) and none has metadata: a NEW cluster,
  formatted with `can_vote=True`;
- otherwise WAIT and ask again (never guess: a wiped voter whose peers are all down waits
  until one of them is back).

A quorum of one needs no peers: NEW at once. A data directory that holds the journal of
a single controller (`metadata.journal` / `metadata.snapshot`, before the quorum) is
converted once, for a quorum of one only: its state becomes the first Raft snapshot
(end offset = its last metadata offset, epoch = its controller epoch, and the vote state
starts at that epoch so the next election issues a larger controller epoch); the journal
files are then renamed `*.migrated`. The conversion is built in `raft.converting` and
renamed into place, so a crash leaves either the old journal or the finished Raft log.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from controller.journal import JOURNAL_FILE, SNAPSHOT_FILE, Journal
from controller.metadata_log import encode_snapshot
from controller.raft.file_storage import META_FILE, FileRaftStorage, RaftStorageError
from controller.raft.messages import Snapshot, VoteState
from controller.raft.rules import majority

logger = logging.getLogger(__name__)

RAFT_DIR: Final = "raft"
CONVERTING_DIR: Final = "raft.converting"
MIGRATED_SUFFIX: Final = ".migrated"


class MetadataDirError(Exception):
    """The directory cannot be used (another cluster, a journal a quorum cannot take...)."""


class PeerAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What one other voter said about itself."""

    node_id: int
    cluster_id: str  # "" when it does not know (unformatted without --cluster-id)
    formatted: bool
    epoch: int
    log_end_offset: int
    can_vote: bool


class Decision(enum.Enum):
    NEW_CLUSTER = "new cluster"
    JOIN_EXISTING = "join existing cluster"
    WAIT = "wait"
    REFUSE = "refuse"


class FormatDecision(msgspec.Struct, frozen=True, kw_only=True):
    decision: Decision
    reason: str


def format_decision(
    *, cluster_id: str, voter_count: int, answers: Sequence[PeerAnswer]
) -> FormatDecision:
    """How to format a new directory of `cluster_id`, given the other voters' answers."""
    for answer in answers:
        if answer.cluster_id and answer.cluster_id != cluster_id:
            return FormatDecision(
                decision=Decision.REFUSE,
                reason=f"controller {answer.node_id} belongs to cluster {answer.cluster_id!r}, "
                f"not {cluster_id!r}",
            )
    for answer in answers:
        if answer.formatted and (
            answer.epoch > 0 or answer.log_end_offset > 0 or not answer.can_vote
        ):
            return FormatDecision(
                decision=Decision.JOIN_EXISTING,
                reason=f"controller {answer.node_id} already holds metadata (epoch "
                f"{answer.epoch}, log end {answer.log_end_offset}): this directory catches up "
                "before it votes",
            )
    known = [answer for answer in answers if answer.cluster_id]
    if 1 + len(known) >= majority(voter_count):
        return FormatDecision(
            decision=Decision.NEW_CLUSTER,
            reason=f"{1 + len(known)} of {voter_count} voters answered and none holds metadata",
        )
    return FormatDecision(
        decision=Decision.WAIT,
        reason=f"{1 + len(known)} of {voter_count} voters reachable, a majority "
        f"({majority(voter_count)}) is needed to tell a new cluster from a wiped directory",
    )


def raft_dir(data_dir: Path) -> Path:
    return data_dir / RAFT_DIR


def is_formatted(data_dir: Path) -> bool:
    return (raft_dir(data_dir) / META_FILE).exists()


def has_journal(data_dir: Path) -> bool:
    return (data_dir / JOURNAL_FILE).exists() or (data_dir / SNAPSHOT_FILE).exists()


def start_problem(data_dir: Path, *, voter_count: int, cluster_id: str | None) -> str | None:
    """Why a controller with this directory and quorum cannot start (None: it can), for the
    cases that need no peer to tell: a larger quorum needs a cluster id to format, and
    cannot take over a single controller's journal."""
    if is_formatted(data_dir) or voter_count == 1:
        return None
    if has_journal(data_dir):
        return (
            f"{data_dir} holds a single-controller metadata journal: start it once as a quorum "
            "of one (without --quorum) to convert it; a larger quorum cannot take it over"
        )
    if cluster_id is None:
        return (
            f"a quorum of {voter_count} controllers needs --cluster-id (the same on every "
            f"controller) to format the new data directory {data_dir}"
        )
    return None


def new_directory_id() -> str:
    return uuid.uuid4().hex


def format_directory(data_dir: Path, *, cluster_id: str, can_vote: bool) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    FileRaftStorage.format(
        raft_dir(data_dir),
        cluster_id=cluster_id,
        directory_id=new_directory_id(),
        can_vote=can_vote,
    )
    _fsync_directory(data_dir)
    logger.info(
        "formatted %s for cluster %s (%s)",
        raft_dir(data_dir),
        cluster_id,
        "may vote" if can_vote else "votes once caught up from the leader",
    )


def finish_or_clean_conversion(data_dir: Path) -> None:
    """Recover from a crash during `convert_journal`: an unfinished conversion is deleted
    (the journal is still there); a finished one only lacked the renames."""
    converting = data_dir / CONVERTING_DIR
    if converting.exists():
        logger.warning("removing the unfinished journal conversion %s", converting)
        shutil.rmtree(converting)
    if is_formatted(data_dir) and has_journal(data_dir):
        _retire_journal(data_dir)


def convert_journal(data_dir: Path, *, configured_cluster_id: str | None) -> str:
    """Turn a single-controller journal into the first Raft snapshot; returns the cluster id.

    Refuses a journal that names another cluster than `configured_cluster_id`."""
    journal, state = Journal.open(data_dir)
    journal.close()
    if not state.cluster_id:
        raise MetadataDirError(f"the journal in {data_dir} holds no cluster id")
    if configured_cluster_id is not None and configured_cluster_id != state.cluster_id:
        raise MetadataDirError(
            f"the journal in {data_dir} belongs to cluster {state.cluster_id!r}, not "
            f"{configured_cluster_id!r}"
        )
    epoch = max(1, state.controller_epoch)
    converting = data_dir / CONVERTING_DIR
    if converting.exists():
        shutil.rmtree(converting)
    FileRaftStorage.format(
        converting, cluster_id=state.cluster_id, directory_id=new_directory_id(), can_vote=True
    )
    storage = FileRaftStorage.open(converting, cluster_id=state.cluster_id)
    try:
        if state.metadata_offset > 0:
            storage.install_snapshot(
                Snapshot(end_offset=state.metadata_offset, epoch=epoch, data=encode_snapshot(state))
            )
        storage.write_vote(VoteState(epoch=epoch))
        storage.sync()
    finally:
        storage.close()
    os.replace(converting, raft_dir(data_dir))
    _fsync_directory(data_dir)
    _retire_journal(data_dir)
    logger.warning(
        "converted the single-controller journal in %s into the Raft metadata log (cluster %s, "
        "metadata offset %d, controller epoch %d); the journal files are kept as *%s",
        data_dir,
        state.cluster_id,
        state.metadata_offset,
        state.controller_epoch,
        MIGRATED_SUFFIX,
    )
    return state.cluster_id


def _retire_journal(data_dir: Path) -> None:
    for name in (JOURNAL_FILE, SNAPSHOT_FILE):
        path = data_dir / name
        if path.exists():
            os.replace(path, data_dir / (name + MIGRATED_SUFFIX))
    _fsync_directory(data_dir)


def open_storage(data_dir: Path, *, cluster_id: str | None) -> FileRaftStorage:
    """Open the formatted Raft storage; refuse it when it belongs to another cluster."""
    try:
        return FileRaftStorage.open(raft_dir(data_dir), cluster_id=cluster_id)
    except RaftStorageError as error:
        raise MetadataDirError(str(error)) from error


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
