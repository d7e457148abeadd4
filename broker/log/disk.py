"""The disk port of the storage layer: every file operation `broker/log/` makes.

`Disk` lists exactly the calls the storage layer's files go through: descriptor-based
data calls (open, pread, pwrite, pwritev, ftruncate, fsync, close), whole-file reads and
sizes, and the namespace changes (mkdir, replace, unlink, rmtree, directory fsync).
`OS_DISK` is production's disk: its data calls *are* the `os` functions (no wrapper
frame on the append path) and the rest are thin calls into `os`/`shutil`/`pathlib`.
The simulator passes a disk that loses unsynced writes on a power loss instead
(`tests/support/sim_disk.py`).

Reading the namespace (listing a directory, `exists`, `is_dir`, `stat` for mtimes) is
not part of the port: every disk keeps its namespace in a real directory, and a
namespace change is durable at once on the simulated disk (lazyfs semantics: "unsynced
data is lost, the namespace is not"), so `pathlib` reads see the same names either way.
The data directory's lock file (`fcntl.flock`) is a process-level guard, not data, and
also stays on `os`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol, TypeAlias

#: What the write calls accept (the storage layer's buffers).
Buffer: TypeAlias = bytes | bytearray | memoryview


class Disk(Protocol):
    """The file operations of the storage layer (signatures of the `os` calls they stand
    for; `fd` is whatever `open` returned)."""

    # ---- data, by descriptor: the append and read paths ---------------------------------
    def open(self, path: str, flags: int, mode: int = 0o777, /) -> int: ...

    def close(self, fd: int, /) -> None: ...

    def pread(self, fd: int, length: int, offset: int, /) -> bytes: ...

    def pwrite(self, fd: int, buffer: Buffer, offset: int, /) -> int: ...

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int, /) -> int: ...

    def ftruncate(self, fd: int, length: int, /) -> None: ...

    def fsync(self, fd: int, /) -> None: ...

    # ---- data, by path -------------------------------------------------------------------
    def file_size(self, path: Path, /) -> int:
        """The size of the file's contents as a reader sees them now."""
        ...

    def read_bytes(self, path: Path, /) -> bytes:
        """The whole file as a reader sees it now (FileNotFoundError if absent)."""
        ...

    # ---- the namespace -------------------------------------------------------------------
    def mkdir(self, path: Path, /, *, parents: bool = False, exist_ok: bool = False) -> None: ...

    def replace(self, source: Path, target: Path, /) -> None: ...

    def unlink(self, path: Path, /, *, missing_ok: bool = False) -> None: ...

    def rmtree(self, path: Path, /) -> None:
        """Delete a directory tree, ignoring errors (a tree half gone stays half gone)."""
        ...

    def fsync_directory(self, path: Path, /) -> None:
        """Make the creations, renames and unlinks inside `path` durable."""
        ...


class OsDisk:
    """The real file system. The descriptor calls are the `os` builtins themselves."""

    open: Final = staticmethod(os.open)
    close: Final = staticmethod(os.close)
    pread: Final = staticmethod(os.pread)
    pwrite: Final = staticmethod(os.pwrite)
    pwritev: Final = staticmethod(os.pwritev)
    ftruncate: Final = staticmethod(os.ftruncate)
    fsync: Final = staticmethod(os.fsync)

    def __repr__(self) -> str:
        return "OS_DISK"

    def file_size(self, path: Path, /) -> int:
        return os.stat(path).st_size

    def read_bytes(self, path: Path, /) -> bytes:
        return path.read_bytes()

    def mkdir(self, path: Path, /, *, parents: bool = False, exist_ok: bool = False) -> None:
        path.mkdir(parents=parents, exist_ok=exist_ok)

    def replace(self, source: Path, target: Path, /) -> None:
        os.replace(source, target)

    def unlink(self, path: Path, /, *, missing_ok: bool = False) -> None:
        path.unlink(missing_ok=missing_ok)

    def rmtree(self, path: Path, /) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def fsync_directory(self, path: Path, /) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: Production's disk (the default of every storage class).
OS_DISK: Final[Disk] = OsDisk()
