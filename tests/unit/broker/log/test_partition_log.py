"""PartitionLog: append/read, rolling, retention, truncation, rejected appends, reopen."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.errors import (
    CorruptRecordError,
    InconsistentOffsetError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from broker.log.partition_log import PartitionLog
from minikafka.record_batch import (
    TimestampType,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
)
from tests.unit.broker.log.storage_helpers import (
    SMALL,
    batch,
    batch_bytes,
    fill,
    open_log,
    read_all,
)


def snapshot(log: PartitionLog) -> tuple[object, ...]:
    return (
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        log.segment_base_offsets(),
        log.size_bytes(),
        log.epoch_cache.entries(),
        batch_bytes(log),
    )


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(1, 700)), min_size=1, max_size=25),
    st.integers(64, 5000),
)
def test_append_read_round_trip(shapes: list[tuple[int, int]], max_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = open_log(Path(tmp) / "orders-0")
        expected_offsets = []
        sent = []
        for i, (records, value_bytes) in enumerate(shapes):
            raw = batch(records, value_bytes=value_bytes, tag=i)
            info = log.append_as_leader(raw, leader_epoch=1, now_ms=0)
            expected_offsets.append(info.first_offset)
            sent.append(raw)
        assert log.log_end_offset == sum(r for r, _ in shapes)
        got = read_all(log)
        assert [h.base_offset for _, h, _ in got] == expected_offsets
        for (_, header, raw), original in zip(got, sent, strict=True):
            assert header.leader_epoch == 1
            assert raw[21:] == original[21:]  # only base offset + epoch were stamped
            decode_records(raw)
        # Any offset reads the batch holding it, within max_bytes unless one batch is bigger.
        for offset in range(log.log_end_offset):
            result = log.read(offset, max_bytes=max_bytes)
            headers = [h for _, h in iter_batches(result.records)]
            assert headers[0].base_offset <= offset <= headers[0].last_offset
            assert result.first_offset == headers[0].base_offset
            assert result.next_offset == headers[-1].next_offset
            assert len(result.records) <= max_bytes or len(headers) == 1
        log.close()


def test_read_bounds_and_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    fill(log, 5, records=2)  # batches [0,1] [2,3] [4,5] [6,7] [8,9]
    one = len(log.read(0, max_bytes=1).records)
    assert log.read(10, max_bytes=100).records == b""
    assert log.read(10, max_bytes=100).next_offset == 10
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        log.read(11, max_bytes=100)
    result = log.read(3, max_bytes=1 << 20, max_offset=7)
    assert [h.base_offset for _, h in iter_batches(result.records)] == [2, 4]
    assert (result.first_offset, result.next_offset) == (2, 6)
    assert log.read(3, max_bytes=1 << 20, max_offset=3).records == b""
    assert log.read(0, max_bytes=1, min_one_batch=False).records == b""
    assert len(log.read(0, max_bytes=2 * one + 1).records) == 2 * one
    log.update_high_watermark(8)
    log.maybe_increment_log_start_offset(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, max_bytes=100)
    assert log.read(5, max_bytes=100).first_offset == 4


def test_roll_by_size_keeps_segments_under_limit(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=1000)
    log = open_log(tmp_path / "orders-0", config)
    size = len(batch(1, value_bytes=200))
    for i in range(20):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets()
    assert bases == list(range(0, 20, 1000 // size))
    files = sorted(p.name for p in (tmp_path / "orders-0").glob("*.log"))
    assert files == [f"{b:020d}.log" for b in bases]
    assert all(p.stat().st_size <= 1000 for p in (tmp_path / "orders-0").glob("*.log"))
    assert [h.base_offset for _, h, _ in read_all(log)] == list(range(20))


def test_roll_by_age(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_ms=1000)
    log = open_log(tmp_path / "orders-0", config)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=5000)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=5999)
    assert log.segment_base_offsets() == [0]
    log.append_as_leader(batch(), leader_epoch=0, now_ms=6000)
    assert log.segment_base_offsets() == [0, 2]
    log.append_as_leader(batch(), leader_epoch=0, now_ms=6500)
    assert log.segment_base_offsets() == [0, 2]


def test_retention_by_time_advances_log_start(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=600, retention_ms=10_000)
    log = open_log(tmp_path / "orders-0", config)
    for i in range(12):
        raw = batch(1, value_bytes=200, timestamp_ms=1000 * i, tag=i)
        log.append_as_leader(raw, leader_epoch=0, now_ms=1000 * i)
    bases = log.segment_base_offsets()
    assert len(bases) > 3
    assert log.delete_old_segments(now_ms=20_000) == 0  # HW is 0: nothing is deletable
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_old_segments(now_ms=15_500)
    # Segments whose newest batch is older than 15_500 - 10_000 go.
    assert deleted >= 1
    assert log.log_start_offset == log.segment_base_offsets()[0] > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, max_bytes=100)
    assert log.read(log.log_start_offset, max_bytes=100).first_offset == log.log_start_offset
    remaining = len(log.segment_base_offsets())
    assert log.delete_old_segments(now_ms=10**9) == remaining - 1
    assert log.segment_base_offsets() == bases[-1:]  # the active segment always stays


def test_retention_by_size_never_past_hw_or_active(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=600, retention_bytes=1200)
    log = open_log(tmp_path / "orders-0", config)
    for i in range(12):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets()
    log.update_high_watermark(bases[2])
    assert log.delete_old_segments(now_ms=0) == 2  # only segments ending at or below the HW
    assert log.segment_base_offsets() == bases[2:]
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(now_ms=0) > 0
    sizes = [p.stat().st_size for p in sorted((tmp_path / "orders-0").glob("*.log"))]
    assert sum(sizes) == log.size_bytes()
    assert sum(sizes) >= 1200  # Kafka's rule: only delete while the rest still fits the limit
    assert sum(sizes) - sizes[0] < 1200
    assert log.segment_base_offsets()[-1] == bases[-1]
    assert log.log_start_offset == log.segment_base_offsets()[0]


def test_log_start_breach_deletes_segments_below(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=600)
    log = open_log(tmp_path / "orders-0", config)
    for i in range(12):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets()
    log.update_high_watermark(12)
    log.maybe_increment_log_start_offset(bases[2] + 1)
    assert log.delete_old_segments(now_ms=0) == 2
    assert log.log_start_offset == bases[2] + 1
    with pytest.raises(OffsetOutOfRangeError, match="above the log end offset"):
        log.maybe_increment_log_start_offset(13)


def test_log_start_may_pass_the_follower_hw_but_not_the_leo(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    fill(log, 5)  # LEO 10, HW 0 (a follower that has not heard the leader's HW yet)
    log.maybe_increment_log_start_offset(6)
    assert (log.log_start_offset, log.high_watermark) == (6, 6)
    log.maybe_increment_log_start_offset(3)  # never lowered
    assert log.log_start_offset == 6
    assert [e.start_offset for e in log.epoch_cache.entries()] == [6]


@pytest.mark.parametrize(
    ("target", "expected_leo"),
    [(10, 10), (20, 10), (9, 8), (8, 8), (3, 2), (1, 0), (0, 0)],
    ids=["at-leo", "past-leo", "mid-batch", "batch-start", "early", "first-batch", "zero"],
)
def test_truncate_to_batch_granularity(tmp_path: Path, target: int, expected_leo: int) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=300)
    log = open_log(tmp_path / "orders-0", config)
    for epoch in range(5):
        fill(log, 1, records=2, epoch=epoch)  # epoch e covers [2e, 2e+1]
    log.update_high_watermark(10)
    before = batch_bytes(log)
    log.truncate_to(target)
    assert log.log_end_offset == expected_leo
    assert log.high_watermark == min(10, expected_leo)
    assert batch_bytes(log) == before[: expected_leo // 2]
    assert [e.epoch for e in log.epoch_cache.entries()] == list(range(expected_leo // 2))
    assert all(base <= expected_leo for base in log.segment_base_offsets())
    info = log.append_as_leader(batch(), leader_epoch=9, now_ms=0)
    assert info.first_offset == expected_leo
    log.close()
    reopened = open_log(tmp_path / "orders-0", config)
    assert reopened.log_end_offset == expected_leo + 1
    assert batch_bytes(reopened)[:-1] == before[: expected_leo // 2]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    fill(log, 5)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.segment_base_offsets() == [100]
    assert log.epoch_cache.entries() == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, max_bytes=10)
    follower_batch = build_batch([(1, None, b"v", None)], base_offset=100, leader_epoch=4)
    log.append_as_follower(follower_batch, now_ms=0)
    assert log.read(100, max_bytes=1000).records == follower_batch
    log.close()
    reopened = open_log(tmp_path / "orders-0", clean=False)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 101)
    assert [(e.epoch, e.start_offset) for e in reopened.epoch_cache.entries()] == [(4, 100)]


def _bad_crc() -> bytes:
    raw = bytearray(batch(2))
    raw[-1] ^= 0xFF
    return bytes(raw)


REJECTED = [
    pytest.param(b"", InvalidRecordError, id="empty"),
    pytest.param(_bad_crc(), CorruptRecordError, id="bad-crc"),
    pytest.param(batch() + b"\x00" * 10, CorruptRecordError, id="trailing-garbage"),
    pytest.param(batch() + _bad_crc(), CorruptRecordError, id="second-batch-bad"),
    pytest.param(batch(1, value_bytes=3000), RecordTooLargeError, id="too-large"),
]


@pytest.mark.parametrize(("records", "error"), REJECTED)
def test_rejected_leader_append_changes_nothing(
    tmp_path: Path, records: bytes, error: type[Exception]
) -> None:
    config = msgspec.structs.replace(SMALL, max_message_bytes=2000)
    log = open_log(tmp_path / "orders-0", config)
    fill(log, 3)
    before = snapshot(log)
    with pytest.raises(error):
        log.append_as_leader(records, leader_epoch=1, now_ms=0)
    assert snapshot(log) == before


FOLLOWER_REJECTED = [
    pytest.param([(7, 1)], id="gap"),
    pytest.param([(5, 1)], id="overlap"),
    pytest.param([(6, 1), (9, 1)], id="gap-between-batches"),
]


@pytest.mark.parametrize("placements", FOLLOWER_REJECTED)
def test_rejected_follower_append_changes_nothing(
    tmp_path: Path, placements: list[tuple[int, int]]
) -> None:
    log = open_log(tmp_path / "orders-0")
    fill(log, 3)  # LEO 6
    before = snapshot(log)
    records = b"".join(
        build_batch([(1, None, b"v", None)], base_offset=base, leader_epoch=epoch)
        for base, epoch in placements
    )
    with pytest.raises(InconsistentOffsetError, match="expected"):
        log.append_as_follower(records, now_ms=0)
    assert snapshot(log) == before


def test_follower_append_keeps_bytes_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    records = b"".join(
        build_batch([(i, None, b"v", None)] * 2, base_offset=2 * i, leader_epoch=epoch)
        for i, epoch in enumerate([0, 0, 3, 5])
    )
    info = log.append_as_follower(records, now_ms=0)
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 7, 4)
    assert log.read(0, max_bytes=1 << 20).records == records
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()] == [
        (0, 0),
        (3, 4),
        (5, 6),
    ]
    assert log.epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 6)


def test_log_append_time_stamps_broker_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    info = log.append_as_leader(batch(3), leader_epoch=2, now_ms=777, log_append_time=True)
    assert (info.log_append_time_ms, info.max_timestamp_ms) == (777, 777)
    header = parse_header(log.read(0, max_bytes=1000).records)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp_ms == 777


def test_offset_for_timestamp(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=400)
    log = open_log(tmp_path / "orders-0", config)
    for i in range(10):
        raw = batch(2, value_bytes=100, timestamp_ms=100 * i, tag=i)  # max ts 100i + 1
        log.append_as_leader(raw, leader_epoch=0, now_ms=0)
    assert log.offset_for_timestamp(0) == (0, 1)
    assert log.offset_for_timestamp(250) == (6, 301)
    assert log.offset_for_timestamp(901) == (18, 901)
    assert log.offset_for_timestamp(902) is None
    log.update_high_watermark(20)
    log.maybe_increment_log_start_offset(7)
    assert log.offset_for_timestamp(0) == (7, 301)


@pytest.mark.parametrize(
    ("config", "appends", "now_ms", "expected"),
    [
        (LogConfig(), 5, 10**9, False),
        (LogConfig(flush_messages=4), 1, 0, False),
        (LogConfig(flush_messages=4), 2, 0, True),
        (LogConfig(flush_ms=100), 1, 99, False),
        (LogConfig(flush_ms=100), 1, 100, True),
        (LogConfig(fsync_on_append=True), 1, 0, True),
    ],
    ids=["never", "messages-below", "messages-reached", "ms-below", "ms-reached", "fsync"],
)
def test_flush_policy(
    tmp_path: Path, config: LogConfig, appends: int, now_ms: int, expected: bool
) -> None:
    log = open_log(tmp_path / "orders-0", config)
    fill(log, appends, records=2)
    log.maybe_flush(now_ms)
    assert (log.recovery_point == log.log_end_offset) is expected


def test_rolled_segments_are_flushed_without_a_policy(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=600)
    log = open_log(tmp_path / "orders-0", config)
    for i in range(6):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    assert log.recovery_point == 0
    assert log.maybe_flush(now_ms=0)
    assert log.recovery_point == log.segment_base_offsets()[-1] > 0
    assert not log.maybe_flush(now_ms=0)


def test_clean_reopen_restores_everything(tmp_path: Path) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=700)
    log = open_log(tmp_path / "orders-0", config)
    fill(log, 20, epoch=1)
    log.append_as_leader(batch(), leader_epoch=2, now_ms=0)
    log.update_high_watermark(30)
    before = snapshot(log)
    segments = len(log.segment_base_offsets())
    assert segments > 2
    log.close()
    assert len(list((tmp_path / "orders-0").glob("*.index"))) == segments
    reopened = open_log(tmp_path / "orders-0", config, high_watermark=30)
    assert snapshot(reopened) == before


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0")
    fill(log, 2)
    log.delete()
    assert not (tmp_path / "orders-0").exists()


def _index_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.index"))


def test_roll_leaves_the_index_write_to_the_next_flush(tmp_path: Path) -> None:
    """Issue 19: a roll on the append path writes no file (an index write is two fsyncs,
    tens of ms on a busy disk, on the broker's loop); the next flush (housekeeping, off
    the loop) writes the rolled segment's index."""
    config = msgspec.structs.replace(SMALL, segment_bytes=600)
    directory = tmp_path / "orders-0"
    log = open_log(directory, config)
    for i in range(4):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    rolled = log.segment_base_offsets()[:-1]
    assert rolled
    assert _index_files(directory) == []
    assert log.maybe_flush(now_ms=0)
    assert _index_files(directory) == [f"{b:020d}.index" for b in rolled]
    log.close()
    reopened = open_log(directory, config)
    assert [h.base_offset for _, h, _ in read_all(reopened)] == list(range(4))


def test_an_index_taken_before_a_truncation_is_not_left_on_disk(tmp_path: Path) -> None:
    """The flush encodes a rolled index under the log's lock and writes it outside; if
    the segment is cut meanwhile (a follower truncating) the written copy is stale and is
    removed again, never trusted at the next start."""
    config = msgspec.structs.replace(SMALL, segment_bytes=600)
    directory = tmp_path / "orders-0"
    log = open_log(directory, config)
    for i in range(4):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    first = log._segments[0]
    taken = [(first, first.index.encoded(), first.truncations)]
    log.truncate_to(1)  # cuts the first segment, which becomes the active one again
    log._persist_rolled_indexes(taken)
    assert not first.index.path.exists()
    assert log.log_end_offset == 1


@pytest.mark.parametrize(
    ("meanwhile", "kept"),
    [
        pytest.param("deleted", False, id="deleted-by-retention-no-orphan-index"),
        pytest.param("closed", True, id="closed-cleanly-keeps-the-same-index"),
    ],
)
def test_an_index_written_after_its_segment_went_away(
    tmp_path: Path, meanwhile: str, kept: bool
) -> None:
    config = msgspec.structs.replace(SMALL, segment_bytes=600)
    log = open_log(tmp_path / "orders-0", config)
    for i in range(4):
        log.append_as_leader(batch(1, value_bytes=200, tag=i), leader_epoch=0, now_ms=0)
    first = log._segments[0]
    taken = [(first, first.index.encoded(), first.truncations)]
    if meanwhile == "deleted":
        first.delete_files()
    else:
        log.close()
    log._persist_rolled_indexes(taken)
    assert first.index.path.exists() is kept
