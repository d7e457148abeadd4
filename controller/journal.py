"""The single-controller metadata format (before the quorum): an append-only journal plus an
atomic snapshot. Today's controllers keep their metadata in the Raft log (`quorum`); a
directory in this format is read once and converted (`metadata_dir.convert_journal`), and
its `Snapshot` struct is the data of the Raft snapshots (`metadata_log`).

Files in the data directory:
- `metadata.journal`: frames `[u32 length][u32 CRC-32C of payload][payload]`, little-endian;
  the payload is a msgpack `JournalEntry(offset, record)`. Offsets are contiguous from 1
  and never reused, across snapshots and restarts.
- `metadata.snapshot`: one frame whose payload is `Snapshot(offset, records)`, the records
  that rebuild the state as of `offset`. Written tmp + fsync + rename + directory fsync;
  then the journal is emptied (entries at or below the snapshot offset are skipped, so a
  crash between the two steps is harmless).

`append` writes all records of one request with one write and one fsync: a reply is sent
only after it returns. Replay tolerates a torn or corrupt *final* frame (a crash in the
middle of a write), truncating it with a WARNING; a bad frame followed by more data is
corruption of committed metadata and refuses to start.

Synchronous file I/O; single writer (the controller's request loop).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Final

import crc32c
import msgspec

from controller.model import ClusterState
from controller.records import Record
from controller.state_machine import replay, snapshot_records

logger = logging.getLogger(__name__)

JOURNAL_FILE: Final = "metadata.journal"
SNAPSHOT_FILE: Final = "metadata.snapshot"
FRAME_HEADER: Final = struct.Struct("<II")  # payload length, CRC-32C of payload
FRAME_PAYLOAD_BYTES_MAX: Final = 256 * 1024 * 1024


class JournalCorruptError(Exception):
    """Committed metadata is damaged (not a torn tail): refuse to start rather than guess."""


class JournalFailedError(Exception):
    """An earlier write failed: the journal refuses further appends (the controller stops)."""


class JournalEntry(msgspec.Struct, frozen=True, kw_only=True):
    offset: int
    record: Record


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    offset: int
    records: list[Record]
    broker_offsets: dict[int, int] = msgspec.field(default_factory=dict)


_encoder = msgspec.msgpack.Encoder()
_entry_decoder = msgspec.msgpack.Decoder(JournalEntry)
_snapshot_decoder = msgspec.msgpack.Decoder(Snapshot)


def encode_frame(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


class Journal:
    """Open with `Journal.open(directory)`, which also returns the replayed state."""

    def __init__(
        self, directory: Path, file: BinaryIO, *, last_offset: int, snapshot_offset: int
    ) -> None:
        self._directory = directory
        self._file = file
        self._last_offset = last_offset
        self._snapshot_offset = snapshot_offset
        self._size_bytes = file.seek(0, os.SEEK_END)
        self._failed = False

    @classmethod
    def open(cls, directory: Path) -> tuple[Journal, ClusterState]:
        directory.mkdir(parents=True, exist_ok=True)
        state = ClusterState()
        snapshot_offset = 0
        snapshot_path = directory / SNAPSHOT_FILE
        if snapshot_path.exists():
            snapshot = _read_snapshot(snapshot_path)
            snapshot_offset = snapshot.offset
            for record in snapshot.records:
                state = replay(state, snapshot.offset, record)
            offsets = {**state.broker_offsets, **snapshot.broker_offsets}
            state = msgspec.structs.replace(state, broker_offsets=offsets)
        journal_path = directory / JOURNAL_FILE
        state, last_offset = _replay_journal(journal_path, state, snapshot_offset)
        file = open(journal_path, "ab")  # noqa: SIM115 (owned by the Journal, closed in close())
        _fsync_directory(directory)
        journal = cls(directory, file, last_offset=last_offset, snapshot_offset=snapshot_offset)
        logger.info(
            "metadata replayed from %s: snapshot offset %d, last offset %d, controller epoch %d",
            directory,
            snapshot_offset,
            last_offset,
            state.controller_epoch,
        )
        return journal, state

    @property
    def last_offset(self) -> int:
        return self._last_offset

    @property
    def records_since_snapshot(self) -> int:
        return self._last_offset - self._snapshot_offset

    def append(self, records: Sequence[Record]) -> int:
        """Durably append `records` (one write, one fsync); return the last offset.

        On an I/O error the partial write is cut off (best effort), the journal refuses
        every later append (`JournalFailedError`) and the error propagates: the records
        were not committed and the controller must stop.
        """
        if self._failed:
            raise JournalFailedError("an earlier journal write failed")
        if not records:
            return self._last_offset
        frames = []
        offset = self._last_offset
        for record in records:
            offset += 1
            frames.append(encode_frame(_encoder.encode(JournalEntry(offset=offset, record=record))))
        data = b"".join(frames)
        file = self._file
        try:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        except OSError:
            self._failed = True
            logger.exception("journal write failed at offset %d", self._last_offset + 1)
            with contextlib.suppress(OSError):
                file.truncate(self._size_bytes)
            raise
        self._size_bytes += len(data)
        self._last_offset = offset
        return offset

    def write_snapshot(self, state: ClusterState) -> None:
        """Atomically replace the snapshot with `state`, then empty the journal."""
        assert state.metadata_offset == self._last_offset, "snapshot of a stale state"
        payload = _encoder.encode(
            Snapshot(
                offset=state.metadata_offset,
                records=snapshot_records(state),
                broker_offsets=state.broker_offsets,
            )
        )
        temporary = self._directory / (SNAPSHOT_FILE + ".tmp")
        with open(temporary, "wb") as file:
            file.write(encode_frame(payload))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self._directory / SNAPSHOT_FILE)
        _fsync_directory(self._directory)
        journal = self._file
        journal.truncate(0)
        journal.flush()
        os.fsync(journal.fileno())
        self._size_bytes = 0
        self._snapshot_offset = state.metadata_offset
        logger.info("metadata snapshot written at offset %d", state.metadata_offset)

    def close(self) -> None:
        self._file.close()


def _read_snapshot(path: Path) -> Snapshot:
    data = path.read_bytes()
    if len(data) < FRAME_HEADER.size:
        raise JournalCorruptError(f"snapshot {path} is truncated ({len(data)} bytes)")
    length, checksum = FRAME_HEADER.unpack_from(data)
    payload = data[FRAME_HEADER.size : FRAME_HEADER.size + length]
    if len(payload) != length or crc32c.crc32c(payload) != checksum:
        raise JournalCorruptError(f"snapshot {path} fails its CRC check")
    try:
        return _snapshot_decoder.decode(payload)
    except msgspec.DecodeError as error:
        raise JournalCorruptError(f"snapshot {path} cannot be decoded: {error}") from error


def _replay_journal(
    path: Path, state: ClusterState, snapshot_offset: int
) -> tuple[ClusterState, int]:
    if not path.exists():
        return state, snapshot_offset
    data = path.read_bytes()
    position = 0
    last_offset = snapshot_offset
    while position < len(data):
        problem, entry, end = _read_frame(data, position)
        if problem is not None:
            if end < len(data):
                raise JournalCorruptError(
                    f"journal {path} is corrupt at byte {position} ({problem}) and "
                    f"{len(data) - end} bytes follow: committed metadata is damaged"
                )
            logger.warning(
                "journal %s: truncating a torn final record at byte %d (%s, %d bytes)",
                path,
                position,
                problem,
                len(data) - position,
            )
            with open(path, "r+b") as file:
                file.truncate(position)
                file.flush()
                os.fsync(file.fileno())
            break
        assert entry is not None
        if entry.offset > snapshot_offset:
            if entry.offset != last_offset + 1:
                raise JournalCorruptError(
                    f"journal {path}: offset {entry.offset} follows {last_offset} at byte "
                    f"{position}"
                )
            state = replay(state, entry.offset, entry.record)
            last_offset = entry.offset
        position = end
    return state, last_offset


def _read_frame(data: bytes, position: int) -> tuple[str | None, JournalEntry | None, int]:
    """(problem or None, entry, end of the frame as far as it can be told)."""
    if len(data) - position < FRAME_HEADER.size:
        return "incomplete frame header", None, len(data)
    length, checksum = FRAME_HEADER.unpack_from(data, position)
    start = position + FRAME_HEADER.size
    if length > FRAME_PAYLOAD_BYTES_MAX or start + length > len(data):
        return f"frame of {length} bytes runs past the end", None, len(data)
    payload = data[start : start + length]
    end = start + length
    if crc32c.crc32c(payload) != checksum:
        return "CRC mismatch", None, end
    try:
        return None, _entry_decoder.decode(payload), end
    except msgspec.DecodeError as error:
        return f"undecodable record: {error}", None, end


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
