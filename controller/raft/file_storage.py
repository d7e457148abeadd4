"""File-backed `RaftStorage`: one log file, an atomic vote-state file, snapshot files.

Files in the data directory (created by `FileRaftStorage.format`):

- `raft-meta.json`: `{"version": 1, "cluster_id": ..., "directory_id": ...}`, written once.
- `quorum-state`: one frame holding the msgpack `VoteState`; replaced atomically (tmp +
  fsync + rename + directory fsync).
- `raft.log`: frames `[u32 length][u32 CRC-32C of payload][payload]`, little-endian; the
  payload is the msgpack `[offset, epoch, kind, data]` of one entry. Offsets are
  contiguous. Appends are buffered until `sync` (one fsync for many entries).
- `snapshot-<20-digit end offset>-<10-digit epoch>.snap`: one frame holding the msgpack
  `Snapshot`; written atomically. Only the newest is kept.

Order: operations reach the disk in call order. Appends are the only unsynced operation;
everything else (`truncate`, `write_vote`, `write_snapshot`, `install_snapshot`) first
syncs the log and is durable when it returns. So a crash loses at most the appends since
the last `sync`, never an earlier operation (the contract in `storage`).

Recovery (`open`): temporary files are deleted; the newest snapshot wins; a torn final frame
of the log (a crash in the middle of an unsynced append) is cut off with a WARNING; a bad
frame followed by a good one, or a gap in the offsets, is corruption of data this node may
have acknowledged: `RaftStorageCorruptError`, the node refuses to start (the operator can
wipe the directory: a re-formatted directory does not vote until it has caught up). Log
entries already covered by the snapshot are dropped; a log that does not continue the
snapshot's history (a crash while installing one) is emptied.

Synchronous file I/O, single writer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, Final

import crc32c
import msgspec

from controller.raft.messages import Entry, EntryKind, Snapshot, VoteState
from controller.raft.storage import PersistentState

logger = logging.getLogger(__name__)

META_FILE: Final = "raft-meta.json"
VOTE_FILE: Final = "quorum-state"
LOG_FILE: Final = "raft.log"
FORMAT_VERSION: Final = 1
FRAME_HEADER: Final = struct.Struct("<II")  # payload length, CRC-32C of payload
FRAME_PAYLOAD_BYTES_MAX: Final = 64 * 1024 * 1024
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d{20})-(\d{10})\.snap$")


class RaftStorageError(Exception):
    """The directory cannot be used as Raft storage (not formatted, another cluster...)."""


class RaftStorageCorruptError(RaftStorageError):
    """Data this node may have acknowledged is damaged: refuse to start rather than guess."""


class _LogRecord(msgspec.Struct, array_like=True, frozen=True):
    offset: int
    epoch: int
    kind: int
    data: bytes


_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(_LogRecord)
_vote_decoder = msgspec.msgpack.Decoder(VoteState)
_snapshot_decoder = msgspec.msgpack.Decoder(Snapshot)


def _frame(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def _read_frame(data: bytes, position: int) -> tuple[str | None, bytes, int]:
    """(problem or None, payload, end of the frame as far as it can be told)."""
    if len(data) - position < FRAME_HEADER.size:
        return "incomplete frame header", b"", len(data)
    length, checksum = FRAME_HEADER.unpack_from(data, position)
    start = position + FRAME_HEADER.size
    if length > FRAME_PAYLOAD_BYTES_MAX or start + length > len(data):
        return f"frame of {length} bytes runs past the end", b"", len(data)
    payload = data[start : start + length]
    if crc32c.crc32c(payload) != checksum:
        return "CRC mismatch", b"", start + length
    return None, payload, start + length


def snapshot_file_name(snapshot: Snapshot) -> str:
    return f"snapshot-{snapshot.end_offset:020d}-{snapshot.epoch:010d}.snap"


class FileRaftStorage:
    """Open with `FileRaftStorage.open(directory)` after `format` (see the module docstring)."""

    def __init__(self, directory: Path, *, cluster_id: str, directory_id: str) -> None:
        self._directory = directory
        self.cluster_id = cluster_id
        self.directory_id = directory_id
        self._log_path = directory / LOG_FILE
        self._file: BinaryIO | None = None
        self._log_start = 0
        self._positions: list[int] = []  # byte position of each entry's frame
        self._size_bytes = 0
        self._unsynced = False
        self._failed = False

    # ---- lifecycle ------------------------------------------------------------------------

    @classmethod
    def format(cls, directory: Path, *, cluster_id: str, directory_id: str, can_vote: bool) -> None:
        """Prepare an empty directory. `can_vote` True only for the voters of a brand-new
        cluster; a directory formatted into an existing cluster (a replaced or wiped disk)
        must catch up from the leader before it votes."""
        if not cluster_id or not directory_id:
            raise ValueError("cluster_id and directory_id must be non-empty")
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / META_FILE).exists():
            raise RaftStorageError(f"{directory} is already formatted")
        leftovers = sorted(
            path.name
            for path in directory.iterdir()
            if path.name.startswith((VOTE_FILE, LOG_FILE)) or _SNAPSHOT_NAME.match(path.name)
        )
        if leftovers:
            raise RaftStorageError(f"{directory} holds Raft files but no {META_FILE}: {leftovers}")
        meta = {"version": FORMAT_VERSION, "cluster_id": cluster_id, "directory_id": directory_id}
        _write_atomically(
            directory, VOTE_FILE, _frame(_encoder.encode(VoteState(can_vote=can_vote)))
        )
        (directory / LOG_FILE).touch()
        _write_atomically(directory, META_FILE, json.dumps(meta, sort_keys=True).encode())

    @classmethod
    def open(cls, directory: Path, *, cluster_id: str | None = None) -> FileRaftStorage:
        """Recover the directory (see the module docstring) and open the log for appends.
        With `cluster_id`, refuse a directory of another cluster."""
        meta = _read_meta(directory)
        if cluster_id is not None and meta["cluster_id"] != cluster_id:
            raise RaftStorageError(
                f"{directory} belongs to cluster {meta['cluster_id']!r}, not {cluster_id!r}"
            )
        storage = cls(directory, cluster_id=meta["cluster_id"], directory_id=meta["directory_id"])
        storage._recover()
        return storage

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # ---- RaftStorage ----------------------------------------------------------------------

    def load(self) -> PersistentState:
        snapshot = self._read_latest_snapshot()
        entries = self._read_entries()
        return PersistentState(
            cluster_id=self.cluster_id,
            directory_id=self.directory_id,
            vote=self._read_vote(),
            snapshot=snapshot,
            log_start_offset=self._log_start,
            entries=tuple(entries),
        )

    def append(self, base_offset: int, entries: Sequence[Entry]) -> None:
        self._check_usable()
        end = self._log_start + len(self._positions)
        if base_offset != end:
            raise RaftStorageError(f"append at {base_offset} but the log ends at {end}")
        frames = []
        position = self._size_bytes
        positions = []
        for index, entry in enumerate(entries):
            record = _LogRecord(base_offset + index, entry.epoch, int(entry.kind), entry.payload)
            frame = _frame(_encoder.encode(record))
            positions.append(position)
            position += len(frame)
            frames.append(frame)
        self._guarded(lambda file: file.write(b"".join(frames)))
        self._positions.extend(positions)
        self._size_bytes = position
        self._unsynced = True

    def truncate(self, end_offset: int) -> None:
        self._check_usable()
        end = self._log_start + len(self._positions)
        if not self._log_start <= end_offset <= end:
            raise RaftStorageError(f"truncate to {end_offset} outside [{self._log_start}, {end}]")
        self.sync()
        if end_offset == end:
            return
        cut = self._positions[end_offset - self._log_start]

        def truncate(file: BinaryIO) -> None:
            file.flush()
            file.truncate(cut)
            file.seek(cut)
            os.fsync(file.fileno())

        self._guarded(truncate)
        del self._positions[end_offset - self._log_start :]
        self._size_bytes = cut
        self._unsynced = False

    def write_vote(self, vote: VoteState) -> None:
        self._check_usable()
        self.sync()
        _write_atomically(self._directory, VOTE_FILE, _frame(_encoder.encode(vote)))

    def write_snapshot(self, snapshot: Snapshot) -> None:
        """Store the snapshot, then rewrite the log without the entries it covers."""
        self._check_usable()
        end = self._log_start + len(self._positions)
        if not self._log_start <= snapshot.end_offset <= end:
            raise RaftStorageError(
                f"snapshot at {snapshot.end_offset} outside the log [{self._log_start}, {end}]"
            )
        self.sync()
        self._store_snapshot(snapshot)
        keep_from = self._positions[snapshot.end_offset - self._log_start :]
        first = keep_from[0] if keep_from else self._size_bytes
        self._rewrite_log(self._log_path.read_bytes()[first:], snapshot.end_offset)
        self._delete_old_snapshots(snapshot)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Store the snapshot and start an empty log at its end offset."""
        self._check_usable()
        self.sync()
        self._store_snapshot(snapshot)
        self._rewrite_log(b"", snapshot.end_offset)
        self._delete_old_snapshots(snapshot)

    def sync(self) -> None:
        self._check_usable()
        if self._unsynced:

            def fsync(file: BinaryIO) -> None:
                file.flush()
                os.fsync(file.fileno())

            self._guarded(fsync)
            self._unsynced = False

    # ---- internals ------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failed:
            raise RaftStorageError("an earlier write failed: the storage refuses further writes")
        if self._file is None:
            raise RaftStorageError("storage is closed")

    def _guarded(self, operation: Callable[[BinaryIO], object]) -> None:
        """Run a write on the log file; on an I/O error refuse every later write (the node
        must stop: what reached the disk is unknown)."""
        assert self._file is not None
        try:
            operation(self._file)
        except OSError:
            self._failed = True
            logger.exception("Raft log write failed in %s", self._directory)
            raise

    def _store_snapshot(self, snapshot: Snapshot) -> None:
        _write_atomically(
            self._directory, snapshot_file_name(snapshot), _frame(_encoder.encode(snapshot))
        )

    def _delete_old_snapshots(self, keep: Snapshot) -> None:
        for path in self._directory.iterdir():
            match = _SNAPSHOT_NAME.match(path.name)
            if match and path.name != snapshot_file_name(keep):
                path.unlink()
        _fsync_directory(self._directory)

    def _rewrite_log(self, frames: bytes, log_start: int) -> None:
        """Atomically replace the log by `frames`, whose first entry is at `log_start`."""
        self.close()
        _write_atomically(self._directory, LOG_FILE, frames)
        self._log_start = log_start
        self._open_log()

    def _open_log(self) -> None:
        data = self._log_path.read_bytes()
        positions = []
        position = 0
        while position < len(data):
            positions.append(position)
            _, _, position = _read_frame(data, position)
        self._positions = positions
        self._size_bytes = len(data)
        self._file = open(self._log_path, "r+b")  # noqa: SIM115 (closed in close())
        self._file.seek(0, os.SEEK_END)
        self._unsynced = False

    def _recover(self) -> None:
        directory = self._directory
        for path in directory.iterdir():
            if path.name.endswith(".tmp"):
                logger.warning("removing %s left by an interrupted write", path)
                path.unlink()
        snapshot = self._read_latest_snapshot()
        if snapshot is not None:
            self._delete_old_snapshots(snapshot)
        self._read_vote()  # fails early on a damaged vote file
        records, valid_bytes, data = self._scan_log()
        snapshot_end = snapshot.end_offset if snapshot is not None else 0
        first = records[0].offset if records else snapshot_end
        if first > snapshot_end or (snapshot is None and first != 0):
            raise RaftStorageCorruptError(
                f"log in {directory} starts at {first}, but the snapshot ends at {snapshot_end}"
            )
        if snapshot is not None and first < snapshot_end:
            # A crash between storing a snapshot and rewriting the log.
            covered = snapshot_end - first
            continues = covered <= len(records) and records[covered - 1].epoch == snapshot.epoch
            keep = records[covered:] if continues else []
            logger.warning(
                "Raft log in %s: dropping %d entries up to the snapshot at %d%s",
                directory,
                len(records) - len(keep),
                snapshot_end,
                "" if continues else " (the log does not continue the snapshot)",
            )
            frames = b"".join(_frame(_encoder.encode(record)) for record in keep)
            _write_atomically(directory, LOG_FILE, frames)
            first = snapshot_end
        elif valid_bytes < len(data):
            logger.warning(
                "Raft log in %s: cutting a torn final frame at byte %d (%d bytes)",
                directory,
                valid_bytes,
                len(data) - valid_bytes,
            )
            _write_atomically(directory, LOG_FILE, data[:valid_bytes])
        self._log_start = first
        self._open_log()

    def _scan_log(self) -> tuple[list[_LogRecord], int, bytes]:
        """(valid records, bytes they span, the file's bytes); raises on corruption."""
        path = self._log_path
        data = path.read_bytes() if path.exists() else b""
        records: list[_LogRecord] = []
        position = 0
        while position < len(data):
            problem, payload, end = _read_frame(data, position)
            record = None
            if problem is None:
                try:
                    record = _record_decoder.decode(payload)
                except msgspec.DecodeError as error:
                    problem = f"undecodable entry: {error}"
            if problem is not None or record is None:
                if _has_valid_frame_after(data, end):
                    raise RaftStorageCorruptError(
                        f"log {path} is damaged at byte {position} ({problem}) and valid "
                        "entries follow: data this node may have acknowledged is lost"
                    )
                break
            if records and (
                record.offset != records[-1].offset + 1 or record.epoch < records[-1].epoch
            ):
                raise RaftStorageCorruptError(
                    f"log {path}: entry {record.offset} (epoch {record.epoch}) follows "
                    f"{records[-1].offset} (epoch {records[-1].epoch}) at byte {position}"
                )
            records.append(record)
            position = end
        return records, position, data

    def _read_entries(self) -> list[Entry]:
        records, _, _ = self._scan_log()
        return [Entry(record.epoch, record.data, EntryKind(record.kind)) for record in records]

    def _read_vote(self) -> VoteState:
        path = self._directory / VOTE_FILE
        if not path.exists():
            raise RaftStorageCorruptError(f"{path} is missing")
        data = path.read_bytes()
        problem, payload, end = _read_frame(data, 0)
        if problem is not None or end != len(data):
            raise RaftStorageCorruptError(f"{path} is damaged ({problem or 'trailing bytes'})")
        try:
            return _vote_decoder.decode(payload)
        except msgspec.DecodeError as error:
            raise RaftStorageCorruptError(f"{path} cannot be decoded: {error}") from error

    def _read_latest_snapshot(self) -> Snapshot | None:
        names = sorted(
            path.name for path in self._directory.iterdir() if _SNAPSHOT_NAME.match(path.name)
        )
        if not names:
            return None
        path = self._directory / names[-1]
        data = path.read_bytes()
        problem, payload, end = _read_frame(data, 0)
        if problem is not None or end != len(data):
            raise RaftStorageCorruptError(
                f"snapshot {path} is damaged ({problem or 'trailing bytes'})"
            )
        try:
            snapshot = _snapshot_decoder.decode(payload)
        except msgspec.DecodeError as error:
            raise RaftStorageCorruptError(f"snapshot {path} cannot be decoded: {error}") from error
        if snapshot_file_name(snapshot) != path.name:
            raise RaftStorageCorruptError(f"snapshot {path} holds {snapshot.snapshot_id}")
        return snapshot


def _has_valid_frame_after(data: bytes, position: int) -> bool:
    """Whether a complete frame with a good CRC starts anywhere at or after `position`
    (after a torn frame the next frame boundary is unknown, so every byte is tried)."""
    for start in range(position, len(data) - FRAME_HEADER.size + 1):
        problem, payload, _ = _read_frame(data, start)
        if problem is None and payload:
            with contextlib.suppress(msgspec.DecodeError):
                _record_decoder.decode(payload)
                return True
    return False


def _read_meta(directory: Path) -> dict[str, str]:
    path = directory / META_FILE
    if not path.exists():
        raise RaftStorageError(f"{directory} is not formatted for Raft (no {META_FILE})")
    try:
        meta = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise RaftStorageCorruptError(f"{path} cannot be read: {error}") from error
    if not isinstance(meta, dict) or meta.get("version") != FORMAT_VERSION:
        raise RaftStorageError(f"{path}: unsupported format {meta!r}")
    cluster_id, directory_id = meta.get("cluster_id"), meta.get("directory_id")
    if not isinstance(cluster_id, str) or not isinstance(directory_id, str):
        raise RaftStorageCorruptError(f"{path} lacks cluster_id/directory_id")
    return {"cluster_id": cluster_id, "directory_id": directory_id}


def _write_atomically(directory: Path, name: str, data: bytes) -> None:
    temporary = directory / (name + ".tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, directory / name)
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
