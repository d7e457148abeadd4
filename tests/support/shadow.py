"""The unsynced state of one file, shared by the two power-losing disks.

`Shadow` is the model "unsynced data is lost, the namespace is not" for one file's
contents: the backing file holds exactly what the last fsync covered, and the shadow
holds what was written or truncated since, in memory, until the next fsync writes it
through (`sync_to`). A power loss drops the shadow. The FUSE file system of the fault
suite (`tests.support.lazyfs`) and the simulator's disk (`tests.support.sim_disk`) both
keep one shadow per file, so the two cannot disagree on what a power loss keeps.
"""

from __future__ import annotations

import os

__all__ = ["Shadow"]


class Shadow:
    """The unsynced state of one file: its logical size, how much of the synced file
    still shows through (`keep`, lowered by truncation) and the writes since the last
    sync, in order (consecutive appends are merged into one buffer)."""

    __slots__ = ("keep", "size", "writes")

    def __init__(self, synced_size: int) -> None:
        self.size = synced_size
        self.keep = synced_size
        self.writes: list[tuple[int, bytearray]] = []

    def write(self, offset: int, data: bytes) -> None:
        if self.writes:
            last_offset, last = self.writes[-1]
            if last_offset + len(last) == offset:
                last += data
                self.size = max(self.size, offset + len(data))
                return
        self.writes.append((offset, bytearray(data)))
        self.size = max(self.size, offset + len(data))

    def truncate(self, length: int) -> None:
        self.size = length
        self.keep = min(self.keep, length)
        kept: list[tuple[int, bytearray]] = []
        for offset, data in self.writes:
            if offset < length:
                kept.append((offset, data[: length - offset]))
        self.writes = kept

    def read(self, fd: int | None, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if end <= offset:
            return b""
        out = bytearray(end - offset)
        if fd is not None and offset < self.keep:
            synced = os.pread(fd, min(end, self.keep) - offset, offset)
            out[: len(synced)] = synced
        for start, data in self.writes:
            lo, hi = max(start, offset), min(start + len(data), end)
            if lo < hi:
                out[lo - offset : hi - offset] = data[lo - start : hi - start]
        return bytes(out)

    def sync_to(self, fd: int) -> None:
        """Make the backing file equal to the logical contents, durably."""
        os.ftruncate(fd, self.keep)
        for offset, data in self.writes:
            os.pwrite(fd, data, offset)
        os.ftruncate(fd, self.size)
        os.fsync(fd)
