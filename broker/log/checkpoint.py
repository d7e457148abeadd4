"""Atomic small-file writes and the text checkpoint formats (Kafka's layout).

Every small file is written as tmp + fsync + rename + fsync of the directory, so a
reader sees either the old or the new content, never a torn one; a leftover `.tmp`
from a crash is never read. Every function takes the `Disk` to use (production's by
default). Formats (version line `0`, a count line, then entries):

    offset checkpoints        epoch checkpoint
    0                         0
    2                         2
    orders 0 1500             0 0
    orders 1 42               3 1200
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from broker.log.disk import OS_DISK, Disk
from broker.log.errors import LogStorageError

CHECKPOINT_VERSION: Final = 0
TMP_SUFFIX: Final = ".tmp"


def fsync_dir(directory: Path, *, disk: Disk = OS_DISK) -> None:
    """Make a rename/creation/unlink inside `directory` durable."""
    disk.fsync_directory(directory)


def atomic_write(path: Path, data: bytes, *, disk: Disk = OS_DISK) -> None:
    """Replace `path` with `data` atomically and durably (tmp + fsync + rename + dir fsync)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = disk.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        position = 0
        while position < len(view):
            position += disk.pwrite(fd, view[position:], position)
        disk.fsync(fd)
    finally:
        disk.close(fd)
    disk.replace(tmp, path)
    disk.fsync_directory(path.parent)


def _format(entries: Iterable[str]) -> bytes:
    lines = list(entries)
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode()


def _parse(path: Path, fields: int, disk: Disk) -> list[list[str]]:
    """Split a checkpoint into entry rows of `fields` whitespace-separated columns."""
    try:
        text = disk.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogStorageError(f"checkpoint {path} is not UTF-8 text") from exc
    lines = text.splitlines()
    if len(lines) < 2:
        raise LogStorageError(f"checkpoint {path} is truncated: {len(lines)} lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise LogStorageError(f"checkpoint {path} has unsupported version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError as exc:
        raise LogStorageError(f"checkpoint {path} has a bad count line {lines[1]!r}") from exc
    rows = [line.rsplit(maxsplit=fields - 1) for line in lines[2:] if line.strip()]
    if count != len(rows):
        raise LogStorageError(f"checkpoint {path} says {count} entries but holds {len(rows)}")
    for row in rows:
        if len(row) != fields:
            raise LogStorageError(f"checkpoint {path} has a malformed entry {' '.join(row)!r}")
    return rows


def _int(path: Path, value: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise LogStorageError(f"checkpoint {path} has a non-integer field {value!r}") from exc


def write_offsets(
    path: Path, offsets: Mapping[tuple[str, int], int], *, disk: Disk = OS_DISK
) -> None:
    """Write a `topic partition offset` checkpoint atomically (sorted for stable diffs)."""
    for topic, _ in offsets:
        if not topic or any(c.isspace() for c in topic):
            raise ValueError(f"topic name {topic!r} cannot be stored in a checkpoint")
    atomic_write(path, _format(f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())), disk=disk)


def read_offsets(path: Path, *, disk: Disk = OS_DISK) -> dict[tuple[str, int], int]:
    """Read a `topic partition offset` checkpoint; a missing file is empty.

    Raises `LogStorageError` naming the problem when the file is malformed.
    """
    if not path.exists():
        return {}
    return {
        (topic, _int(path, partition)): _int(path, offset)
        for topic, partition, offset in _parse(path, 3, disk)
    }


def write_epochs(path: Path, entries: Iterable[tuple[int, int]], *, disk: Disk = OS_DISK) -> None:
    """Write a leader-epoch checkpoint (`epoch start_offset` lines) atomically."""
    atomic_write(path, _format(f"{epoch} {start}" for epoch, start in entries), disk=disk)


def read_epochs(path: Path, *, disk: Disk = OS_DISK) -> list[tuple[int, int]]:
    """Read a leader-epoch checkpoint; a missing file is empty; malformed raises."""
    if not path.exists():
        return []
    return [(_int(path, epoch), _int(path, start)) for epoch, start in _parse(path, 2, disk)]
