"""FileBudget: the broker-wide budget of open segment files (`--max-open-segment-files`).

Segments open their `.log` descriptor on first use and the budget closes the least
recently used one when a new open would pass the limit, as Kafka keeps only the active
segments' files hot. Closing a descriptor loses nothing: writes are in the page cache
(fsync works on the file through any descriptor), and the next use opens it again. So a
broker with more partitions than descriptors starts and serves; only the cost of an
`open()` per cold access changes.

Thread-safe (one lock): flushes may run outside the event loop's thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final, Protocol

from broker.log.disk import OS_DISK, Disk

#: Default budget of open segment files per broker.
MAX_OPEN_SEGMENT_FILES_DEFAULT: Final = 1024


class _Holder(Protocol):
    """A segment as the budget sees it."""

    def release_descriptor(self) -> None:
        """Close the descriptor now (the budget evicts it)."""


class FileBudget:
    """At most `max_open` descriptors registered at once; LRU eviction. The files are
    opened on `disk`, which the segments sharing the budget also use."""

    def __init__(
        self, max_open: int = MAX_OPEN_SEGMENT_FILES_DEFAULT, *, disk: Disk = OS_DISK
    ) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self.max_open = max_open
        self.disk = disk
        self._open_file = disk.open
        self._open: OrderedDict[int, _Holder] = OrderedDict()
        self._lock = threading.Lock()
        #: Key of the most recently used holder (set under the lock, read without it).
        self._recent: int | None = None
        self.opens = 0  # descriptors opened (a metric for tests and benchmarks)
        self.evictions = 0

    @property
    def open_count(self) -> int:
        return len(self._open)

    def open(self, holder: _Holder, path: str, flags: int) -> int:
        """Open `path` for `holder`, first evicting the least recently used holders if
        the budget is full. The caller stores the descriptor and calls `touch` on use."""
        victims: list[_Holder] = []
        with self._lock:
            while len(self._open) >= self.max_open:
                _, victim = self._open.popitem(last=False)
                victims.append(victim)
            self.evictions += len(victims)
        for victim in victims:
            victim.release_descriptor()
        fd = self._open_file(path, flags, 0o644)
        with self._lock:
            self._open[id(holder)] = holder
            self._recent = id(holder)
            self.opens += 1
        return fd

    def touch(self, holder: _Holder) -> None:
        """`holder` used its descriptor: it is the most recently used."""
        key = id(holder)
        if key == self._recent:
            return  # already the most recently used (every append of an active segment)
        with self._lock:
            if key in self._open:
                self._open.move_to_end(key)
                self._recent = key

    def forget(self, holder: _Holder) -> None:
        """`holder` closed its descriptor itself."""
        with self._lock:
            self._open.pop(id(holder), None)
            if self._recent == id(holder):
                self._recent = None
