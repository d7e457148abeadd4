"""One log segment: a `<20-digit base offset>.log` file of whole batches plus its sparse index.

Synchronous file I/O on a raw descriptor (`pread`/`pwritev`, no buffering) of the
log's `Disk` (its calls bound once, at construction), single writer. The descriptor is
opened on first use and may be closed at any time between two calls by the broker's
`FileBudget` (least recently used first); the next call opens it again, so a segment
costs a descriptor only while it is in use. The segment never decides policy:
`PartitionLog` tells it where to append, truncate or roll. Invariants: the file holds
concatenated batches exactly as `minikafka.record_batch` defines them, `size` is the
file length, every index entry points at the start of a batch.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from broker.log.disk import OS_DISK, Disk
from broker.log.file_budget import FileBudget
from broker.log.index import OffsetIndex
from minikafka.record_batch import (
    HEADER_SIZE,
    LENGTH_PREFIX_SIZE,
    BatchHeader,
    CorruptBatchError,
    parse_header,
)

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
#: Bytes read at a time when scanning a segment.
SCAN_CHUNK_BYTES: Final = 1024 * 1024

# base_offset, batch_length at 0; last_offset_delta at 27; max_timestamp_ms at 39.
_PREFIX = struct.Struct("<qi")
_LAST_DELTA = struct.Struct("<i")
_TIMESTAMP = struct.Struct("<q")
_LAST_DELTA_POS: Final = 27
_MAX_TIMESTAMP_POS: Final = 39
_IOV_MAX: Final = 512


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """Base offset of a `<20 digits>.log` file name, None for any other name."""
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class BatchPeek:
    """The few header fields the read path needs, decoded without validation."""

    __slots__ = ("base_offset", "last_offset", "max_timestamp_ms", "size")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.base_offset, length = _PREFIX.unpack_from(buf, pos)
        self.size: int = length + LENGTH_PREFIX_SIZE
        self.last_offset: int = (
            self.base_offset + _LAST_DELTA.unpack_from(buf, pos + _LAST_DELTA_POS)[0]
        )
        self.max_timestamp_ms: int = _TIMESTAMP.unpack_from(buf, pos + _MAX_TIMESTAMP_POS)[0]


def _pread_exact(
    pread: Callable[[int, int, int], bytes], fd: int, size: int, position: int
) -> bytes:
    chunks: list[bytes] = []
    while size > 0:
        chunk = pread(fd, size, position)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        position += len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


class LogSegment:
    """A `.log` + `.index` pair. Caller: `PartitionLog` only."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        rolling_base_ms: int,
        create: bool = False,
        files: FileBudget | None = None,
        disk: Disk = OS_DISK,
    ) -> None:
        if files is not None and files.disk is not disk:
            raise ValueError(f"the file budget opens files on {files.disk!r}, not {disk!r}")
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        self.index = OffsetIndex(directory / (segment_name(base_offset) + INDEX_SUFFIX), disk=disk)
        self._files = files if files is not None else FileBudget(max_open=1 << 30, disk=disk)
        self._disk = disk
        # Bound once: the append and read paths call these without attribute chains.
        self._pread = disk.pread
        self._pwrite = disk.pwrite
        self._pwritev = disk.pwritev
        self._ftruncate = disk.ftruncate
        self._fsync = disk.fsync
        self._fd = -1
        self._closed = False
        if create:
            self._fd = self._files.open(
                self, str(self.log_path), os.O_RDWR | os.O_CREAT | os.O_TRUNC
            )
            self.index.discard_file()
            self.size: int = 0
        else:
            self.size = disk.file_size(self.log_path)
        #: Start of the segment's age for time-based rolling.
        self.rolling_base_ms = rolling_base_ms
        self._max_timestamp_ms: int | None = None if self.size else -1
        self._bytes_since_index_entry = 0
        self._dirty = False
        #: Times the file was cut (an index written from an older copy is then stale).
        self.truncations = 0

    # ----------------------------------------------------------------- reading
    def read_at(self, position: int, size: int) -> bytes:
        return _pread_exact(
            self._pread, self._descriptor(), min(size, self.size - position), position
        )

    def peek_at(self, position: int) -> BatchPeek:
        """Header fields of the batch at `position` (trusted data, no validation)."""
        return BatchPeek(_pread_exact(self._pread, self._descriptor(), HEADER_SIZE, position))

    def iter_batches(
        self, start_position: int = 0, *, verify_crc: bool = True
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Validate and yield `(position, header)` from `start_position` to the end.

        Raises `CorruptBatchError` naming the file and position at the first batch that
        is torn or fails validation (header, magic, CRC when `verify_crc`).
        """
        end = self.size
        pos = start_position
        buf = b""
        buf_start = pos
        while pos < end:
            off = pos - buf_start
            need = HEADER_SIZE
            if len(buf) - off >= LENGTH_PREFIX_SIZE:
                need = max(HEADER_SIZE, _PREFIX.unpack_from(buf, off)[1] + LENGTH_PREFIX_SIZE)
            if len(buf) - off < need:
                buf_start, off = pos, 0
                first = _pread_exact(
                    self._pread, self._descriptor(), min(SCAN_CHUNK_BYTES, end - pos), pos
                )
                if len(first) >= LENGTH_PREFIX_SIZE:
                    need = max(HEADER_SIZE, _PREFIX.unpack_from(first, 0)[1] + LENGTH_PREFIX_SIZE)
                if len(first) < need <= end - pos:
                    first += _pread_exact(
                        self._pread, self._descriptor(), need - len(first), pos + len(first)
                    )
                buf = first
            try:
                header = parse_header(buf, off, verify_crc=verify_crc)
            except CorruptBatchError as exc:
                raise CorruptBatchError(f"{self.log_path.name} position {pos}: {exc}") from exc
            yield pos, header
            pos += header.size

    def find_batch(self, offset: int) -> tuple[int, BatchPeek] | None:
        """Position and header of the batch holding `offset`, None if past the end."""
        entry_offset, position = self.index.lookup(offset)
        if entry_offset < 0:
            position = 0
        while position < self.size:
            peek = self.peek_at(position)
            if peek.last_offset >= offset:
                return position, peek
            position += peek.size
        return None

    def read(
        self, position: int, *, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[bytes, int, int]:
        """Whole batches from `position`: `(records, first_offset, next_offset)`.

        `next_offset` is -1 when nothing is returned.
        """
        buf = self.read_at(position, max_bytes) if max_bytes > 0 else b""
        available = len(buf)
        taken = 0
        first_offset = next_offset = -1
        unpack_prefix = _PREFIX.unpack_from
        unpack_delta = _LAST_DELTA.unpack_from
        while available - taken >= HEADER_SIZE:
            base_offset, length = unpack_prefix(buf, taken)
            end = taken + length + LENGTH_PREFIX_SIZE
            if end > available:
                break
            last_offset = base_offset + unpack_delta(buf, taken + _LAST_DELTA_POS)[0]
            if max_offset is not None and last_offset >= max_offset:
                break
            if first_offset < 0:
                first_offset = base_offset
            next_offset = last_offset + 1
            taken = end
        if taken == 0 and min_one_batch and position < self.size:
            peek = self.peek_at(position)
            if max_offset is not None and peek.last_offset >= max_offset:
                return b"", -1, -1
            return self.read_at(position, peek.size), peek.base_offset, peek.last_offset + 1
        return (buf if taken == available else buf[:taken]), first_offset, next_offset

    def next_offset_after(self, position: int) -> int | None:
        """Walk headers from `position` (a batch start) to the end: the offset after the
        last batch, None if there is no batch. Raises `CorruptBatchError` if the walk does
        not land exactly on the end of the file or the last batch fails its CRC."""
        last: tuple[int, BatchHeader] | None = None
        for pos, header in self.iter_batches(position, verify_crc=False):
            last = (pos, header)
        if last is None:
            return None
        pos, _ = last
        header = parse_header(self.read_at(pos, last[1].size))  # CRC of the last batch
        return header.next_offset

    @property
    def max_timestamp_ms(self) -> int:
        """Largest batch max timestamp in the segment (-1 if empty); computed lazily."""
        if self._max_timestamp_ms is None:
            largest = -1
            position = 0
            while position < self.size:
                peek = self.peek_at(position)
                largest = max(largest, peek.max_timestamp_ms)
                position += peek.size
            self._max_timestamp_ms = largest
        return self._max_timestamp_ms

    def first_batch_timestamp_ms(self) -> int | None:
        return self.peek_at(0).max_timestamp_ms if self.size >= HEADER_SIZE else None

    # ----------------------------------------------------------------- writing
    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        positions: Sequence[int],
        base_offsets: Sequence[int],
        *,
        max_timestamp_ms: int,
        index_interval_bytes: int,
    ) -> None:
        """Write `buffers` at the end; `positions` and `base_offsets` list the relative
        position and base offset of each batch in them (for the index), and
        `max_timestamp_ms` is their largest max timestamp."""
        start = self.size
        self._dirty = True
        fd = self._descriptor()
        try:
            if len(buffers) == 1:  # both append paths: one buffer, one pwrite
                total = len(buffers[0])
                written = self._pwrite(fd, buffers[0], start)
            else:
                total = sum(map(len, buffers))
                written = self._pwritev(fd, buffers[:_IOV_MAX], start)
            if written != total:
                self._write_rest(buffers, written, start)
        except OSError:
            self._ftruncate(fd, start)  # never leave a torn batch behind a failed write
            raise
        self._bytes_since_index_entry = self.index.append_sparse(
            positions,
            base_offsets,
            start,
            total,
            bytes_since_entry=self._bytes_since_index_entry,
            interval_bytes=index_interval_bytes,
        )
        if self._max_timestamp_ms is not None and max_timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms = max_timestamp_ms
        self.size = start + total

    def _write_rest(
        self, buffers: Sequence[bytes | bytearray | memoryview], written: int, start: int
    ) -> None:
        """Finish a short `pwritev` (rare: signals, huge requests)."""
        pending: list[bytes | bytearray | memoryview] = [b for b in buffers if len(b)]
        position = start + written
        while True:
            while pending and written >= len(pending[0]):
                written -= len(pending[0])
                pending.pop(0)
            if not pending:
                return
            if written:
                pending[0] = memoryview(pending[0])[written:]
            written = self._pwritev(self._descriptor(), pending[:_IOV_MAX], position)
            position += written

    def rebuild_index(
        self, entries: Sequence[tuple[int, BatchHeader]], index_interval_bytes: int
    ) -> None:
        """Recreate the in-memory index from a validated scan of the whole segment."""
        self.index.clear()
        since = index_interval_bytes
        previous_end = 0
        for position, header in entries:
            since += position - previous_end
            if since >= index_interval_bytes:
                self.index.append(header.base_offset, position)
                since = 0
            since += header.size
            previous_end = position + header.size
        self._bytes_since_index_entry = since

    def reset_index_counter(self, last_entry_position: int) -> None:
        self._bytes_since_index_entry = self.size - last_entry_position

    def truncate_to_position(self, position: int) -> None:
        """Cut the file at `position` (a batch boundary) and drop index entries past it."""
        self._ftruncate(self._descriptor(), position)
        self.truncations += 1
        self.size = position
        self.index.truncate_to_position(position)
        self.index.discard_file()
        last = self.index.last_entry()
        self._bytes_since_index_entry = position - last[1] if last else position
        self._max_timestamp_ms = None if position else -1
        self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def flush(self) -> None:
        """fsync the `.log` if anything was written since the last flush (through a new
        descriptor if the budget closed ours: fsync acts on the file)."""
        if self._dirty and not self._closed:
            self._dirty = False
            self._fsync(self._descriptor())

    def sync(self) -> None:
        """fsync unconditionally (after recovery, whatever this process wrote or not)."""
        self._dirty = False
        self._fsync(self._descriptor())

    @property
    def closed(self) -> bool:
        """Closed for good (the log closed or deleted it), not just evicted by the budget."""
        return self._closed

    def _descriptor(self) -> int:
        fd = self._fd
        if fd >= 0:
            self._files.touch(self)
            return fd
        if self._closed:
            raise OSError(errno.EBADF, f"segment {self.log_path.name} is closed")
        fd = self._fd = self._files.open(self, str(self.log_path), os.O_RDWR)
        return fd

    def release_descriptor(self) -> None:
        """Close the descriptor (the file budget evicts it); the next use reopens it."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            self._disk.close(fd)

    def idle(self) -> None:
        """Give the descriptor back to the budget now (a rolled, cold segment)."""
        self._files.forget(self)
        self.release_descriptor()

    def close(self) -> None:
        self._closed = True
        self._files.forget(self)
        self.release_descriptor()

    def delete_files(self) -> None:
        self.close()
        self._disk.unlink(self.log_path, missing_ok=True)
        self.index.discard_file()
