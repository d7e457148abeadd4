"""The core's in-memory view of its log: entries from the log start plus their epoch cache.

The core changes this view and, in the same step, returns the persistence action that
makes the stored log match it; the stored log may lag behind (until `persisted`) but never
runs ahead of what the core decided. Offsets below `start_offset` live only in the
snapshot, whose epoch is `start_epoch` (0 when the log starts at offset 0).

Not thread-safe; owned by one `RaftNode`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from controller.raft.messages import Entry, Snapshot
from controller.raft.rules import EpochStart


class RaftLog:
    __slots__ = ("_entries", "_epochs", "start_epoch", "start_offset")

    def __init__(self, *, start_offset: int, start_epoch: int, entries: Sequence[Entry]) -> None:
        if start_offset < 0 or start_epoch < 0:
            raise ValueError(f"bad log start {start_offset} / epoch {start_epoch}")
        if (start_offset == 0) != (start_epoch == 0):
            raise ValueError(f"log start {start_offset} with snapshot epoch {start_epoch}")
        self.start_offset = start_offset
        self.start_epoch = start_epoch
        self._entries: list[Entry] = []
        self._epochs: list[EpochStart] = [(start_epoch, start_offset)] if start_epoch else []
        self.append(entries)

    # ---- reading --------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self._entries)

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self.start_epoch

    @property
    def epochs(self) -> Sequence[EpochStart]:
        return self._epochs

    def entry(self, offset: int) -> Entry:
        if not self.start_offset <= offset < self.end_offset:
            raise IndexError(f"offset {offset} outside [{self.start_offset}, {self.end_offset})")
        return self._entries[offset - self.start_offset]

    def epoch_at(self, offset: int) -> int:
        """Epoch of the entry at `offset`, which may be the last one in the snapshot."""
        if offset == self.start_offset - 1:
            return self.start_epoch
        return self.entry(offset).epoch

    def read(self, start: int, *, max_entries: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from `start`: at most `max_entries`, and at least one even if it alone is
        larger than `max_bytes`."""
        if not self.start_offset <= start <= self.end_offset:
            raise IndexError(f"read at {start} outside [{self.start_offset}, {self.end_offset}]")
        first = start - self.start_offset
        last = min(len(self._entries), first + max_entries)
        size_bytes = 0
        for index in range(first, last):
            size_bytes += len(self._entries[index].payload)
            if size_bytes > max_bytes and index > first:
                last = index
                break
        return tuple(self._entries[first:last])

    def entries_between(self, start: int, end: int) -> tuple[Entry, ...]:
        return tuple(self._entries[start - self.start_offset : end - self.start_offset])

    # ---- changing -------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        epochs = self._epochs
        for entry in entries:
            last = epochs[-1][0] if epochs else 0
            if entry.epoch < last:
                raise ValueError(f"entry epoch {entry.epoch} after epoch {last}")
            if entry.epoch > last:
                epochs.append((entry.epoch, self.end_offset))
            self._entries.append(entry)

    def truncate(self, end_offset: int) -> None:
        """Drop every entry at or above `end_offset`."""
        if not self.start_offset <= end_offset <= self.end_offset:
            raise ValueError(
                f"truncate to {end_offset} outside [{self.start_offset}, {self.end_offset}]"
            )
        del self._entries[end_offset - self.start_offset :]
        epochs = self._epochs
        cut = bisect.bisect_left([start for _, start in epochs], end_offset)
        # Keep the snapshot's epoch: it covers the offsets below the log start.
        del epochs[max(cut, 1 if self.start_epoch else 0) :]

    def drop_prefix(self, snapshot: Snapshot) -> None:
        """The snapshot now holds everything below its end offset (which is in this log)."""
        end = snapshot.end_offset
        if not self.start_offset < end <= self.end_offset:
            raise ValueError(f"snapshot end {end} outside ({self.start_offset}, {self.end_offset}]")
        if self.epoch_at(end - 1) != snapshot.epoch:
            raise ValueError(f"snapshot epoch {snapshot.epoch} != epoch of entry {end - 1}")
        del self._entries[: end - self.start_offset]
        # The snapshot's epoch is the first one known; where it started is no longer known
        # (only where it ends matters for divergence), so it is recorded at the new start.
        later = [
            (epoch, start)
            for epoch, start in self._epochs
            if start >= end and epoch > snapshot.epoch
        ]
        self._epochs = [(snapshot.epoch, end), *later]
        self.start_offset = end
        self.start_epoch = snapshot.epoch

    def reset(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot`: the log restarts, empty, at its end offset."""
        if snapshot.end_offset <= 0 or snapshot.epoch <= 0:
            raise ValueError(f"not a snapshot position: {snapshot.snapshot_id}")
        self._entries = []
        self._epochs = [(snapshot.epoch, snapshot.end_offset)]
        self.start_offset = snapshot.end_offset
        self.start_epoch = snapshot.epoch
