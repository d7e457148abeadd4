"""LogManager: directory lock, clean-shutdown marker, checkpoints, partition lifecycle."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from broker.log.config import LogConfig
from broker.log.directory_state import PreviousStop
from broker.log.errors import DataDirLockedError, LogStorageError
from broker.log.manager import (
    CLEAN_SHUTDOWN_NAME,
    HIGH_WATERMARK_NAME,
    LOG_START_NAME,
    RECOVERY_POINT_NAME,
    LogManager,
    parse_partition_dir,
)
from tests.unit.broker.log.storage_helpers import SMALL, batch, batch_bytes, fill


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-0", ("orders", 0)),
        ("my-topic-12", ("my-topic", 12)),
        ("a.b_c-3", ("a.b_c", 3)),
        ("orders", None),
        ("orders-", None),
        ("-3", None),
        ("orders-x", None),
        ("orders-0.9f2c-delete", None),
    ],
    ids=["simple", "dash-in-topic", "dots", "no-dash", "no-number", "no-topic", "nan", "deleted"],
)
def test_parse_partition_dir(name: str, expected: tuple[str, int] | None) -> None:
    assert parse_partition_dir(name) == expected


def test_second_manager_on_same_dir_is_refused(tmp_path: Path) -> None:
    first = LogManager(tmp_path, SMALL, now_ms=0)
    with pytest.raises(DataDirLockedError, match="locked by another broker"):
        LogManager(tmp_path, SMALL, now_ms=0)
    first.shutdown()
    LogManager(tmp_path, SMALL, now_ms=0).shutdown()


def test_a_fresh_directory_proves_nothing(tmp_path: Path) -> None:
    """Issue 14 hole 5: a new (or wiped) data directory used to count as a clean shutdown,
    so its broker stayed the last ISR member and led with an empty log."""
    manager = LogManager(tmp_path / "data", SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    assert not manager.had_clean_shutdown
    assert manager.previous_stop.stop is PreviousStop.NEW_DIRECTORY
    assert manager.proven_broker_epoch == -1
    assert len(manager.directory_id) == 32
    manager.shutdown(broker_epoch=4)


@pytest.mark.parametrize(
    ("how", "boot_after", "stop", "proven"),
    [
        pytest.param(
            "clean", "boot-a", PreviousStop.CLEAN, 7, id="clean-shutdown-proves-its-epoch"
        ),
        pytest.param(
            "clean", "boot-b", PreviousStop.CLEAN, 7, id="clean-shutdown-then-reboot-still-proves"
        ),
        pytest.param(
            "crash", "boot-a", PreviousStop.CRASH_SAME_BOOT, 7, id="crash-page-cache-survived"
        ),
        pytest.param(
            "crash", "boot-b", PreviousStop.CRASH_OTHER_BOOT, -1, id="crash-after-a-reboot"
        ),
        pytest.param(
            "unregistered-crash",
            "boot-a",
            PreviousStop.UNKNOWN,
            -1,
            id="crash-before-the-first-registration",
        ),
    ],
)
def test_the_previous_stop_and_what_it_proves(
    tmp_path: Path, how: str, boot_after: str, stop: PreviousStop, proven: int
) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    directory_id = manager.directory_id
    fill(manager.get_or_create("t", 0), 2)
    if how != "unregistered-crash":
        manager.record_registration(7)
    if how == "clean":
        manager.shutdown(broker_epoch=7)
    else:
        manager.abandon()
    again = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id=boot_after)
    assert again.previous_stop.stop is stop
    assert again.proven_broker_epoch == proven
    assert again.had_clean_shutdown is (stop is PreviousStop.CLEAN)
    assert again.directory_id == directory_id
    again.shutdown()


def test_a_crash_whose_recovery_cut_more_than_a_torn_batch_proves_nothing(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    fill(manager.get_or_create("t", 0), 4)
    manager.record_registration(7)
    manager.abandon()
    segment = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    data[80] ^= 0xFF  # a flipped bit in the first batch: corruption, not a torn write
    segment.write_bytes(bytes(data))
    again = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    assert again.previous_stop.stop is PreviousStop.CRASH_SAME_BOOT
    assert again.proven_broker_epoch == -1
    again.shutdown()


def test_another_brokers_directory_is_refused(tmp_path: Path) -> None:
    LogManager(tmp_path, SMALL, now_ms=0, node_id=1).shutdown()
    with pytest.raises(LogStorageError, match="belongs to broker 1, not 2"):
        LogManager(tmp_path, SMALL, now_ms=0, node_id=2)


def test_clean_shutdown_round_trip(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0)
    log = manager.get_or_create("my-topic", 3)
    assert manager.get_or_create("my-topic", 3) is log
    fill(log, 10)
    log.update_high_watermark(12)
    before = batch_bytes(log)
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_NAME).exists()
    assert (tmp_path / HIGH_WATERMARK_NAME).read_text() == "0\n1\nmy-topic 3 12\n"
    assert (tmp_path / RECOVERY_POINT_NAME).read_text() == "0\n1\nmy-topic 3 20\n"
    assert (tmp_path / LOG_START_NAME).read_text() == "0\n1\nmy-topic 3 0\n"

    again = LogManager(tmp_path, SMALL, now_ms=0)
    assert again.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_NAME).exists()  # a crash from now on is unclean
    reopened = again.get("my-topic", 3)
    assert reopened is not None
    assert (reopened.high_watermark, reopened.log_end_offset) == (12, 20)
    assert batch_bytes(reopened) == before
    again.shutdown()


def test_crash_is_detected_and_recovered(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0)
    log = manager.get_or_create("t", 0)
    fill(log, 4)
    log.update_high_watermark(6)
    manager.checkpoint()
    fill(log, 2)
    manager.abandon()  # crash: no close, no checkpoint, no marker
    segment = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with segment.open("r+b") as f:
        f.truncate(segment.stat().st_size - 5)
    recovered = LogManager(tmp_path, SMALL, now_ms=0)
    assert not recovered.had_clean_shutdown
    log2 = recovered.get("t", 0)
    assert log2 is not None
    assert (log2.log_end_offset, log2.high_watermark) == (10, 6)
    recovered.shutdown()


def test_delete_and_leftover_delete_dirs(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0)
    fill(manager.get_or_create("t", 0), 2)
    fill(manager.get_or_create("t", 1), 2)
    manager.delete("t", 0)
    assert manager.get("t", 0) is None
    assert not (tmp_path / "t-0").exists()
    manager.shutdown()
    (tmp_path / "t-7.abc-delete").mkdir()
    (tmp_path / "t-7.abc-delete" / "00000000000000000000.log").write_bytes(b"junk")
    again = LogManager(tmp_path, SMALL, now_ms=0)
    assert [(log.topic, log.partition) for log in again.all_logs()] == [("t", 1)]
    assert not (tmp_path / "t-7.abc-delete").exists()
    again.shutdown()


def test_malformed_checkpoint_is_tolerated(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0)
    fill(manager.get_or_create("t", 0), 3)
    manager.shutdown()
    (tmp_path / HIGH_WATERMARK_NAME).write_text("garbage")
    again = LogManager(tmp_path, SMALL, now_ms=0)
    log = again.get("t", 0)
    assert log is not None
    assert (log.high_watermark, log.log_end_offset) == (0, 6)
    again.shutdown()


def test_retention_flush_and_config_update(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0)
    config = msgspec.structs.replace(SMALL, segment_bytes=300, retention_bytes=0)
    log = manager.get_or_create("t", 0, config)
    for i in range(6):
        log.append_as_leader(batch(1, value_bytes=150, tag=i), leader_epoch=0, now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    segments = len(log.segment_base_offsets())
    assert manager.run_retention(now_ms=0) == segments - 1
    manager.get_or_create("t", 0, LogConfig(flush_messages=1))
    assert log.config.flush_messages == 1
    fill(log, 1)
    manager.flush_due(now_ms=0)
    assert log.recovery_point == log.log_end_offset
    manager.shutdown()


@pytest.mark.parametrize(
    "topic", ["", "a b", "../x", "a/b"], ids=["empty", "space", "dots", "slash"]
)
def test_bad_topic_names_are_refused(tmp_path: Path, topic: str) -> None:
    manager = LogManager(tmp_path, SMALL, now_ms=0)
    with pytest.raises(ValueError, match="invalid topic"):
        manager.get_or_create(topic, 0)
    manager.shutdown()
