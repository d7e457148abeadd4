"""Producer-state snapshot files of one partition directory: `<offset>.producers`.

A snapshot at offset N holds the idempotent-producer state after every batch below N
(what it holds is the replica layer's business: this module stores opaque bytes). It
lets a broker rebuild that state by scanning only the log after the newest snapshot,
instead of the whole log (Kafka's `ProducerStateManager` snapshots, same idea). Files
are written atomically; a snapshot above the log end offset (the log was truncated
below it) is invalid and must be deleted before the state is rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from broker.log.checkpoint import atomic_write

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


def write(directory: Path, offset: int, payload: bytes) -> None:
    atomic_write(path_of(directory, offset), payload)


def read(directory: Path, offset: int) -> bytes:
    return path_of(directory, offset).read_bytes()


def delete(directory: Path, offset: int) -> None:
    path_of(directory, offset).unlink(missing_ok=True)


def delete_above(directory: Path, offset: int) -> None:
    """Drop the snapshots past `offset` (the log no longer reaches them)."""
    for found in offsets(directory):
        if found > offset:
            delete(directory, found)


def retain_newest(directory: Path, keep: int) -> None:
    for found in offsets(directory)[:-keep]:
        delete(directory, found)
