"""The sparse offset index of one segment: batch base offset -> byte position in the `.log`.

One entry every `index_interval_bytes` of log; lookups are a `bisect` over an in-memory
`array('q')`. On disk (`<base>.index`) it is a flat array of little-endian `(offset,
position)` int64 pairs written atomically on roll and close. The index is a cache: a
missing or invalid file is rebuilt from the `.log`, and any prefix of a valid index is a
valid (less dense) index.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from broker.log import checkpoint
from broker.log.disk import OS_DISK, Disk

_ENTRY: Final = struct.Struct("<qq")
ENTRY_SIZE: Final = _ENTRY.size


def floor_lookup(offsets: array[int], positions: array[int], target: int) -> tuple[int, int]:
    """`(offset, position)` of the last entry with offset <= target, or (-1, 0) if none."""
    index = bisect.bisect_right(offsets, target)
    if index == 0:
        return -1, 0
    return offsets[index - 1], positions[index - 1]


class OffsetIndex:
    """In-memory sparse index of one segment, with load/persist to its `.index` file."""

    def __init__(self, path: Path, *, disk: Disk = OS_DISK) -> None:
        self.path = path
        self.disk = disk
        self.offsets: array[int] = array("q")
        self.positions: array[int] = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; entries must grow strictly in both offset and position."""
        if self.offsets and (offset <= self.offsets[-1] or position <= self.positions[-1]):
            return
        self.offsets.append(offset)
        self.positions.append(position)

    def append_sparse(
        self,
        positions: Sequence[int],
        base_offsets: Sequence[int],
        start: int,
        total_bytes: int,
        *,
        bytes_since_entry: int,
        interval_bytes: int,
    ) -> int:
        """Index the batches of one append of `total_bytes` at log position `start`: batch
        `i` starts at `start + positions[i]` (strictly increasing, the first 0) with base
        offset `base_offsets[i]`. A batch gets an entry (`append`'s rule: entries only
        grow) when at least `interval_bytes` lie between the last entry and its start, or
        when the index is empty (the first batch); `bytes_since_entry` counts the log's
        bytes since the last entry before the append. Returns that count after it.

        Bisects from entry to entry, so the cost follows the entries, not the batches.
        """
        offsets = self.offsets
        entry_positions = self.positions
        count = len(positions)
        anchor = -bytes_since_entry  # relative position of the last entry
        lo = 0
        if not offsets and count:
            offsets.append(base_offsets[0])
            entry_positions.append(start + positions[0])
            anchor = positions[0]
            lo = 1
        while lo < count:
            i = bisect.bisect_left(positions, anchor + interval_bytes, lo)
            if i == count:
                break
            offset, position = base_offsets[i], start + positions[i]
            if not offsets or (offset > offsets[-1] and position > entry_positions[-1]):
                offsets.append(offset)
                entry_positions.append(position)
            anchor = positions[i]
            lo = i + 1
        return total_bytes - anchor

    def lookup(self, target: int) -> tuple[int, int]:
        return floor_lookup(self.offsets, self.positions, target)

    def last_entry(self) -> tuple[int, int] | None:
        if not self.offsets:
            return None
        return self.offsets[-1], self.positions[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at or past `position` (the log was cut there)."""
        keep = bisect.bisect_left(self.positions, position)
        del self.offsets[keep:]
        del self.positions[keep:]

    def clear(self) -> None:
        del self.offsets[:]
        del self.positions[:]

    def encoded(self) -> bytes:
        """The on-disk form of the entries now (a copy: the caller may write it later)."""
        data = array("q")
        for offset, position in zip(self.offsets, self.positions, strict=True):
            data.append(offset)
            data.append(position)
        if sys.byteorder != "little":
            data.byteswap()
        return data.tobytes()

    def persist(self) -> None:
        checkpoint.atomic_write(self.path, self.encoded(), disk=self.disk)

    def discard_file(self) -> None:
        """Remove the on-disk copy (it no longer matches the log after a truncation)."""
        self.disk.unlink(self.path, missing_ok=True)

    def load(self, base_offset: int, log_size: int) -> bool:
        """Load the file if it is plausible for a log of `log_size` bytes; False if not.

        Checks the shape only (whole entries, strictly increasing, inside the log); the
        caller verifies the last entry against the log before trusting it.
        """
        self.clear()
        try:
            raw = self.disk.read_bytes(self.path)
        except FileNotFoundError:
            return False
        if len(raw) % ENTRY_SIZE:
            return False
        data = array("q")
        data.frombytes(raw)
        if sys.byteorder != "little":
            data.byteswap()
        offsets = data[0::2]
        positions = data[1::2]
        previous_offset, previous_position = base_offset - 1, -1
        for offset, position in zip(offsets, positions, strict=True):
            if offset <= previous_offset or position <= previous_position or position >= log_size:
                return False
            previous_offset, previous_position = offset, position
        self.offsets, self.positions = offsets, positions
        return True
