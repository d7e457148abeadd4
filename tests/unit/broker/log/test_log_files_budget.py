"""Segment files within a broker-wide budget, and startup that never crash-loops on one
partition (issue 23, finding 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.errors import LogStorageError
from broker.log.file_budget import FileBudget
from broker.log.manager import LogManager
from minikafka.errors import ErrorCode
from tests.unit.broker.log.storage_helpers import batch

CONFIG = LogConfig(segment_bytes=1 << 20, retention_ms=-1)
NOW = 1_000


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_more_partitions_than_file_descriptors_in_the_budget(tmp_path: Path) -> None:
    before = _open_fds()
    manager = LogManager(tmp_path, CONFIG, now_ms=NOW, max_open_files=8)
    for partition in range(40):
        log = manager.get_or_create("wide", partition)
        log.append_as_leader(batch(2, tag=partition, timestamp_ms=NOW), leader_epoch=0, now_ms=NOW)
    assert manager.files.open_count <= 8
    assert _open_fds() - before <= 8 + 2  # the budget, the lock file, a spare
    for partition in range(40):
        found = manager.get("wide", partition)
        assert found is not None
        assert found.read(0, max_bytes=1 << 20).next_offset == 2
    manager.shutdown()

    restarted = LogManager(tmp_path, CONFIG, now_ms=NOW, max_open_files=8)
    assert not restarted.offline
    for partition in range(40):
        reopened = restarted.get("wide", partition)
        assert reopened is not None
        assert reopened.log_end_offset == 2
        reopened.append_as_leader(batch(1, timestamp_ms=NOW), leader_epoch=1, now_ms=NOW)
        reopened.flush()  # through a reopened descriptor when the budget closed the first one
    assert restarted.files.open_count <= 8
    assert restarted.files.evictions > 0
    restarted.shutdown()


def test_a_partition_that_cannot_be_opened_is_offline_and_never_recreated(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, CONFIG, now_ms=NOW)
    for name in ("good", "bad"):
        manager.get_or_create(name, 0).append_as_leader(
            batch(3, timestamp_ms=NOW), leader_epoch=0, now_ms=NOW
        )
    manager.shutdown()
    broken = tmp_path / "bad-0" / "00000000000000000000.log"
    broken.unlink()
    broken.mkdir()  # a directory where the segment should be: cannot be read

    restarted = LogManager(tmp_path, CONFIG, now_ms=NOW)
    good = restarted.get("good", 0)
    assert good is not None
    assert good.log_end_offset == 3
    assert ("bad", 0) in restarted.offline
    with pytest.raises(LogStorageError, match="bad-0 is offline") as raised:
        restarted.get_or_create("bad", 0)
    assert raised.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert broken.is_dir(), "the offline partition's files are left alone"
    restarted.checkpoint()
    restarted.shutdown()
    again = LogManager(tmp_path, CONFIG, now_ms=NOW)
    assert ("bad", 0) in again.offline
    again.delete("bad", 0)
    assert ("bad", 0) not in again.offline
    assert not (tmp_path / "bad-0").exists()
    again.shutdown()


def test_the_budget_evicts_the_least_recently_used() -> None:
    class Holder:
        def __init__(self) -> None:
            self.released = 0

        def release_descriptor(self) -> None:
            self.released += 1

    budget = FileBudget(max_open=2)
    first, second, third = Holder(), Holder(), Holder()
    fds = [budget.open(h, "/dev/null", os.O_RDONLY) for h in (first, second)]
    budget.touch(first)
    fds.append(budget.open(third, "/dev/null", os.O_RDONLY))
    assert (first.released, second.released, third.released) == (0, 1, 0)
    assert budget.open_count == 2
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize(
    ("uses", "evicted"),
    [
        pytest.param("ab", "a", id="open-order"),
        pytest.param("abb", "a", id="touch-the-most-recent-again"),
        pytest.param("aba", "b", id="touch-the-older"),
        pytest.param("abab", "a", id="back-to-the-most-recent"),
        pytest.param("abaa", "b", id="the-most-recent-twice"),
    ],
)
def test_touch_keeps_the_least_recently_used_order(uses: str, evicted: str) -> None:
    """Holders `a` and `b` opened in that order, then touched as `uses` says after the
    opens: a third open evicts the least recently used (the touch of the holder that is
    already the most recent skips the lock, nothing else changes)."""

    class Holder:
        def __init__(self) -> None:
            self.released = 0

        def release_descriptor(self) -> None:
            self.released += 1

    budget = FileBudget(max_open=2)
    holders = {"a": Holder(), "b": Holder(), "c": Holder()}
    fds = [budget.open(holders[name], "/dev/null", os.O_RDONLY) for name in "ab"]
    for name in uses[2:]:
        budget.touch(holders[name])
    fds.append(budget.open(holders["c"], "/dev/null", os.O_RDONLY))
    assert [name for name, h in holders.items() if h.released] == [evicted]
    for fd in fds:
        os.close(fd)
