"""The storage port of the Raft core, its recovered state, and an in-memory implementation.

The core never touches a disk: it returns persistence actions (see `actions`) and the shell
hands them to a `RaftStorage` with `perform`, then calls `sync` and reports the highest
durable `seq` back to the core. Two implementations:

- `InMemoryStorage` (here): durable state plus a list of unsynced operations; `crash`
  keeps only what was synced (optionally a prefix of the unsynced operations, as a disk
  that happened to write some of them back). Used by the simulation and unit tests.
- `file_storage.FileRaftStorage`: the real one (log file, vote file, snapshot files).

Contract of every implementation: operations take effect in call order; after `sync`
returns, every earlier operation is durable; a crash loses at most a suffix of the
operations since the last `sync`, never an earlier one. `load` returns the state to start a
core from (`RaftNode(config, storage.load(), ...)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from controller.raft.actions import (
    AppendEntries,
    InstallSnapshot,
    PersistenceAction,
    PersistVote,
    TruncateLog,
    WriteSnapshot,
)
from controller.raft.messages import Entry, Snapshot, VoteState


class PersistentState(msgspec.Struct, frozen=True, kw_only=True):
    """What survived: identity, vote state, the latest snapshot and the log after it.

    `entries` start at `log_start_offset`, which is the snapshot's end offset (0 without a
    snapshot). `directory_id` names this data directory (a new one on every format).
    """

    cluster_id: str
    directory_id: str
    vote: VoteState
    snapshot: Snapshot | None
    log_start_offset: int
    entries: tuple[Entry, ...]

    def __post_init__(self) -> None:
        expected = self.snapshot.end_offset if self.snapshot is not None else 0
        if self.log_start_offset != expected:
            raise ValueError(
                f"log starts at {self.log_start_offset} but the snapshot ends at {expected}"
            )


class RaftStorage(Protocol):
    """What the shell needs from a node's durable storage (see the module docstring)."""

    def load(self) -> PersistentState: ...

    def write_vote(self, vote: VoteState) -> None: ...

    def append(self, base_offset: int, entries: Sequence[Entry]) -> None: ...

    def truncate(self, end_offset: int) -> None: ...

    def write_snapshot(self, snapshot: Snapshot) -> None:
        """Store the snapshot, then drop the log entries below its end offset."""
        ...

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Store the snapshot and empty the log (it restarts at the snapshot's end)."""
        ...

    def sync(self) -> None: ...


def perform(storage: RaftStorage, action: PersistenceAction) -> None:
    """Hand one persistence action to the storage (not yet synced)."""
    if isinstance(action, AppendEntries):
        storage.append(action.base_offset, action.entries)
    elif isinstance(action, PersistVote):
        storage.write_vote(action.vote)
    elif isinstance(action, TruncateLog):
        storage.truncate(action.end_offset)
    elif isinstance(action, WriteSnapshot):
        storage.write_snapshot(action.snapshot)
    else:
        storage.install_snapshot(action.snapshot)


class StorageMismatchError(Exception):
    """An operation does not fit the stored log (a bug in the caller or the core)."""


class _Image:
    """One consistent copy of the stored state (mutable, in memory)."""

    __slots__ = ("entries", "log_start_offset", "snapshot", "vote")

    def __init__(self, vote: VoteState) -> None:
        self.vote = vote
        self.snapshot: Snapshot | None = None
        self.log_start_offset = 0
        self.entries: list[Entry] = []

    def apply(self, operation: PersistenceAction) -> None:
        end = self.log_start_offset + len(self.entries)
        if isinstance(operation, PersistVote):
            self.vote = operation.vote
        elif isinstance(operation, AppendEntries):
            if operation.base_offset != end:
                raise StorageMismatchError(
                    f"append at {operation.base_offset} but the log ends at {end}"
                )
            self.entries.extend(operation.entries)
        elif isinstance(operation, TruncateLog):
            if not self.log_start_offset <= operation.end_offset <= end:
                raise StorageMismatchError(f"truncate to {operation.end_offset} outside the log")
            del self.entries[operation.end_offset - self.log_start_offset :]
        else:
            snapshot = operation.snapshot
            if isinstance(operation, WriteSnapshot) and (
                self.log_start_offset <= snapshot.end_offset <= end
            ):
                del self.entries[: snapshot.end_offset - self.log_start_offset]
            else:  # installed from the leader: the log restarts empty
                self.entries = []
            self.snapshot = snapshot
            self.log_start_offset = snapshot.end_offset


class InMemoryStorage:
    """A `RaftStorage` in memory with explicit crash semantics (for simulations and tests).

    `crash(keep_unsynced=n)` loses every operation since the last `sync` except the first
    `n` of them (a disk writes back in order; with n = 0 only synced data survives).
    """

    def __init__(self, *, cluster_id: str, directory_id: str, can_vote: bool = True) -> None:
        self.cluster_id = cluster_id
        self.directory_id = directory_id
        self._durable = _Image(VoteState(can_vote=can_vote))
        self._unsynced: list[PersistenceAction] = []
        self.syncs = 0

    @property
    def unsynced_count(self) -> int:
        return len(self._unsynced)

    def load(self) -> PersistentState:
        image = self._durable
        return PersistentState(
            cluster_id=self.cluster_id,
            directory_id=self.directory_id,
            vote=image.vote,
            snapshot=image.snapshot,
            log_start_offset=image.log_start_offset,
            entries=tuple(image.entries),
        )

    def write_vote(self, vote: VoteState) -> None:
        self._unsynced.append(PersistVote(seq=0, vote=vote))

    def append(self, base_offset: int, entries: Sequence[Entry]) -> None:
        self._unsynced.append(AppendEntries(seq=0, base_offset=base_offset, entries=tuple(entries)))

    def truncate(self, end_offset: int) -> None:
        self._unsynced.append(TruncateLog(seq=0, end_offset=end_offset))

    def write_snapshot(self, snapshot: Snapshot) -> None:
        self._unsynced.append(WriteSnapshot(seq=0, snapshot=snapshot))

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._unsynced.append(InstallSnapshot(seq=0, snapshot=snapshot))

    def sync(self) -> None:
        for operation in self._unsynced:
            self._durable.apply(operation)
        self._unsynced.clear()
        self.syncs += 1

    def crash(self, *, keep_unsynced: int = 0) -> None:
        for operation in self._unsynced[:keep_unsynced]:
            self._durable.apply(operation)
        self._unsynced.clear()
