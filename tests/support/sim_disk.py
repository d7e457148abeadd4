"""SimDisk: a `broker.log.disk.Disk` that forgets every unsynced write at a power loss.

The simulator's disk, with the fault suite's lazyfs semantics ("unsynced data is lost,
the namespace is not") without FUSE: files live in a real directory, which holds exactly
what the last fsync of each file covered; what was written or truncated since lives in
this object's memory, one `Shadow` per file (the model lazyfs keeps, shared with it), and
every read through the disk sees it. `fsync` writes a file's shadow through;
`power_loss()` drops every shadow. Namespace changes (create, mkdir, rename, unlink,
rmtree) reach the directory at once and survive, so a file renamed over its target
before its data was synced comes back short or empty, as it would on lazyfs, and a
file re-created with O_TRUNC but not synced comes back with its old contents.

`process_exit()` is a crash of the process alone: its descriptors close, the unsynced
writes stay (they are in the page cache). Descriptors are this disk's own numbers, so a
dead process's stale descriptor fails with EBADF instead of reaching another file.

Reads that bypass the disk (`pathlib` listings, `exists`, the loss-receipt reader) see
the directory: the namespace is exact, and the storage layer reads file contents that
way only after an fsync (receipts). Thread-safe (one lock): log deletion runs `rmtree`
on a thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from broker.log.disk import Buffer
from tests.support.shadow import Shadow

#: The first descriptor number the disk hands out (far from the process's real ones).
FIRST_FD: Final = 1 << 20


class _OpenFile:
    __slots__ = ("key", "real_fd")

    def __init__(self, key: str, real_fd: int) -> None:
        self.key = key
        self.real_fd = real_fd


def _key(path: str | Path) -> str:
    return os.path.abspath(path)


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + os.sep)


class SimDisk:
    """A power-losing disk over real directories (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        #: Absolute path -> the file's unsynced state (no entry: the file is in sync).
        self._shadows: dict[str, Shadow] = {}
        self._open: dict[int, _OpenFile] = {}
        self._next_fd = FIRST_FD
        self._orphans = 0
        #: Counters for tests and reports.
        self.power_losses = 0
        self.fsyncs = 0

    def __repr__(self) -> str:
        return f"SimDisk(open={len(self._open)}, unsynced={len(self._shadows)})"

    # ---- faults ------------------------------------------------------------------------
    def power_loss(self) -> None:
        """The machine lost power: every write no fsync covered is gone, and so is every
        descriptor."""
        with self._lock:
            self._close_all()
            self._shadows.clear()
            self.power_losses += 1

    def process_exit(self) -> None:
        """The process died (the machine did not): its descriptors close, nothing is lost."""
        with self._lock:
            self._close_all()

    def unsynced_paths(self) -> list[str]:
        """The files whose contents a power loss now would change (sorted)."""
        with self._lock:
            return sorted(self._shadows)

    def _close_all(self) -> None:
        for file in self._open.values():
            os.close(file.real_fd)
        self._open.clear()

    # ---- data, by descriptor -----------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o777, /) -> int:
        key = _key(path)
        real_flags = (flags & ~(os.O_TRUNC | os.O_ACCMODE)) | os.O_RDWR
        with self._lock:
            real_fd = os.open(key, real_flags, mode)
            if flags & os.O_TRUNC:
                self._shadow(key, real_fd).truncate(0)
            fd = self._next_fd
            self._next_fd += 1
            self._open[fd] = _OpenFile(key, real_fd)
            return fd

    def close(self, fd: int, /) -> None:
        with self._lock:
            os.close(self._file(fd).real_fd)
            del self._open[fd]

    def pread(self, fd: int, length: int, offset: int, /) -> bytes:
        with self._lock:
            file = self._file(fd)
            shadow = self._shadows.get(file.key)
            if shadow is None:
                return os.pread(file.real_fd, length, offset)
            return shadow.read(file.real_fd, offset, length)

    def pwrite(self, fd: int, buffer: Buffer, offset: int, /) -> int:
        data = bytes(buffer)
        with self._lock:
            file = self._file(fd)
            self._shadow(file.key, file.real_fd).write(offset, data)
        return len(data)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int, /) -> int:
        return self.pwrite(fd, b"".join(buffers), offset)

    def ftruncate(self, fd: int, length: int, /) -> None:
        with self._lock:
            file = self._file(fd)
            self._shadow(file.key, file.real_fd).truncate(length)

    def fsync(self, fd: int, /) -> None:
        with self._lock:
            file = self._file(fd)
            shadow = self._shadows.pop(file.key, None)
            if shadow is not None:
                shadow.sync_to(file.real_fd)
            self.fsyncs += 1

    # ---- data, by path -----------------------------------------------------------------
    def file_size(self, path: Path, /) -> int:
        with self._lock:
            shadow = self._shadows.get(_key(path))
            return shadow.size if shadow is not None else os.stat(path).st_size

    def read_bytes(self, path: Path, /) -> bytes:
        key = _key(path)
        with self._lock:
            shadow = self._shadows.get(key)
            if shadow is None:
                return Path(key).read_bytes()
            fd = os.open(key, os.O_RDONLY)
            try:
                return shadow.read(fd, 0, shadow.size)
            finally:
                os.close(fd)

    # ---- the namespace: durable at once ------------------------------------------------
    def mkdir(self, path: Path, /, *, parents: bool = False, exist_ok: bool = False) -> None:
        path.mkdir(parents=parents, exist_ok=exist_ok)

    def replace(self, source: Path, target: Path, /) -> None:
        old, new = _key(source), _key(target)
        with self._lock:
            os.replace(old, new)
            self._forget(new)
            for key in [k for k in self._shadows if _under(k, old)]:
                self._shadows[new + key[len(old) :]] = self._shadows.pop(key)
            for file in self._open.values():
                if _under(file.key, old):
                    file.key = new + file.key[len(old) :]

    def unlink(self, path: Path, /, *, missing_ok: bool = False) -> None:
        key = _key(path)
        with self._lock:
            try:
                os.unlink(key)
            except FileNotFoundError:
                if not missing_ok:
                    raise
                return
            self._forget(key)

    def rmtree(self, path: Path, /) -> None:
        key = _key(path)
        with self._lock:
            shutil.rmtree(key, ignore_errors=True)
            known = {k for k in self._shadows if _under(k, key)}
            known.update(f.key for f in self._open.values() if _under(f.key, key))
            for gone in sorted(k for k in known if not os.path.lexists(k)):
                self._forget(gone)

    def fsync_directory(self, path: Path, /) -> None:
        if not os.path.isdir(path):
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))

    # ---- helpers (under the lock) ------------------------------------------------------
    def _file(self, fd: int) -> _OpenFile:
        file = self._open.get(fd)
        if file is None:
            raise OSError(errno.EBADF, f"descriptor {fd} is not open on this disk")
        return file

    def _shadow(self, key: str, real_fd: int) -> Shadow:
        shadow = self._shadows.get(key)
        if shadow is None:
            shadow = self._shadows[key] = Shadow(os.fstat(real_fd).st_size)
        return shadow

    def _forget(self, prefix: str) -> None:
        """Names under `prefix` are gone: drop their shadows; descriptors still open on
        them keep writing to the unlinked inode, under a key no new file can take."""
        for key in [k for k in self._shadows if _under(k, prefix)]:
            del self._shadows[key]
        for file in self._open.values():
            if _under(file.key, prefix):
                self._orphans += 1
                file.key = f"\0unlinked-{self._orphans}"
