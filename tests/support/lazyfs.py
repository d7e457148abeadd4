"""A FUSE file system that forgets every write not yet fsynced when it loses power.

This is the power-loss nemesis (lazyfs semantics, reference/reliability.md §5.3):
`python -m tests.support.lazyfs BACKING MOUNTPOINT` serves the directory BACKING at
MOUNTPOINT. A file's contents changed since its last `fsync` live only in this
process's memory (`Shadow`), so killing this process together with the broker that
used the mount, then unmounting, is a power failure: BACKING keeps exactly what was
fsynced. Directory operations (create, mkdir, rename, unlink) reach BACKING at once,
so they survive; that is the model "unsynced data is lost, the namespace is not",
under which the broker's tmp + fsync + rename checkpoints are the only safe way to
replace a file (a rename of an unsynced file leaves an empty one after the failure).

`LazyMount` mounts, power-fails and unmounts one such file system from a test.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.shadow import Shadow

MOUNT_TIMEOUT_S = 20.0
FUSERMOUNT = "fusermount3"


def _operations_class() -> type:
    """Built on demand: importing mfusepy needs libfuse, which only the daemon needs."""
    import mfusepy

    class LazyOperations(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self, backing: str) -> None:
            self.backing = backing
            self.shadows: dict[str, Shadow] = {}
            self.next_fh = 1

        def _real(self, path: str) -> str:
            return self.backing + path

        def _shadow(self, path: str) -> Shadow:
            shadow = self.shadows.get(path)
            if shadow is None:
                shadow = Shadow(os.stat(self._real(path)).st_size)
                self.shadows[path] = shadow
            return shadow

        def _fh(self) -> int:
            self.next_fh += 1
            return self.next_fh

        # ---- namespace: straight to the backing directory (durable at once) ------
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            try:
                st = os.lstat(self._real(path))
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None
            attrs: dict[str, Any] = {
                key: getattr(st, key)
                for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")
            }
            attrs["st_atime"] = st.st_atime_ns  # nanoseconds: `use_ns`
            attrs["st_mtime"] = st.st_mtime_ns
            attrs["st_ctime"] = st.st_ctime_ns
            shadow = self.shadows.get(path)
            if shadow is not None:
                attrs["st_size"] = shadow.size
            return attrs

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._real(path))]

        def access(self, path: str, amode: int) -> int:
            if not os.access(self._real(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(self._real(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            os.rmdir(self._real(path))
            return 0

        def unlink(self, path: str) -> int:
            os.unlink(self._real(path))
            self.shadows.pop(path, None)
            return 0

        def rename(self, old: str, new: str) -> int:
            os.rename(self._real(old), self._real(new))
            self.shadows.pop(new, None)
            prefix = old + "/"
            for key in [k for k in self.shadows if k == old or k.startswith(prefix)]:
                self.shadows[new + key[len(old) :]] = self.shadows.pop(key)
            return 0

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(self._real(path), mode)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(self._real(path))
            else:
                os.utime(self._real(path), ns=times)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(self._real(path))
            return {
                key: getattr(st, key)
                for key in (
                    "f_bsize",
                    "f_frsize",
                    "f_blocks",
                    "f_bfree",
                    "f_bavail",
                    "f_files",
                    "f_ffree",
                    "f_favail",
                    "f_namemax",
                )
            }

        # ---- file data: kept here until fsync -------------------------------------
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            fd = os.open(self._real(path), os.O_WRONLY | os.O_CREAT, mode)
            os.close(fd)
            if os.stat(self._real(path)).st_size:
                self._shadow(path).truncate(0)  # O_CREAT on an existing file: O_TRUNC
            return self._fh()

        def open(self, path: str, flags: int) -> int:
            if flags & os.O_TRUNC:
                self._shadow(path).truncate(0)
            return self._fh()

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            fd = os.open(self._real(path), os.O_RDONLY)
            try:
                shadow = self.shadows.get(path)
                if shadow is None:
                    return os.pread(fd, size, offset)
                return shadow.read(fd, offset, size)
            finally:
                os.close(fd)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            self._shadow(path).write(offset, data)
            return len(data)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            self._shadow(path).truncate(length)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            shadow = self.shadows.pop(path, None)
            if shadow is not None:
                fd = os.open(self._real(path), os.O_WRONLY)
                try:
                    shadow.sync_to(fd)
                finally:
                    os.close(fd)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            return 0  # the namespace is durable at once

        def flush(self, path: str, fh: int) -> int:
            return 0  # close() is no durability point

        def release(self, path: str, fh: int) -> int:
            return 0

    return LazyOperations


def unavailable_reason() -> str | None:
    """Why a lazy mount cannot be made here (None: it can). As root, installs Debian's
    fuse3 (fusermount3) when it is missing."""
    if not sys.platform.startswith("linux"):
        return "FUSE needs Linux"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse on this machine"
    if shutil.which(FUSERMOUNT) is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "fuse3"],
            capture_output=True,
            timeout=300,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    if shutil.which(FUSERMOUNT) is None:
        return f"{FUSERMOUNT} is not installed (Debian package fuse3)"
    if os.geteuid() != 0:
        return "mounting FUSE file systems in tests needs root"
    probe = subprocess.run(
        [sys.executable, "-c", "import mfusepy"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return "mfusepy cannot load libfuse: " + probe.stderr.strip().splitlines()[-1]
    return None


class LazyMount:
    """One lazy file system: BACKING served at MOUNTPOINT by a daemon process."""

    def __init__(self, backing: Path, mountpoint: Path, log_path: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def mount(self) -> None:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.lazyfs",
                    str(self.backing),
                    str(self.mountpoint),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not (self.mounted() and os.path.ismount(self.mountpoint)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise RuntimeError(
                    f"lazy file system did not mount at {self.mountpoint}: "
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.02)

    def power_loss(self) -> None:
        """Lose every unsynced write: kill the daemon (its memory is the lost cache),
        drop the dead mount and mount BACKING afresh. Whoever used the mount must be
        dead already (a live process would keep the old mount busy)."""
        self._kill()
        self._unmount(lazy=True)
        self.mount()

    def unmount(self) -> None:
        """Unmount (unsynced writes are discarded, as at a power loss) and stop."""
        self._unmount(lazy=False)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
        self.proc = None

    def mounted(self) -> bool:
        """Listed in the mount table (a dead daemon's mount is, though unusable)."""
        target = os.path.realpath(self.mountpoint)
        with open("/proc/self/mounts") as table:
            return any(line.split()[1] == target for line in table if len(line.split()) > 1)

    def _unmount(self, *, lazy: bool) -> None:
        if not self.mounted():
            return
        args = [FUSERMOUNT, "-u", *(["-z"] if lazy else []), str(self.mountpoint)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0 and not lazy:  # busy: fall back to a lazy unmount
            subprocess.run([*args[:2], "-z", args[2]], capture_output=True, timeout=30, check=False)

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.support.lazyfs BACKING MOUNTPOINT", file=sys.stderr)
        return 2
    import mfusepy

    backing = os.path.realpath(argv[0])
    operations = _operations_class()(backing)
    mfusepy.FUSE(operations, argv[1], foreground=True, nothreads=True, fsname="lazyfs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
