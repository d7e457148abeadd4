"""The simulator's disk loses exactly what the fault suite's lazyfs loses.

One table of file-operation sequences, each with the files a power loss leaves behind,
run against `SimDisk` and against lazyfs's FUSE operations called directly (no mount
needed: its memory is the cache a power loss drops, so a power loss is a fresh
operations object over the same backing directory). Both disks must also show a reader
the same contents before the power loss.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Protocol

import pytest

from broker.log.partition_log import PartitionLog
from tests.support.sim_disk import SimDisk
from tests.unit.broker.log.storage_helpers import SMALL, batch_bytes, fill

#: An operation: ("create" | "open" | "close" | "sync" | "unlink", name),
#: ("write", name, offset, data), ("truncate", name, length), ("rename", old, new).
Op = tuple[Any, ...]


class _Driver(Protocol):
    def run(self, op: Op) -> None: ...

    def read(self, name: str) -> bytes | None: ...

    def power_loss(self) -> None: ...


class _SimDriver:
    """`SimDisk` through the `Disk` port, as the storage layer calls it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.disk = SimDisk()
        self.fds: dict[str, int] = {}

    def run(self, op: Op) -> None:
        kind, name = op[0], op[1]
        disk, path = self.disk, self.root / name
        if kind == "create":
            self.fds[name] = disk.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        elif kind == "open":
            self.fds[name] = disk.open(str(path), os.O_RDWR)
        elif kind == "close":
            disk.close(self.fds.pop(name))
        elif kind == "write":
            disk.pwrite(self.fds[name], op[3], op[2])
        elif kind == "truncate":
            disk.ftruncate(self.fds[name], op[2])
        elif kind == "sync":
            disk.fsync(self.fds[name])
        elif kind == "rename":
            disk.replace(path, self.root / op[2])
        elif kind == "unlink":
            disk.unlink(path)
        else:
            raise AssertionError(kind)

    def read(self, name: str) -> bytes | None:
        try:
            return self.disk.read_bytes(self.root / name)
        except FileNotFoundError:
            return None

    def power_loss(self) -> None:
        self.disk.power_loss()
        self.fds.clear()


class _LazyDriver:
    """lazyfs's FUSE operations, called as the kernel would for the same calls."""

    def __init__(self, root: Path) -> None:
        lazyfs = pytest.importorskip("tests.support.lazyfs")
        try:
            self.operations_class = lazyfs._operations_class()
        except OSError as exc:  # mfusepy without libfuse
            pytest.skip(f"mfusepy unavailable: {exc}")
        self.root = root
        self.ops = self.operations_class(str(root))
        self.fhs: dict[str, int] = {}

    def run(self, op: Op) -> None:
        kind, name = op[0], op[1]
        ops, path = self.ops, "/" + name
        if kind == "create":
            if (self.root / name).exists():
                self.fhs[name] = ops.open(path, os.O_WRONLY | os.O_TRUNC)
            else:
                self.fhs[name] = ops.create(path, 0o644)
        elif kind == "open":
            self.fhs[name] = ops.open(path, os.O_RDWR)
        elif kind == "close":
            ops.release(path, self.fhs.pop(name))
        elif kind == "write":
            ops.write(path, op[3], op[2], self.fhs[name])
        elif kind == "truncate":
            ops.truncate(path, op[2], self.fhs[name])
        elif kind == "sync":
            ops.fsync(path, 0, self.fhs[name])
        elif kind == "rename":
            ops.rename(path, "/" + op[2])
        elif kind == "unlink":
            ops.unlink(path)
        else:
            raise AssertionError(kind)

    def read(self, name: str) -> bytes | None:
        if not (self.root / name).exists():
            return None
        size = self.ops.getattr("/" + name)["st_size"]
        return bytes(self.ops.read("/" + name, size, 0, 0))

    def power_loss(self) -> None:
        self.ops = self.operations_class(str(self.root))  # the old one's memory is gone
        self.fhs.clear()


_SYNCED_ABC: list[Op] = [("create", "a"), ("write", "a", 0, b"abc"), ("sync", "a")]

#: (name, operations, files a power loss leaves: name -> contents, None for absent)
ROWS: list[tuple[str, list[Op], dict[str, bytes | None]]] = [
    (
        "an unsynced write is lost, the file is not",
        [("create", "a"), ("write", "a", 0, b"abc"), ("close", "a")],
        {"a": b""},
    ),
    ("a synced write survives", _SYNCED_ABC, {"a": b"abc"}),
    (
        "an append after the sync is cut at the sync",
        [*_SYNCED_ABC, ("write", "a", 3, b"def")],
        {"a": b"abc"},
    ),
    (
        "an unsynced overwrite is undone",
        [*_SYNCED_ABC, ("write", "a", 1, b"ZZ")],
        {"a": b"abc"},
    ),
    (
        "an unsynced truncation is undone",
        [*_SYNCED_ABC, ("truncate", "a", 1)],
        {"a": b"abc"},
    ),
    (
        "a synced truncation and rewrite survive",
        [*_SYNCED_ABC, ("truncate", "a", 1), ("write", "a", 1, b"XY"), ("sync", "a")],
        {"a": b"aXY"},
    ),
    (
        "a write past the end leaves a hole of zeros",
        [("create", "a"), ("write", "a", 4, b"z"), ("sync", "a")],
        {"a": b"\0\0\0\0z"},
    ),
    (
        "close is no durability point, an fsync through a new descriptor is",
        [
            ("create", "a"),
            ("write", "a", 0, b"abc"),
            ("close", "a"),
            ("open", "a"),
            ("sync", "a"),
        ],
        {"a": b"abc"},
    ),
    (
        "fsync covers its own file only",
        [
            ("create", "a"),
            ("create", "b"),
            ("write", "a", 0, b"abc"),
            ("write", "b", 0, b"def"),
            ("sync", "a"),
        ],
        {"a": b"abc", "b": b""},
    ),
    (
        "tmp + fsync + rename (a checkpoint) survives",
        [
            ("create", "a.tmp"),
            ("write", "a.tmp", 0, b"new"),
            ("sync", "a.tmp"),
            ("close", "a.tmp"),
            ("rename", "a.tmp", "a"),
        ],
        {"a": b"new", "a.tmp": None},
    ),
    (
        "a rename of an unsynced file leaves an empty file",
        [
            ("create", "a.tmp"),
            ("write", "a.tmp", 0, b"new"),
            ("close", "a.tmp"),
            ("rename", "a.tmp", "a"),
        ],
        {"a": b"", "a.tmp": None},
    ),
    (
        "an unsynced file renamed over a synced one loses both contents",
        [
            *_SYNCED_ABC,
            ("close", "a"),
            ("create", "b"),
            ("write", "b", 0, b"new"),
            ("rename", "b", "a"),
        ],
        {"a": b"", "b": None},
    ),
    (
        "an unlink survives",
        [*_SYNCED_ABC, ("close", "a"), ("unlink", "a")],
        {"a": None},
    ),
    (
        "an unsynced O_TRUNC re-create brings the old contents back",
        [*_SYNCED_ABC, ("close", "a"), ("create", "a"), ("write", "a", 0, b"x")],
        {"a": b"abc"},
    ),
]


@pytest.mark.parametrize("driver", [_SimDriver, _LazyDriver], ids=["SimDisk", "lazyfs"])
@pytest.mark.parametrize(
    ("ops", "after"), [pytest.param(ops, after, id=name) for name, ops, after in ROWS]
)
def test_power_loss_keeps_what_was_synced(
    tmp_path: Path,
    driver: type[_SimDriver | _LazyDriver],
    ops: list[Op],
    after: dict[str, bytes | None],
) -> None:
    disk: _Driver = driver(tmp_path)
    for op in ops:
        disk.run(op)
    disk.power_loss()
    assert {name: disk.read(name) for name in after} == after


@pytest.mark.parametrize(("ops", "after"), [pytest.param(ops, a, id=n) for n, ops, a in ROWS])
def test_readers_see_the_same_contents_before_the_power_loss(
    tmp_path: Path, ops: list[Op], after: dict[str, bytes | None]
) -> None:
    (tmp_path / "sim").mkdir()
    (tmp_path / "lazy").mkdir()
    sim, lazy = _SimDriver(tmp_path / "sim"), _LazyDriver(tmp_path / "lazy")
    for op in ops:
        sim.run(op)
        lazy.run(op)
        assert [sim.read(name) for name in after] == [lazy.read(name) for name in after], op


def test_a_process_crash_keeps_unsynced_writes_and_closes_descriptors(tmp_path: Path) -> None:
    disk = SimDisk()
    path = tmp_path / "a"
    fd = disk.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
    disk.pwrite(fd, b"abc", 0)
    disk.process_exit()
    with pytest.raises(OSError) as raised:
        disk.pwrite(fd, b"x", 0)
    assert raised.value.errno == errno.EBADF
    assert (disk.read_bytes(path), disk.file_size(path), path.read_bytes()) == (b"abc", 3, b"")
    assert disk.unsynced_paths() == [str(path)]
    disk.power_loss()
    assert (disk.read_bytes(path), disk.unsynced_paths()) == (b"", [])


def test_rmtree_and_directory_renames_move_the_unsynced_state(tmp_path: Path) -> None:
    disk = SimDisk()
    disk.mkdir(tmp_path / "p")
    fd = disk.open(str(tmp_path / "p" / "a"), os.O_RDWR | os.O_CREAT, 0o644)
    disk.pwrite(fd, b"abc", 0)
    disk.close(fd)
    disk.replace(tmp_path / "p", tmp_path / "q")
    assert disk.read_bytes(tmp_path / "q" / "a") == b"abc"
    disk.rmtree(tmp_path / "q")
    assert (disk.unsynced_paths(), (tmp_path / "q").exists()) == ([], False)


def _open_log(directory: Path, disk: SimDisk, *, recovery_point: int) -> PartitionLog:
    return PartitionLog.open(
        directory,
        SMALL,
        topic="orders",
        partition=0,
        recovery_point=recovery_point,
        log_start_offset=0,
        high_watermark=0,
        clean_shutdown=False,
        now_ms=0,
        disk=disk,
    )


def test_a_partition_log_on_a_sim_disk_keeps_what_its_flush_covered(tmp_path: Path) -> None:
    """The real storage classes on a SimDisk: after a power loss the log recovers to its
    last flush (segments rolled since then come back empty), and no file but those
    segments had unsynced writes (every small file is written tmp + fsync + rename)."""
    disk = SimDisk()
    log = _open_log(tmp_path / "orders-0", disk, recovery_point=0)
    fill(log, 40)
    log.flush()
    flushed, end, segments = batch_bytes(log), log.log_end_offset, len(log._segments)
    fill(log, 40, epoch=1)
    assert len(log._segments) > segments  # the unflushed appends rolled segments
    unsynced = {Path(p).suffix for p in disk.unsynced_paths()}
    log.abandon()
    disk.power_loss()
    recovered = _open_log(tmp_path / "orders-0", disk, recovery_point=end)
    assert (unsynced, recovered.log_end_offset, batch_bytes(recovered)) == ({".log"}, end, flushed)
    assert recovered.epoch_cache.latest_epoch() == 0
