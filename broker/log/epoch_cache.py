"""The leader epoch cache: where each leader epoch starts in this replica's log (KIP-101/279).

Invariant: entries are strictly increasing in both `epoch` and `start_offset`. The
lookups and updates are pure functions over a list of entries (unit-tested on their
own); `LeaderEpochCache` holds the list and persists it to `leader-epoch-checkpoint`.

Semantics follow Kafka's `LeaderEpochFileCache`:
- `assign` adds an entry only for a new epoch (or an earlier start of the latest epoch)
  and first drops every entry that would break monotonicity, with a warning.
- `end_offset_for(requested, leo)` answers OffsetForLeaderEpoch (see its docstring).
- `truncate_from_end` follows a log truncation; `truncate_from_start` follows a log start
  offset increase, moving the first surviving epoch's start up to the new log start.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import Final

import msgspec

from broker.log import checkpoint
from broker.log.disk import OS_DISK, Disk
from broker.log.errors import LogStorageError

logger = logging.getLogger(__name__)

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1
CHECKPOINT_NAME: Final = "leader-epoch-checkpoint"


class EpochEntry(msgspec.Struct, frozen=True):
    """Epoch `epoch` starts at `start_offset` in this log."""

    epoch: int
    start_offset: int


def assign_entry(entries: list[EpochEntry], epoch: int, start_offset: int) -> list[EpochEntry]:
    """Entries after recording that `epoch` starts at `start_offset` (unchanged if not new)."""
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
    if entries:
        latest = entries[-1]
        if latest.epoch == epoch and start_offset >= latest.start_offset:
            return entries
    kept = list(entries)
    removed: list[EpochEntry] = []
    while kept and (kept[-1].epoch >= epoch or kept[-1].start_offset >= start_offset):
        removed.append(kept.pop())
    if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
        logger.warning(
            "new epoch entry (%s, %s) conflicts with cached entries %s; dropping them",
            epoch,
            start_offset,
            [(e.epoch, e.start_offset) for e in reversed(removed)],
        )
    kept.append(EpochEntry(epoch, start_offset))
    return kept


def end_offset_for(
    entries: list[EpochEntry], requested_epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """OffsetForLeaderEpoch: `(epoch, end_offset)` for `requested_epoch`.

    - requested is UNDEFINED, the cache is empty, or requested > every epoch: (-1, -1);
    - requested is the latest epoch: (requested, log_end_offset);
    - otherwise the largest known epoch <= requested and the start offset of the first
      epoch after it (KIP-279); if every known epoch is larger than requested, Kafka's
      answer (requested, start of the first epoch): that data is gone from the log.
    """
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if entries[-1].epoch == requested_epoch:
        return requested_epoch, log_end_offset
    epochs = [e.epoch for e in entries]
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if higher == 0:
        return requested_epoch, entries[0].start_offset
    return entries[higher - 1].epoch, entries[higher].start_offset


def epoch_for_offset(entries: list[EpochEntry], offset: int) -> int | None:
    """The epoch whose range holds `offset` (None if before the first entry)."""
    starts = [e.start_offset for e in entries]
    index = bisect.bisect_right(starts, offset)
    return entries[index - 1].epoch if index else None


def truncate_entries_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    """Drop entries starting at or after `end_offset` (the new log end)."""
    return [e for e in entries if e.start_offset < end_offset]


def truncate_entries_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    """Drop entries wholly below `start_offset`; the epoch holding it now starts there."""
    kept = [e for e in entries if e.start_offset > start_offset]
    covering = [e for e in entries if e.start_offset <= start_offset]
    if covering:
        kept.insert(0, EpochEntry(covering[-1].epoch, start_offset))
    return kept


class LeaderEpochCache:
    """Sorted epoch -> start offset of one partition, persisted in `leader-epoch-checkpoint`.

    Caller: `PartitionLog` (appends, truncation, retention) and the replica layer
    (`end_offset_for` on the leader, `latest_epoch` on the follower). Changes are kept
    in memory and written by `flush()` (called by the log on truncation, flush and close).
    """

    def __init__(
        self, path: Path, entries: list[EpochEntry] | None = None, *, disk: Disk = OS_DISK
    ) -> None:
        self.path = path
        self.disk = disk
        self._entries: list[EpochEntry] = list(entries or [])
        self._dirty = False

    @classmethod
    def load(cls, path: Path, *, disk: Disk = OS_DISK) -> LeaderEpochCache:
        """Read the checkpoint at `path`; raises `LogStorageError` if it is malformed."""
        raw = checkpoint.read_epochs(path, disk=disk)
        entries: list[EpochEntry] = []
        for epoch, start in raw:
            if entries and (epoch <= entries[-1].epoch or start <= entries[-1].start_offset):
                raise LogStorageError(f"leader epoch checkpoint {path} is not monotonic")
            if epoch < 0 or start < 0:
                raise LogStorageError(f"leader epoch checkpoint {path} has negative entries")
            entries.append(EpochEntry(epoch, start))
        return cls(path, entries, disk=disk)

    def _set(self, entries: list[EpochEntry]) -> None:
        if entries != self._entries:
            self._entries = entries
            self._dirty = True

    def assign(self, epoch: int, start_offset: int) -> None:
        entries = self._entries
        if entries and entries[-1].epoch == epoch and start_offset >= entries[-1].start_offset:
            return  # the latest epoch again (every leader append): `assign_entry` keeps all
        self._set(assign_entry(entries, epoch, start_offset))

    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        return end_offset_for(self._entries, requested_epoch, log_end_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        return epoch_for_offset(self._entries, offset)

    def truncate_from_end(self, end_offset: int) -> None:
        self._set(truncate_entries_from_end(self._entries, end_offset))

    def truncate_from_start(self, start_offset: int) -> None:
        self._set(truncate_entries_from_start(self._entries, start_offset))

    def clear(self) -> None:
        self._set([])

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def flush(self) -> None:
        """Write the checkpoint atomically if anything changed since the last flush."""
        if self._dirty or not self.path.exists():
            checkpoint.write_epochs(
                self.path, ((e.epoch, e.start_offset) for e in self._entries), disk=self.disk
            )
            self._dirty = False
