"""Producer-state snapshot files of one partition directory: `<offset>.producers`.

A snapshot at offset N holds the idempotent-producer state after every batch below N
(what it holds is the replica layer's business: this module stores opaque bytes). It
lets a broker rebuild that state by scanning only the log after the newest snapshot,
instead of the whole log (Kafka's `ProducerStateManager` snapshots, same idea). Files
are written atomically on the log's `Disk`; a snapshot above the log end offset (the log
was truncated below it) is invalid and must be deleted before the state is rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from broker.log.checkpoint import atomic_write
from broker.log.disk import OS_DISK, Disk

SUFFIX: Final = ".producers"


def path_of(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def offsets(directory: Path) -> list[int]:
    """Offsets of the snapshots in `directory`, ascending."""
    found: list[int] = []
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        stem, suffix = entry.name[: -len(SUFFIX)], entry.name[-len(SUFFIX) :]
        if suffix == SUFFIX and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def write(directory: Path, offset: int, payload: bytes, *, disk: Disk = OS_DISK) -> None:
    atomic_write(path_of(directory, offset), payload, disk=disk)


def read(directory: Path, offset: int, *, disk: Disk = OS_DISK) -> bytes:
    return disk.read_bytes(path_of(directory, offset))


def delete(directory: Path, offset: int, *, disk: Disk = OS_DISK) -> None:
    disk.unlink(path_of(directory, offset), missing_ok=True)


def delete_above(directory: Path, offset: int, *, disk: Disk = OS_DISK) -> None:
    """Drop the snapshots past `offset` (the log no longer reaches them)."""
    for found in offsets(directory):
        if found > offset:
            delete(directory, found, disk=disk)


def retain_newest(directory: Path, keep: int, *, disk: Disk = OS_DISK) -> None:
    for found in offsets(directory)[:-keep]:
        delete(directory, found, disk=disk)
